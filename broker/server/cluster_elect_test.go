package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/server"
	"github.com/haraqa/haraqa/client"
)

// TestClusterElectsTheLongestLog: a topic's leader dies while one
// in-sync follower holds an acks=leader tail the other, first in the
// in-sync set after the leader, lacks (it was stopped meanwhile, and is
// back, still in the set, when the leader dies). The controller elects
// the follower holding the tail, so the tail is kept and the others copy
// it; electing the first live member would have cut it.
func TestClusterElectsTheLongestLog(t *testing.T) {
	const memberTimeout = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// -min-insync 3: a follower whose fetch connection closes stays in
	// the set (dropping it would leave fewer); a lag time of a minute
	// keeps it there while it is down.
	tc := startTestCluster(t, 3, 3, 3, func(i int, cfg *server.Config) {
		cfg.Cluster.MemberTimeout = memberTimeout
		cfg.Cluster.LagTime = time.Minute
	})
	var acked []string
	st := seedTopic(t, ctx, tc, dialAll(t, tc.addrs), "t", 10, &acked)
	leader := tc.index(st.Leader)
	behind, ahead := tc.index(st.ISR[1]), tc.index(st.ISR[2])

	stopped := time.Now()
	if err := tc.servers[behind].ShutdownWithoutHandOff(ctx); err != nil {
		t.Fatal(err)
	}
	tc.servers[behind] = nil
	producing(t, ctx, dialOneWith(t, st.Leader, client.WithAcks(client.AcksLeader)), "t", &acked)(5)
	probe := dialOneWith(t, tc.addrs[ahead], client.WithToken(testSecret))
	probePeer := dialPeer(t, tc.addrs[ahead], testSecret)
	for {
		ends, err := probePeer.LogEnds(ctx, []string{"t"})
		if err != nil {
			t.Fatal(err)
		}
		if ends[0].Next == 15 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the follower in sync holds %v, want the 15 messages", ends[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := tc.servers[leader].ShutdownWithoutHandOff(ctx); err != nil {
		t.Fatal(err)
	}
	tc.servers[leader] = nil
	tc.start(behind)
	if down := time.Since(stopped); down > memberTimeout-1500*time.Millisecond {
		// The controller may have taken it as down too: the election
		// would not have had it to choose.
		t.Skipf("the follower was down %v, too long for the member timeout of %v", down, memberTimeout)
	}

	after := waitTopic(t, probe, "t", "a new leader", func(s topicStatus) bool {
		return s.Leader != "" && s.Leader != st.Leader
	})
	if after.Leader != tc.addrs[ahead] {
		t.Fatalf("elected %s (in-sync set %v), want %s, which holds the acks=leader tail", after.Leader, after.ISR, tc.addrs[ahead])
	}
	// The old leader back (its copy whole: it stopped cleanly), the
	// high-water mark passes the tail on all three (-min-insync 3).
	tc.start(leader)
	for _, a := range tc.addrs {
		checkTopic(t, dialOne(t, a), "t", acked)
	}
}
