package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// testCluster is n nodes on 127.0.0.1, each with its own directory.
type testCluster struct {
	t     *testing.T
	peers []Member
	dirs  []string
	nodes []*Node
	// logEnds, if set before a node opens, is its Config.LogEnds.
	logEnds func(ctx context.Context, member string, topics []string) (map[string]LogEnd, error)
	// wrap, if set before the nodes open, wraps node i's listener.
	wrap func(i int, l net.Listener) net.Listener
}

// startCluster starts n nodes, after setup.
func startCluster(t *testing.T, n int, setup ...func(*testCluster)) *testCluster {
	t.Helper()
	tc := &testCluster{t: t}
	for _, f := range setup {
		f(tc)
	}
	ls := make([]net.Listener, n)
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
		tc.peers = append(tc.peers, Member{ID: fmt.Sprintf("127.0.0.1:%d", 20000+i), Raft: l.Addr().String(), HTTP: fmt.Sprintf("http://127.0.0.1:%d", 21000+i)})
		tc.dirs = append(tc.dirs, t.TempDir())
	}
	tc.nodes = make([]*Node, n)
	for i := range n {
		tc.open(i, ls[i])
	}
	t.Cleanup(func() {
		for _, nd := range tc.nodes {
			if nd != nil {
				nd.Close()
			}
		}
	})
	return tc
}

func (tc *testCluster) open(i int, l net.Listener) {
	tc.t.Helper()
	if l == nil {
		var err error
		deadline := time.Now().Add(5 * time.Second)
		for l, err = net.Listen("tcp", tc.peers[i].Raft); err != nil; l, err = net.Listen("tcp", tc.peers[i].Raft) {
			if time.Now().After(deadline) {
				tc.t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if tc.wrap != nil {
		l = tc.wrap(i, l)
	}
	nd, err := Open(Config{Self: tc.peers[i], Peers: tc.peers, Dir: tc.dirs[i], Listener: l,
		HeartbeatTimeout: 200 * time.Millisecond, MemberTimeout: 600 * time.Millisecond, LogEnds: tc.logEnds})
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.nodes[i] = nd
}

func (tc *testCluster) kill(i int) {
	tc.t.Helper()
	if err := tc.nodes[i].Close(); err != nil {
		tc.t.Logf("closing node %d: %v", i, err)
	}
	tc.nodes[i] = nil
}

func (tc *testCluster) index(id string) int {
	return slices.IndexFunc(tc.peers, func(m Member) bool { return m.ID == id })
}

// any returns a live node other than skip.
func (tc *testCluster) any(skip ...int) *Node {
	for i, nd := range tc.nodes {
		if nd != nil && !slices.Contains(skip, i) {
			return nd
		}
	}
	tc.t.Fatal("no live node")
	return nil
}

// eventually waits up to 15 s for cond on every live node.
func (tc *testCluster) eventually(what string, cond func(*Node) bool) {
	tc.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok := true
		for _, nd := range tc.nodes {
			if nd != nil && !cond(nd) {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tc.t.Fatalf("not within 15 s: %s; status from a node: %+v", what, tc.any().Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ctx15(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestClusterCreateTopicFromAnyMember(t *testing.T) {
	tc := startCluster(t, 3)
	for i, nd := range tc.nodes {
		name := fmt.Sprintf("t%d", i)
		top, err := nd.CreateTopic(ctx15(t), name, 3)
		if err != nil {
			t.Fatalf("create %s on node %d: %v", name, i, err)
		}
		if len(top.Replicas) != 3 || top.Leader != top.Replicas[0] || top.Epoch != 1 || !slices.Equal(top.ISR, top.Replicas) {
			t.Fatalf("topic %s: %+v", name, top)
		}
	}
	tc.eventually("every member has the three topics", func(nd *Node) bool { return len(nd.State().Topics) == 3 })
	if _, err := tc.nodes[1].CreateTopic(ctx15(t), "t0", 3); !errors.Is(err, ErrTopicExists) {
		t.Fatalf("creating t0 again: %v, want ErrTopicExists", err)
	}
	if _, err := tc.nodes[1].CreateTopic(ctx15(t), "big", 4); !errors.Is(err, ErrNotEnoughMembers) {
		t.Fatalf("4 replicas of 3 members: %v, want ErrNotEnoughMembers", err)
	}
	// Placement is the client's.
	top, _ := tc.nodes[2].Topic("t1")
	want, _ := tc.nodes[0].Topic("t1")
	if !slices.Equal(top.Replicas, want.Replicas) {
		t.Fatalf("members disagree on t1's replicas: %v and %v", top.Replicas, want.Replicas)
	}
}

func TestClusterFailoverOfATopicLeader(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := ctx15(t)
	// A topic led by a member that is not the Raft leader, and one led by
	// the Raft leader: both move when their leader goes.
	top, err := tc.any().CreateTopic(ctx, "orders", 3)
	if err != nil {
		t.Fatal(err)
	}
	dead := tc.index(top.Leader)
	tc.kill(dead)
	tc.eventually("orders has a new leader", func(nd *Node) bool {
		t, _ := nd.Topic("orders")
		return t.Leader != "" && t.Leader != top.Leader && t.Epoch == 2
	})
	moved, _ := tc.any().Topic("orders")
	if moved.InSync(top.Leader) || moved.ISR[0] != moved.Leader || len(moved.ISR) != 2 {
		t.Fatalf("after the leader died: %+v", moved)
	}
	// The member comes back: it is not in sync until the leader says so,
	// which it says again until the change holds (the controller may drop
	// the member once more before it sees it back).
	tc.open(dead, nil)
	if err := tc.nodes[dead].SetISR(ctx, "orders", moved.Epoch-1, moved.Version, append(slices.Clone(moved.ISR), top.Leader)); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("an in-sync change under the old epoch: %v, want ErrStaleEpoch", err)
	}
	tc.eventually("the member is back in sync", func(nd *Node) bool {
		t, _ := nd.Topic("orders")
		if len(t.ISR) < 3 && nd == tc.nodes[dead] {
			isr := append(slices.DeleteFunc(slices.Clone(t.ISR), func(id string) bool { return id == top.Leader }), top.Leader)
			_ = nd.SetISR(ctx, "orders", t.Epoch, t.Version, isr)
		}
		return len(t.ISR) == 3 && t.Epoch == moved.Epoch && t.Leader == moved.Leader
	})
}

func TestClusterRaftLeaderDies(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := ctx15(t)
	var rl Member
	tc.eventually("a Raft leader", func(nd *Node) bool {
		m, ok := nd.Leader()
		rl = m
		return ok
	})
	// Find a name the Raft leader leads.
	var name string
	for i := 0; name == ""; i++ {
		n := fmt.Sprintf("topic-%d", i)
		top, err := tc.any().CreateTopic(ctx, n, 2)
		if err != nil {
			t.Fatal(err)
		}
		if top.Leader == rl.ID {
			name = n
		}
	}
	tc.kill(tc.index(rl.ID))
	start := time.Now()
	tc.eventually("the Raft leader's topic moved", func(nd *Node) bool {
		t, _ := nd.Topic(name)
		return t.Leader != "" && t.Leader != rl.ID
	})
	t.Logf("failover after the Raft leader died: %v", time.Since(start).Round(time.Millisecond))
}

func TestClusterLastReplicaStanding(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := ctx15(t)
	var rl Member
	tc.eventually("a Raft leader", func(nd *Node) bool {
		m, ok := nd.Leader()
		rl = m
		return ok
	})
	// A topic of one replica, not on the Raft leader.
	var top Topic
	for i := 0; top.Name == ""; i++ {
		t1, err := tc.any().CreateTopic(ctx, fmt.Sprintf("solo-%d", i), 1)
		if err != nil {
			t.Fatal(err)
		}
		if t1.Leader != rl.ID {
			top = t1
		}
	}
	dead := tc.index(top.Leader)
	tc.kill(dead)
	tc.eventually("the topic has no leader and keeps its in-sync set", func(nd *Node) bool {
		t, _ := nd.Topic(top.Name)
		return t.Leader == "" && slices.Equal(t.ISR, top.ISR) && t.Epoch == 2
	})
	tc.open(dead, nil)
	tc.eventually("the last replica leads again", func(nd *Node) bool {
		t, _ := nd.Topic(top.Name)
		return t.Leader == top.Leader && t.Epoch == 3
	})
}

func TestClusterRestartKeepsMetadata(t *testing.T) {
	tc := startCluster(t, 3)
	if _, err := tc.any().CreateTopic(ctx15(t), "kept", 3); err != nil {
		t.Fatal(err)
	}
	for i := range tc.nodes {
		tc.kill(i)
	}
	for i := range tc.nodes {
		tc.open(i, nil)
	}
	tc.eventually("the topic is known after a full restart", func(nd *Node) bool {
		_, ok := nd.Topic("kept")
		return ok
	})
}

// TestClusterRecordsNewHTTP: a member restarted with another HTTP URL
// (a certificate added: https) records it, on every member, in place of
// the one the cluster first recorded; a URL the same changes nothing.
func TestClusterRecordsNewHTTP(t *testing.T) {
	tc := startCluster(t, 3)
	if err := tc.any().RecordHTTP(ctx15(t)); err != nil {
		t.Fatal(err)
	}
	tc.kill(1)
	tc.peers[1].HTTP = strings.Replace(tc.peers[1].HTTP, "http://", "https://", 1)
	tc.open(1, nil)
	if err := tc.nodes[1].RecordHTTP(ctx15(t)); err != nil {
		t.Fatal(err)
	}
	tc.eventually("the new URL recorded", func(nd *Node) bool {
		m, ok := nd.Member(tc.peers[1].ID)
		return ok && m.HTTP == tc.peers[1].HTTP
	})
}

// TestClusterSetReplicasBounds: a replication factor change is a move
// (the target placed as a new topic's); a topic that moves cannot be
// changed again, nor a fifth while four move (each copies a whole log),
// nor one past the members. Moves here never end: no replica manager
// takes the new replicas into the in-sync sets.
func TestClusterSetReplicasBounds(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := ctx15(t)
	nd := tc.any()
	for i := range 5 {
		if _, err := nd.CreateTopic(ctx, fmt.Sprintf("t%d", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nd.SetReplicas(ctx, "t0", 4); !errors.Is(err, ErrNotEnoughMembers) {
		t.Fatalf("4 replicas of 3 members: %v, want ErrNotEnoughMembers", err)
	}
	if _, err := nd.SetReplicas(ctx, "none", 2); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("a missing topic: %v, want ErrTopicNotFound", err)
	}
	for i := range 4 {
		tp, err := nd.SetReplicas(ctx, fmt.Sprintf("t%d", i), 3)
		if err != nil || len(tp.Target) != 3 || len(tp.Replicas) != 3 {
			t.Fatalf("t%d to 3 replicas: %+v %v, want a target of 3", i, tp, err)
		}
	}
	if _, err := nd.SetReplicas(ctx, "t0", 2); !errors.Is(err, ErrTopicMoving) || !strings.Contains(err.Error(), "moves to") {
		t.Fatalf("a topic that moves: %v, want ErrTopicMoving", err)
	}
	if _, err := nd.SetReplicas(ctx, "t4", 3); !errors.Is(err, ErrTopicMoving) || !strings.Contains(err.Error(), "at most 4") {
		t.Fatalf("a fifth move: %v, want ErrTopicMoving naming the bound", err)
	}
	if tp, err := nd.SetReplicas(ctx, "t4", 1); err != nil || len(tp.Target) != 0 {
		t.Fatalf("t4 to the replicas it has: %+v %v, want nothing to move", tp, err)
	}
}

// TestClusterStepBack: a member that cannot vouch for its copy (it
// restarted after a crash, or part of it is unreadable) leaves the
// in-sync set; a topic it led is left to the controller, which elects a
// live member of the set under a new epoch (never the member stepping
// back); the last of the set stepping back too leaves the set to
// whichever of those that stepped back since the last election holds
// the log that ends furthest, which the controller then elects.
func TestClusterStepBack(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := ctx15(t)
	tc.eventually("a Raft leader", func(nd *Node) bool { _, ok := nd.Leader(); return ok })
	top, err := tc.any().CreateTopic(ctx, "three", 3)
	if err != nil {
		t.Fatal(err)
	}
	old := top.Leader
	if err := tc.nodes[tc.index(old)].StepBack(ctx, []LogEnd{{Topic: top.Name, Epoch: 1, End: 100}}); err != nil {
		t.Fatal(err)
	}
	var now Topic
	tc.eventually("another member leads, the old leader out of the in-sync set", func(nd *Node) bool {
		now, _ = nd.Topic(top.Name)
		return now.Leader != "" && now.Leader != old && !now.InSync(old) && len(now.ISR) == 2 && now.Epoch == top.Epoch+2
	})
	// Both others step back: the set is left to the one whose log ends
	// furthest, the second; the old leader's end was forgotten when the
	// new leader was elected (it follows that leader's log since).
	for i, id := range now.ISR {
		if err := tc.nodes[tc.index(id)].StepBack(ctx, []LogEnd{{Topic: top.Name, Epoch: 1, End: int64(50 + i)}}); err != nil {
			t.Fatal(err)
		}
	}
	want := now.ISR[1]
	tc.eventually("the replica holding the most leads", func(nd *Node) bool {
		t2, _ := nd.Topic(top.Name)
		return t2.Leader == want && slices.Equal(t2.ISR, []string{want}) && len(t2.Stepped) == 0
	})
}
