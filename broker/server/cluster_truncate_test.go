package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/server"
	"github.com/haraqa/haraqa/client"
)

// waitOldest waits up to 20 s until topic on the server of c starts at
// oldest and ends at next.
func waitOldest(t *testing.T, c *client.Client, topic string, oldest, next int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := c.TopicInfo(ctx, topic)
		cancel()
		if err == nil && info.Oldest == oldest && info.Next == next {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: topic %q is %+v (%v), want offsets [%d, %d)", c.Servers()[0], topic, info, err, oldest, next)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClusterTruncate: a replicated topic is truncated by its leader on
// every replica: a follower refuses it naming the leader, the leader
// refuses an offset past its high-water mark, a running follower drops
// the same offsets, and a follower that was down, whose log ends before
// the new start, starts its log again at the leader's start when it comes
// back, and holds what the others hold.
func TestClusterTruncate(t *testing.T) {
	tc := startTestCluster(t, 3, 3, 2, func(_ int, cfg *server.Config) { cfg.Storage.Entries = 10 })
	c := dialAll(t, tc.addrs)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic = "cut"
	var acked []string
	st := seedTopic(t, ctx, tc, c, topic, 100, &acked)
	produce := producing(t, ctx, c, topic, &acked)
	leader := tc.index(st.Leader)
	down, up := (leader+1)%3, (leader+2)%3

	_, err := dialOne(t, tc.addrs[up]).Truncate(ctx, topic, 10)
	if addr, ok := client.LeaderOf(err); !errors.Is(err, client.ErrNotLeader) || !ok || addr != st.Leader {
		t.Fatalf("truncate on a follower: %v, want not leader naming %s", err, st.Leader)
	}

	// The HTTP port: the same rule, 307 to the leader.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPatch, "http://"+tc.cfgs[up].HTTPAddr+"/topics/"+topic+"?before=10", nil)
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := "http://" + tc.cfgs[leader].HTTPAddr + "/topics/" + topic + "?before=10"; resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != want {
		t.Fatalf("HTTP truncate on a follower: %d, Location %q, want 307 to %s", resp.StatusCode, resp.Header.Get("Location"), want)
	}

	tc.stop(down)
	produce(50)
	if _, err := c.Truncate(ctx, topic, 151); !errors.Is(err, client.ErrOffsetOutOfRange) {
		t.Fatalf("truncate past the end: %v, want offset out of range", err)
	}
	oldest, err := c.Truncate(ctx, topic, 125)
	if err != nil || oldest != 125 {
		t.Fatalf("truncate before 125: oldest %d, %v", oldest, err)
	}
	waitOldest(t, dialOne(t, tc.addrs[leader]), topic, 125, 150)
	waitOldest(t, dialOne(t, tc.addrs[up]), topic, 125, 150)
	for _, i := range []int{leader, up} {
		if _, err := dialOne(t, tc.addrs[i]).Consume(ctx, topic, 100, 1); !errors.Is(err, client.ErrOffsetOutOfRange) {
			t.Fatalf("%s: consume before the start: %v, want offset out of range", tc.addrs[i], err)
		}
	}

	// The follower that was down holds [0, 100): nothing the leader holds
	// follows it. It starts again at 125.
	tc.start(down)
	waitTopic(t, dialOne(t, tc.addrs[leader]), topic, "the restarted follower back in sync", func(st topicStatus) bool {
		return len(st.ISR) == 3
	})
	produce(10)
	for _, i := range []int{leader, up, down} {
		waitOldest(t, dialOne(t, tc.addrs[i]), topic, 125, 160)
		// A follower serves reads once in the in-sync set, up to the
		// high-water mark it last heard.
		deadline := time.Now().Add(20 * time.Second)
		for {
			msgs, err := dialOne(t, tc.addrs[i]).Consume(ctx, topic, 125, 100)
			if errors.Is(err, client.ErrNotLeader) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond) // not in the in-sync set it last heard of yet
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.addrs[i], err)
			}
			var got []string
			for _, m := range msgs {
				got = append(got, string(m.Value))
			}
			want := acked[125:]
			if fmt.Sprint(got) == fmt.Sprint(want) {
				break
			}
			if len(got) > len(want) || fmt.Sprint(got) != fmt.Sprint(want[:len(got)]) || time.Now().After(deadline) {
				t.Fatalf("%s holds %v from 125, want %v", tc.addrs[i], got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
