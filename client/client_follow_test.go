package client_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
)

// --- follow -------------------------------------------------------------------

// Messages follows a topic while another goroutine produces to it: every
// message in order, no gaps, and the loop ends when ctx is cancelled.
func TestMessagesFollow(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	prod := dial(t, srv.Addr)
	cons := dial(t, srv.Addr)
	ctx := testCtx(t)
	if err := prod.CreateTopic(ctx, "follow"); err != nil {
		t.Fatal(err)
	}
	const n = 3000
	var followed atomic.Int64 // messages the follower has seen
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	produced := make(chan error, 1)
	go func() {
		r := rand.New(rand.NewPCG(2, 3))
		for i := 0; i < n; {
			k := min(1+r.IntN(60), n-i)
			msgs := make([][]byte, k)
			for j := range msgs {
				msgs[j] = fmt.Appendf(nil, "v%d", i+j)
			}
			if _, err := prod.Produce(ctx, "follow", msgs...); err != nil {
				produced <- err
				cancel()
				return
			}
			i += k
			if r.IntN(8) == 0 && i < n {
				// Now and then, let the follower catch up and park, so
				// that the next produce wakes a long poll.
				caughtUp := until(func() bool {
					return followed.Load() == int64(i) && srv.Broker.Stats().ParkedPolls == 1
				})
				if !caughtUp {
					produced <- fmt.Errorf("the follower did not catch up with %d messages and park: at %d", i, followed.Load())
					cancel()
					return
				}
			}
		}
		produced <- nil
	}()

	var got int64
	ended := make(chan struct{})
	var cancelledAt time.Time
	for m, err := range cons.Messages(fctx, "follow", 0) {
		if err != nil {
			t.Fatalf("Messages after %d: %v", got, err)
		}
		if m.Offset != got || string(m.Value) != fmt.Sprint("v", got) {
			t.Fatalf("message %d: offset %d value %q", got, m.Offset, m.Value)
		}
		got++
		followed.Store(got)
		if got == n {
			if err := <-produced; err != nil {
				t.Fatal(err)
			}
			go func() {
				until(func() bool { return srv.Broker.Stats().ParkedPolls > 0 }) // the follower parks in a long poll
				cancelledAt = time.Now()
				cancel()
				close(ended)
			}()
		}
		if got > n {
			t.Fatalf("message past the end: %+v", m)
		}
	}
	if got != n { // the loop ended early: the producer failed
		select {
		case err := <-produced:
			t.Fatalf("followed %d messages, want %d: %v", got, n, err)
		default:
			t.Fatalf("followed %d messages, want %d", got, n)
		}
	}
	<-ended
	if d := time.Since(cancelledAt); d > 3*time.Second {
		t.Fatalf("the loop took %s to end after cancel", d)
	}
}

// Messages from a negative offset starts that far back from the end and
// then follows.
func TestMessagesFromEnd(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	produceNumbered(t, c, "tail", "m", 20, 20)
	other := dial(t, srv.Addr)
	var got []string
	for m, err := range c.Messages(ctx, "tail", -3) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(m.Value))
		if len(got) == 3 {
			produceNumbered(t, other, "tail", "n", 2, 2)
		}
		if len(got) == 5 {
			break
		}
	}
	if want := []string{"m17", "m18", "m19", "n0", "n1"}; !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// An idle follower waits in long polls, not a busy loop: its poll asks the
// server to wait seconds, the server parks it, and a new message costs
// exactly one more poll, parked in turn.
func TestMessagesIdleNoBusyLoop(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	px := startProxy(t, srv.Addr)
	c := dial(t, px.Addr())
	other := dial(t, srv.Addr)
	ctx, cancel := context.WithCancel(testCtx(t))
	if err := c.CreateTopic(ctx, "idle"); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range c.Messages(ctx, "idle", 0) {
			if err != nil {
				t.Error(err)
				return
			}
			got <- string(m.Value)
		}
	}()
	waitFor(t, "the follower to park", func() bool { return srv.Broker.Stats().ParkedPolls == 1 })
	if w := time.Duration(px.consumeWaitMs.Load()) * time.Millisecond; w < time.Second {
		t.Errorf("the follower's poll asks the server to wait %s, not a long poll", w)
	}
	before, polls := srv.Broker.Stats().Requests, px.consumes.Load()
	if _, err := other.Produce(ctx, "idle", []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-got:
		if v != "x" {
			t.Fatalf("followed %q, want x", v)
		}
	case <-time.After(ioTimeout):
		t.Fatal("the parked follower did not get the new message")
	}
	waitFor(t, "the follower to park again", func() bool {
		return px.consumes.Load() > polls && srv.Broker.Stats().ParkedPolls == 1
	})
	if n := px.consumes.Load() - polls; n != 1 {
		t.Errorf("the follower made %d polls for one message, want 1", n)
	}
	if n := srv.Broker.Stats().Requests - before; n != 2 {
		t.Errorf("%d requests reached the server for one produce, want 2: the produce and the follower's next poll", n)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("the follower did not end after cancel")
	}
}

// While a Messages loop waits on an idle topic, the same client's other
// calls are answered at once, not after the long poll.
func TestMessagesDoesNotBlockOtherCalls(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	if err := c.CreateTopic(ctx, "quiet"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range c.Messages(ctx, "quiet", 0) {
		}
	}()
	waitFor(t, "a parked poll", func() bool { return srv.Broker.Stats().ParkedPolls > 0 })
	call := func(name string, f func(ctx context.Context) error) {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		defer ccancel()
		start := time.Now()
		if err := f(cctx); err != nil {
			t.Errorf("%s while the same client follows an idle topic: %v after %s (queued behind the long poll?)",
				name, err, time.Since(start).Round(time.Millisecond))
		}
	}
	call("Ping", c.Ping)
	call("Produce to another topic", func(ctx context.Context) error {
		_, err := c.Produce(ctx, "other", []byte("x"))
		return err
	})
	cancel()
	<-done
}

// A call whose context has already ended fails alone: the connection, and
// the other requests pipelined on it, are not torn down for it.
func TestExpiredContextKeepsConnection(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	expired, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	if err := c.Ping(expired); err == nil {
		t.Fatal("Ping with an expired context succeeded")
	}
	if _, err := c.Produce(expired, "t", []byte("x")); err == nil {
		t.Fatal("Produce with an expired context succeeded")
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Reconnects != 0 {
		t.Fatalf("calls with an expired context broke the shared connection: %d reconnects", st.Reconnects)
	}
}
