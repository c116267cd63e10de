package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// TestForwardReusesConnections: 200 commands forwarded one after another
// by a member that is not the Raft leader, then 200 more from 16
// goroutines at once, open at most ForwardConns connections to the
// leader's cluster port (they opened one each before); after its pooled
// connections failed, the member's next command is answered on a new
// one.
func TestForwardReusesConnections(t *testing.T) {
	accepted := make([]atomic.Int64, 3)
	tc := startCluster(t, 3, func(tc *testCluster) {
		tc.wrap = func(i int, l net.Listener) net.Listener { return countingListener{l, &accepted[i]} }
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tc.eventually("a Raft leader", func(nd *Node) bool { _, ok := nd.Leader(); return ok })
	lead, _ := tc.any().Leader()
	li := tc.index(lead.ID)
	fi := (li + 1) % 3
	fol := tc.nodes[fi]
	if err := fol.Sync(ctx); err != nil { // Raft's own connections are up
		t.Fatal(err)
	}
	before, dialedBefore := accepted[li].Load(), fol.fwd.dialed()
	noop := func() error { _, _, err := fol.commit(ctx, Command{Op: opNoop}); return err }
	for range 200 {
		if err := noop(); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for range 200 / 16 {
				if err := noop(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if d := fol.fwd.dialed() - dialedBefore; d > ForwardConns {
		t.Fatalf("the member dialed %d forward connections for 400 commands, want at most %d", d, ForwardConns)
	}
	t.Logf("400 forwarded commands: %d forward connections dialed, %d accepted by the leader", fol.fwd.dialed()-dialedBefore, accepted[li].Load()-before)
	// Raft's connections may come and go meanwhile: a few more.
	if a := accepted[li].Load() - before; a > ForwardConns+6 {
		t.Fatalf("the leader accepted %d connections for 400 forwarded commands", a)
	}

	// The member's idle forward connections fail (as when the leader
	// closed them): the next command is answered, on a new one.
	fol.fwd.mu.Lock()
	for _, ic := range fol.fwd.idle {
		ic.c.Close()
	}
	fol.fwd.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := noop()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a command after the forward connections closed: %v", err)
		}
	}
}

// TestCreateRetriedAfterLostAnswer: a member creates a topic through the
// Raft leader, which commits it, and the answer is lost on the way back
// (the connection fails or the answer comes after the deadline): the
// member tries again, and its retry, meeting the topic its first try
// recorded, succeeds rather than report that the topic exists. Another
// create of the topic is still refused.
func TestCreateRetriedAfterLostAnswer(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := ctx15(t)
	tc.eventually("a Raft leader", func(nd *Node) bool { _, ok := nd.Leader(); return ok })
	lost := false
	for i := 0; i < 5 && !lost; i++ {
		lead, _ := tc.any().Leader()
		fol := tc.nodes[(tc.index(lead.ID)+1)%3]
		if err := fol.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("t%d", i)
		fol.fwd.lose.Store(1)
		top, err := fol.CreateTopic(ctx, name, 3)
		if err != nil {
			t.Fatalf("create %s, its first answer lost: %v", name, err)
		}
		if top.Name != name || top.Epoch != 1 || len(top.Replicas) != 3 {
			t.Fatalf("create %s: %+v", name, top)
		}
		// Not forwarded if the member became the Raft leader meanwhile:
		// then again.
		lost = fol.fwd.lose.Swap(0) <= 0
	}
	if !lost {
		t.Fatal("no create was forwarded in 5 tries: the Raft leader kept changing")
	}
	if _, err := tc.any().CreateTopic(ctx, "t0", 3); !errors.Is(err, ErrTopicExists) {
		t.Fatalf("another create of t0: %v, want ErrTopicExists", err)
	}
}

// TestForwardBeforeRaftStarts: the cluster port listens before Raft has
// started (it replays its log first, slow on a busy machine); a command
// forwarded then, by a member that took this one for the Raft leader
// before it restarted, is answered not-leader, for the sender to try
// again, rather than crash the server.
func TestForwardBeforeRaftStarts(t *testing.T) {
	n := &Node{started: make(chan struct{})}
	_, _, err := decodeAnswer(n.serveForward(Command{Op: opNoop}.encode()))
	if !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a command forwarded before Raft started: %v, want ErrNotLeader", err)
	}
}
