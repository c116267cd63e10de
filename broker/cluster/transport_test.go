package cluster

import (
	"net"
	"testing"
	"time"
)

// TestClusterPortBounds: silent connections to a member's cluster port,
// which never send their preamble, are held only up to MaxPendingPerAddr
// from one address (past it they are closed at once) and up to
// preambleTimeout each; the members, on another address, go on: a topic
// is created through the member under attack, its command forwarded to
// the Raft leader or served there.
func TestClusterPortBounds(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := ctx15(t)
	tc.eventually("a Raft leader", func(nd *Node) bool { _, ok := nd.Leader(); return ok })
	target := tc.peers[0].Raft
	// The attacker dials from 127.0.0.2: Linux routes all of 127/8 to
	// the loopback interface, so another address needs no set-up.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 2 * time.Second}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	closedAtOnce := 0
	for range MaxPendingPerAddr + 8 {
		c, err := d.Dial("tcp", target)
		if err != nil {
			t.Skipf("cannot dial from 127.0.0.2: %v", err)
		}
		held = append(held, c)
	}
	// The first MaxPendingPerAddr wait for a preamble; the rest were
	// closed as they were accepted.
	// Read them all at once, within a second, under preambleTimeout.
	over := held[MaxPendingPerAddr:]
	closed := make(chan bool, len(over))
	for _, c := range over {
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			_, err := c.Read(make([]byte, 1))
			closed <- err != nil && !isTimeout(err)
		}()
	}
	for range over {
		if <-closed {
			closedAtOnce++
		}
	}
	if closedAtOnce != len(held)-MaxPendingPerAddr {
		t.Fatalf("%d of the %d connections over the bound per address closed at once", closedAtOnce, len(held)-MaxPendingPerAddr)
	}
	if _, err := tc.nodes[0].CreateTopic(ctx, "under-attack", 3); err != nil {
		t.Fatalf("creating a topic through the member under attack: %v", err)
	}
	// Those held are closed once preambleTimeout has passed.
	start := time.Now()
	_ = held[0].SetReadDeadline(time.Now().Add(preambleTimeout + 3*time.Second))
	if _, err := held[0].Read(make([]byte, 1)); isTimeout(err) {
		t.Fatalf("a silent connection still open %v after it was accepted", time.Since(start))
	}
	if n := tc.nodes[0].layer.refusals.Load(); n < int64(len(held)-MaxPendingPerAddr) {
		t.Fatalf("%d refusals counted, want at least %d", n, len(held)-MaxPendingPerAddr)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
