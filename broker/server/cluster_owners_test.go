package server_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/broker/peer"
	"github.com/haraqa/haraqa/broker/server"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/client/admin"
	"github.com/haraqa/haraqa/protocol"
)

// TestClusterProducerOwnerSurvivesFailover: with tokens, the token that
// owns an idempotent producer is known to the followers (they ask their
// leader, op 20), so the leader after a failover binds the producer to
// the same token.
func TestClusterProducerOwnerSurvivesFailover(t *testing.T) {
	tc := startAuthCluster(t, map[string]string{"alice": "admin t"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice := dialAll(t, tc.addrs, client.WithToken("alice"), client.WithIdempotence(true))
	if err := alice.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := alice.Produce(ctx, "t", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	st := waitTopic(t, dialOneWith(t, tc.addrs[0], client.WithToken("cluster-tok")), "t", "10 messages in sync", func(st topicStatus) bool {
		return len(st.ISR) == 3 && st.HighWater == 10
	})
	// Alice's producer id, from the first batch of a follower's log.
	var follower int
	for i, a := range tc.addrs {
		if a != st.Leader {
			follower = i
		}
	}
	seg, err := os.ReadFile(filepath.Join(tc.cfgs[follower].Storage.Volumes[0], "topics", "t", "00000000000000000000.log"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := protocol.BatchProducer(seg)
	if pid == 0 {
		t.Fatal("the first batch has no producer id")
	}
	owners := func(addr string) map[uint64]string {
		t.Helper()
		c := dialPeer(t, addr, "cluster-tok")
		deadline := time.Now().Add(10 * time.Second)
		for {
			o, err := c.ProducerOwners(ctx, "t", []uint64{pid})
			if err == nil {
				return o
			}
			// A leader just named takes the lead a moment later.
			if !isCode(err, protocol.CodeNotLeader) || time.Now().After(deadline) {
				t.Fatalf("producer owners on %s: %v", addr, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	before := owners(st.Leader)
	if before[pid] == "" {
		t.Fatalf("the leader binds alice's producer to no one: %v", before)
	}
	if _, err := dialPeer(t, st.Leader, "alice").ProducerOwners(ctx, "t", []uint64{pid}); err == nil {
		t.Fatal("a token without the replication right was told the owners")
	}
	tc.stop(tc.index(st.Leader))
	live := tc.addrs[follower]
	st2 := waitTopic(t, dialOneWith(t, live, client.WithToken("cluster-tok")), "t", "a new leader", func(s topicStatus) bool {
		return s.Leader != "" && s.Leader != st.Leader
	})
	if after := owners(st2.Leader); after[pid] != before[pid] {
		t.Fatalf("after the failover the producer is bound to %q, before to %q", after[pid], before[pid])
	}
	// Alice goes on under the same producer, on the new leader.
	if _, err := alice.Produce(ctx, "t", []byte("y")); err != nil {
		t.Fatal(err)
	}
}

func dialOneWith(t *testing.T, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, append([]client.Option{client.WithRetries(0, 0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// startAuthCluster starts three servers as one cluster (3 replicas,
// -min-insync 2) with an auth file holding the members' token
// "cluster-tok" (replication on every topic) and tokens, each with its
// rights as an auth file line spells them ("admin t"), each server's
// configuration passed through setup (if given) too.
func startAuthCluster(t *testing.T, tokens map[string]string, setup ...func(i int, cfg *server.Config)) *testCluster {
	t.Helper()
	hash := func(tok string) string { h := sha256.Sum256([]byte(tok)); return hex.EncodeToString(h[:]) }
	lines := hash("cluster-tok") + " replication *\n"
	for _, tok := range slices.Sorted(maps.Keys(tokens)) {
		lines += hash(tok) + " " + tokens[tok] + "\n"
	}
	authFile := filepath.Join(t.TempDir(), "auth")
	brokertest.WriteFile(t, authFile, []byte(lines))
	return startTestCluster(t, 3, 3, 2, append([]func(int, *server.Config){func(i int, cfg *server.Config) {
		cfg.AuthFile = authFile
		cfg.Cluster.Token = "cluster-tok"
	}}, setup...)...)
}

// dialPeer connects to the binary port at addr as a member does (package
// peer), presenting token if set.
func dialPeer(t *testing.T, addr, token string) *peer.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := peer.Dial(ctx, addr, peer.Options{Name: "test-peer", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// statusJSON is c's server's cluster status (package admin) as JSON, for
// tests that read a few of its fields into types of their own.
func statusJSON(ctx context.Context, c *client.Client) ([]byte, error) {
	st, err := admin.New(c).ClusterStatus(ctx)
	if err != nil {
		return nil, err
	}
	return json.Marshal(st)
}

// isCode reports whether err is a server's answer of code (package peer).
func isCode(err error, code protocol.Code) bool {
	return errors.Is(err, &protocol.Error{Code: code})
}
