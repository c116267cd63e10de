package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
)

// TestClusterReaderOutlastsTwoDown: a Reader of a replicated topic whose
// server goes down while a second server is down too (no other replica
// can serve it, the Raft group has no quorum) keeps waiting, within its
// context, instead of giving up after its retries; once a server is back
// and the topic has a leader again, it goes on from where it was.
func TestClusterReaderOutlastsTwoDown(t *testing.T) {
	tc := startTestCluster(t, 3, 3, 2)
	c := dialAll(t, tc.addrs, client.WithIdempotence(true))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const topic = "events"
	if err := c.CreateTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	var acked []string
	produce := producing(t, ctx, c, topic, &acked)
	produce(50)
	waitTopic(t, dialOne(t, tc.addrs[0]), topic, "50 messages in sync", func(st topicStatus) bool {
		return len(st.ISR) == 3 && st.HighWater == 50
	})
	r, err := c.NewReader(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []string
	for len(got) < 50 {
		msgs, err := r.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			got = append(got, string(m.Value))
		}
	}
	// Down: the Reader's server, first, while the Reader waits there for
	// new messages (its last Next sent the request for them), so that the
	// wait is answered as the server shuts down or cut with its
	// connection; then one other.
	on := tc.index(r.Server())
	other := (on + 1) % 3
	type next struct {
		msgs []string
		err  error
	}
	done := make(chan next, 1)
	go func() {
		msgs, err := r.Next(ctx)
		var vals []string
		for _, m := range msgs {
			vals = append(vals, string(m.Value))
		}
		done <- next{vals, err}
	}()
	t.Logf("stopping %s (the Reader's) and %s", tc.addrs[on], tc.addrs[other])
	tc.stop(on)
	tc.stop(other)
	select {
	case n := <-done:
		t.Fatalf("Next returned with two of three servers down: %d messages, %v", len(n.msgs), n.err)
	case <-time.After(5 * time.Second):
	}
	tc.start(other)
	// Produces are refused (not enough replicas, nothing stored) until the
	// server back has caught up and is in sync again: each stopped server
	// left the in-sync set as it went. A status read meanwhile may be one
	// the cluster had moved past while it had no quorum.
	once := dialAll(t, tc.addrs, client.WithIdempotence(false))
	for {
		_, err := once.Produce(ctx, topic, []byte(fmt.Sprintf("m%05d", 50)))
		if err == nil {
			break
		}
		if !errors.Is(err, client.ErrNotEnoughReplicas) {
			t.Fatalf("produce after a server came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	n := <-done
	if n.err != nil {
		t.Fatalf("Next after a server came back: %v", n.err)
	}
	if len(n.msgs) == 0 || n.msgs[0] != fmt.Sprintf("m%05d", 50) {
		t.Fatalf("Next after a server came back gave %q, want m00050 first", n.msgs)
	}
}

// cutProxy forwards connections to one server; once cut is set, the
// first answer the server sends on any connection is dropped and that
// connection closed, after its request reached the server.
type cutProxy struct {
	ln  net.Listener
	to  string
	cut atomic.Bool
}

func startCutProxy(t *testing.T, to string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, to: to}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() {
				defer c.Close()
				defer s.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 && p.cut.CompareAndSwap(true, false) {
						return
					}
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

// TestClusterProduceWithoutIdempotenceNotRepeated: a produce without
// idempotence whose answer is lost after it reached the leader fails with
// a connection error, as on one server, and is not sent again to another
// replica, which would store it twice.
func TestClusterProduceWithoutIdempotenceNotRepeated(t *testing.T) {
	tc := startTestCluster(t, 3, 3, 2)
	var proxies []*cutProxy
	var addrs []string
	for _, a := range tc.addrs {
		p := startCutProxy(t, a)
		proxies = append(proxies, p)
		addrs = append(addrs, p.ln.Addr().String())
	}
	c := dialAll(t, addrs, client.WithIdempotence(false))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic = "once"
	if err := c.CreateTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	st := waitTopic(t, dialOne(t, tc.addrs[0]), topic, "a leader and three in sync", func(st topicStatus) bool {
		return st.Leader != "" && len(st.ISR) == 3
	})
	if _, err := c.Produce(ctx, topic, []byte("first")); err != nil {
		t.Fatal(err)
	}
	proxies[tc.index(st.Leader)].cut.Store(true)
	_, err := c.Produce(ctx, topic, []byte("second"))
	if !errors.Is(err, client.ErrConnection) {
		t.Fatalf("a produce whose answer was lost: %v, want a connection error", err)
	}
	// Whatever was stored was stored before the produce returned.
	if st := topicOf(t, dialOne(t, st.Leader), topic); st.Next != 2 {
		t.Fatalf("the leader holds %d messages, want 2: the second stored more than once", st.Next)
	}
	checkTopic(t, dialOne(t, st.Leader), topic, []string{"first", "second"})
}
