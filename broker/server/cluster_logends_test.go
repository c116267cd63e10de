package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// TestClusterLogEnds: every replica, leader or follower, answers log ends
// (op 23) from its own log: its last leader epoch and next offset, and
// -1, -1 for a topic it does not hold; a token without the replication
// right on every topic named is refused.
func TestClusterLogEnds(t *testing.T) {
	tc := startAuthCluster(t, map[string]string{"alice": "admin t", "bob": "replication t"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice := dialAll(t, tc.addrs, client.WithToken("alice"))
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
	for _, addr := range tc.addrs {
		// A follower in sync may not have stored the last batch's epoch
		// yet when the high-water mark passed it: wait for it.
		c := dialPeer(t, addr, "cluster-tok")
		var ends []protocol.LogEnd
		deadline := time.Now().Add(10 * time.Second)
		for {
			var err error
			if ends, err = c.LogEnds(ctx, []string{"t", "nope"}); err != nil {
				t.Fatalf("log ends on %s: %v", addr, err)
			}
			if ends[0] == (protocol.LogEnd{Epoch: st.Epoch, Next: 10}) || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if want := []protocol.LogEnd{{Epoch: st.Epoch, Next: 10}, protocol.LogEndNone}; ends[0] != want[0] || ends[1] != want[1] {
			t.Errorf("log ends on %s (leader %s): %v, want %v", addr, st.Leader, ends, want)
		}
	}
	for _, tok := range []struct {
		name   string
		topics []string
	}{
		{"alice", []string{"t"}}, // admin, not replication
		{"bob", []string{"t", "other"}},
	} {
		_, err := dialPeer(t, st.Leader, tok.name).LogEnds(ctx, tok.topics)
		if !isCode(err, protocol.CodeForbidden) {
			t.Errorf("log ends of %v with %s's token: %v, want forbidden", tok.topics, tok.name, err)
		}
	}
	if _, err := dialPeer(t, st.Leader, "bob").LogEnds(ctx, []string{"t"}); err != nil {
		t.Errorf("log ends of t with the replication right on t: %v", err)
	}
}
