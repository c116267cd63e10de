package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
)

// crashed stops server i of tc as a crash would leave it: no hand-off,
// and its store not marked as closed cleanly (the mark a clean stop
// writes is removed), then damage (if given) changes its copy of topic's
// only segment file while it is down.
func crashed(t *testing.T, tc *testCluster, i int, topic string, damage func(t *testing.T, path string)) {
	t.Helper()
	stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tc.servers[i].ShutdownWithoutHandOff(stop); err != nil {
		t.Fatal(err)
	}
	tc.servers[i] = nil
	vol := tc.cfgs[i].Storage.Volumes[0]
	if err := os.Remove(filepath.Join(vol, "CLEAN")); err != nil {
		t.Fatalf("the clean-stop mark: %v", err)
	}
	if damage == nil {
		return
	}
	logs, err := filepath.Glob(filepath.Join(vol, "topics", topic, "*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("segments of %s: %v %v", topic, logs, err)
	}
	slices.Sort(logs)
	damage(t, logs[len(logs)-1])
}

// cutTo60 cuts a file to 60% of its size: what a power loss leaves of a
// log whose tail was never fsynced.
func cutTo60(t *testing.T, path string) {
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()*6/10); err != nil {
		t.Fatal(err)
	}
}

// flipMiddle flips 64 bytes in the middle of a file.
func flipMiddle(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) / 2; i < len(b)/2+64 && i < len(b); i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestClusterUncleanRestart: a replica that restarts after a crash, back
// before the cluster found it gone (member timeout and lag time of a
// minute: only the replica itself can act), with its copy of the topic
// cut short (a power loss under -fsync other than always) or corrupted in
// the middle on its only volume. It leaves the in-sync set before it
// counts or leads again (KIP-966): a leader hands the lead to an in-sync
// member, whose log holds everything acknowledged, rather than lead with
// its short log and have the followers cut theirs to it; a damaged copy
// is cut at its hole and copied again. Every acknowledged message ends up
// on every replica, once, in order, and the replica is back in sync.
func TestClusterUncleanRestart(t *testing.T) {
	for _, tt := range []struct {
		name   string
		leader bool
		damage func(*testing.T, string)
	}{
		{"leader cut short", true, cutTo60},
		{"leader corrupted", true, flipMiddle},
		{"follower cut short", false, cutTo60},
		{"follower corrupted", false, flipMiddle},
		{"leader killed", true, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tc := startTestCluster(t, 3, 3, 2, noDetection)
			c := dialAll(t, tc.addrs, client.WithIdempotence(true))
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			const topic = "unclean"
			var acked []string
			st := seedTopic(t, ctx, tc, c, topic, 400, &acked)
			victim := st.Leader
			if !tt.leader {
				victim = st.ISR[1]
			}
			i := tc.index(victim)
			crashed(t, tc, i, topic, tt.damage)
			tc.start(i)
			if tt.leader {
				st = waitTopic(t, dialOne(t, tc.addrs[(i+1)%3]), topic, "another replica leading", func(s topicStatus) bool {
					return s.Leader != "" && s.Leader != victim && s.Epoch > st.Epoch
				})
			}
			produce := producing(t, ctx, c, topic, &acked)
			produce(100)
			waitTopic(t, dialOne(t, victim), topic, "the restarted replica back in sync", func(s topicStatus) bool {
				return len(s.ISR) == 3 && s.HighWater == int64(len(acked)) && s.Next == int64(len(acked))
			})
			for _, a := range tc.addrs {
				checkTopic(t, dialOne(t, a), topic, acked)
			}
			if tt.name == "leader corrupted" || tt.name == "follower corrupted" {
				// Cut at its hole and copied again: counted, and no
				// longer under repair once back in sync.
				waitMetric(t, tc.cfgs[i].HTTPAddr, "haraqa_replica_repairs_total 1")
				waitMetric(t, tc.cfgs[i].HTTPAddr, "haraqa_replica_repairing_topics 0")
			}
			if tt.leader && st.Leader == victim {
				t.Fatal(fmt.Sprintf("the restarted leader %s leads again", victim))
			}
		})
	}
}
