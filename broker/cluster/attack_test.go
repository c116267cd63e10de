package cluster

import (
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestForwardRefusesControllerCommands: a member list or a forget
// forwarded to the Raft leader is refused, even with the members' token:
// only the leader's controller makes them. Other commands are taken.
func TestForwardRefusesControllerCommands(t *testing.T) {
	tc := startCluster(t, 3)
	tc.eventually("a Raft leader and the member list", func(n *Node) bool {
		_, ok := n.Leader()
		return ok && len(n.Status().Members) == 3
	})
	leader, _ := tc.any().Leader()
	from := tc.nodes[(tc.index(leader.ID)+1)%3]
	forward := func(c Command) error {
		t.Helper()
		conn, err := from.layer.dial(leader.Raft, kindForward, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if err := writeMsg(conn, c.encode()); err != nil {
			t.Fatal(err)
		}
		ans, err := readMsg(conn)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = decodeAnswer(ans)
		return err
	}
	evil := []Member{{ID: "10.9.9.9:1", Raft: "10.9.9.9:2", HTTP: "http://evil.example"}}
	if err := forward(Command{Op: opMembers, Members: evil}); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("a forwarded member list: %v, want ErrBadCommand", err)
	}
	if err := forward(Command{Op: opForget, Member: from.cfg.Self.ID}); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("a forwarded forget: %v, want ErrBadCommand", err)
	}
	if err := forward(Command{Op: opNoop}); err != nil {
		t.Fatalf("a forwarded noop: %v", err)
	}
	for _, n := range tc.nodes {
		if st := n.Status(); len(st.Members) != 3 || slices.ContainsFunc(st.Members, func(m Member) bool { return m.ID == evil[0].ID }) {
			t.Fatalf("members after the attempts: %+v", st.Members)
		}
	}
}

// TestUnreachableMemberNotAVoter: a member added (hrqa cluster add)
// whose cluster port does not answer stays out of the Raft group, which
// keeps committing; it becomes a voter once its port answers.
func TestUnreachableMemberNotAVoter(t *testing.T) {
	tc := startCluster(t, 3)
	tc.eventually("a Raft leader and the member list", func(n *Node) bool {
		_, ok := n.Leader()
		return ok && len(n.Status().Members) == 3
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	m := Member{ID: "127.0.0.1:29999", Raft: addr, HTTP: "http://127.0.0.1:29998"}
	if err := tc.any().AddMember(ctx15(t), m); err != nil {
		t.Fatal(err)
	}
	leaderOf := func() *Node {
		for _, n := range tc.nodes {
			if n.IsLeader() {
				return n
			}
		}
		return nil
	}
	voter := func() bool {
		n := leaderOf()
		if n == nil {
			return false
		}
		f := n.raft.GetConfiguration()
		return f.Error() == nil && slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool { return string(s.ID) == m.ID })
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		n := leaderOf()
		if n != nil {
			n.ctl.reachMu.Lock()
			_, checked := n.ctl.unreached[m.ID]
			n.ctl.reachMu.Unlock()
			if checked {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the new member's cluster port was not checked within 15 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if voter() {
		t.Fatal("an unreachable member was made a Raft voter")
	}
	if err := tc.any().Sync(ctx15(t)); err != nil {
		t.Fatalf("a command after the unreachable member joined: %v", err)
	}
	// Once it answers it is added.
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	deadline = time.Now().Add(15 * time.Second)
	for !voter() {
		if time.Now().After(deadline) {
			t.Fatal("the member was not made a voter within 15 s of its port answering")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStarvedLeaderTakesNoneDown: while the Raft leader's own dials fail
// for want of descriptors (a connection flood on its ports), a member
// whose heartbeats fail is not taken as down, nor its topics moved; once
// its dials go through again it is.
func TestStarvedLeaderTakesNoneDown(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := ctx15(t)
	top, err := tc.any().CreateTopic(ctx, "orders", 3)
	if err != nil {
		t.Fatal(err)
	}
	var raftLeader *Node
	tc.eventually("a Raft leader", func(n *Node) bool {
		if n.IsLeader() {
			raftLeader = n
		}
		return raftLeader != nil
	})
	victim := -1
	for i, n := range tc.nodes {
		if n != raftLeader {
			victim = i
			break
		}
	}
	victimID := tc.peers[victim].ID
	stop := make(chan struct{})
	starving := make(chan struct{})
	go func() {
		defer close(starving)
		for {
			raftLeader.layer.starved.Store(time.Now().UnixNano())
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	tc.kill(victim)
	// Three member timeouts: it would be down after one.
	until := time.Now().Add(3 * raftLeader.cfg.MemberTimeout)
	for time.Now().Before(until) {
		if tp, _ := raftLeader.Topic("orders"); !tp.InSync(victimID) || tp.Epoch != top.Epoch {
			close(stop)
			t.Fatalf("a member taken as down while the Raft leader was out of descriptors: %+v", tp)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	<-starving
	tc.eventually("the member is taken as down once the leader's dials go through", func(n *Node) bool {
		tp, _ := n.Topic("orders")
		return !tp.InSync(victimID)
	})
}
