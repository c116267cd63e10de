package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/storage"
)

// --- close --------------------------------------------------------------------

func TestCloseEndsMessages(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c, err := client.Dial(testCtx(t), srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	produceNumbered(t, c, "cl", "m", 3, 3)
	var (
		got     int
		lastErr error
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range c.Messages(context.Background(), "cl", 0) {
			if err != nil {
				lastErr = err
				continue
			}
			got++
			_ = m
		}
	}()
	waitFor(t, "a parked poll", func() bool { return srv.Broker.Stats().ParkedPolls > 0 })
	c.Close()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("Close did not end the Messages loop")
	}
	if got != 3 || !errors.Is(lastErr, client.ErrClosed) {
		t.Fatalf("loop saw %d messages and ended with %v; want 3 and ErrClosed", got, lastErr)
	}
}

// Close unblocks calls waiting for an answer that will never come.
func TestCloseUnblocksPendingCalls(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	p := startProxy(t, srv.Addr)
	c, err := client.Dial(testCtx(t), p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	p.drop.Store(true) // requests vanish: calls wait for their timeout
	ctx := context.Background()
	calls := map[string]func() error{
		"Produce":   func() error { _, err := c.Produce(ctx, "t", []byte("x")); return err },
		"Consume":   func() error { _, err := c.Consume(ctx, "t", 0, 1); return err },
		"TopicInfo": func() error { _, err := c.TopicInfo(ctx, "t"); return err },
		"Ping":      func() error { return c.Ping(ctx) },
	}
	errs := make(chan error, len(calls))
	for name, call := range calls {
		go func() {
			err := call()
			errs <- fmt.Errorf("%s: %w", name, err)
		}()
	}
	waitFor(t, "every call to be sent and swallowed", func() bool { return p.dropped.Load() >= int64(len(calls)) })
	if st := c.Stats(); st.InFlight != 1 {
		t.Errorf("InFlight %d while a produce waits, want 1", st.InFlight)
	}
	c.Close()
	timeout := time.After(3 * time.Second)
	for range calls {
		select {
		case err := <-errs:
			if !errors.Is(err, client.ErrClosed) {
				t.Errorf("%v, want ErrClosed", err)
			}
		case <-timeout:
			t.Fatal("Close left calls waiting")
		}
	}
}

// A call with a deadline ends when it passes, and the client goes on.
func TestRequestTimeout(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	p := startProxy(t, srv.Addr)
	c := dial(t, p.Addr(), client.WithRequestTimeout(200*time.Millisecond))
	p.drop.Store(true)
	start := time.Now()
	err := c.Ping(context.Background())
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("Ping with nothing answering: %v after %s", err, time.Since(start))
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Logf("Ping timeout error: %v", err)
	}
	p.drop.Store(false)
	if err := c.Ping(testCtx(t)); err != nil {
		t.Fatalf("Ping once answers come again: %v", err)
	}
}

// --- restart --------------------------------------------------------------------

// After the server restarts on the same address, the same client
// reconnects: a follower on it sees every message, no gap, no duplicate.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	srv := brokertest.Start(t, 1, func(_ *storage.Options, bc *broker.Config) { bc.Addr = addr })
	testRestart(t, srv, addr, func() *brokertest.Server {
		srv2, err := srv.Restart()
		if err != nil {
			t.Fatalf("restart on the same address with clients connected: %v", err)
		}
		t.Cleanup(func() { srv2.Close() })
		if srv2.Addr != addr {
			t.Fatalf("restarted on %s, want %s", srv2.Addr, addr)
		}
		return srv2
	})
}

// The same restart with the server on a new port behind a proxy that keeps
// the client's address: the client's side of a restart, whatever the
// server's listener does.
func TestServerRestartBehindProxy(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	p := startProxy(t, srv.Addr)
	testRestart(t, srv, p.Addr(), func() *brokertest.Server {
		p.Down()
		srv2, err := srv.Restart()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv2.Close() })
		if err := p.Up(srv2.Addr); err != nil {
			t.Fatal(err)
		}
		return srv2
	})
}

func testRestart(t *testing.T, srv *brokertest.Server, addr string, restart func() *brokertest.Server) {
	c := dial(t, addr, client.WithRetries(10, 20*time.Millisecond))
	follower := dial(t, addr, client.WithRetries(10, 20*time.Millisecond))
	ctx := testCtx(t)
	produceNumbered(t, c, "rs", "m", 100, 10)

	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	followed := make(chan []string, 1)
	go func() {
		var got []string
		for m, err := range follower.Messages(fctx, "rs", 0) {
			if err != nil {
				t.Logf("follower: %v (yielded, the loop goes on)", err)
				continue
			}
			if m.Offset != int64(len(got)) {
				t.Errorf("follower: offset %d after %d messages", m.Offset, len(got))
			}
			got = append(got, string(m.Value))
			if len(got) == 200 {
				break
			}
		}
		followed <- got
	}()
	waitFor(t, "a parked poll", func() bool { return srv.Broker.Stats().ParkedPolls > 0 })

	restart()

	info, err := c.TopicInfo(ctx, "rs")
	if err != nil || info.Next != 100 {
		t.Fatalf("TopicInfo after restart: %+v, %v", info, err)
	}
	for i := 100; i < 200; i += 10 {
		var msgs [][]byte
		for j := i; j < i+10; j++ {
			msgs = append(msgs, fmt.Appendf(nil, "m%d", j))
		}
		base, err := c.Produce(ctx, "rs", msgs...)
		if err != nil || base != int64(i) {
			t.Fatalf("Produce after restart: %d, %v", base, err)
		}
	}
	msgs, err := c.Consume(ctx, "rs", 0, 0)
	if err != nil || len(msgs) != 200 {
		t.Fatalf("Consume after restart: %d messages, %v", len(msgs), err)
	}
	if st := c.Stats(); st.Reconnects < 1 {
		t.Fatalf("Stats after a restart: %+v, want Reconnects > 0", st)
	}
	select {
	case got := <-followed:
		for i, v := range got {
			if v != fmt.Sprint("m", i) {
				t.Fatalf("follower message %d: %q", i, v)
			}
		}
		if len(got) != 200 {
			t.Fatalf("follower saw %d messages, want 200", len(got))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the follower did not see the messages produced after the restart")
	}
	if st := follower.Stats(); st.Reconnects < 1 {
		t.Fatalf("follower Stats: %+v, want Reconnects > 0", st)
	}
}

// --- concurrency ----------------------------------------------------------------

// Many goroutines share one client: every call answered correctly, each
// produce's batch contiguous, the counters consistent. Run with -race.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	const workers, rounds, batch = 12, 40, 8
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			own := fmt.Sprint("own-", w)
			for r := range rounds {
				msgs := make([][]byte, batch)
				for k := range msgs {
					msgs[k] = fmt.Appendf(nil, "w%d-r%d-k%d", w, r, k)
				}
				base, err := c.Produce(ctx, "shared", msgs...)
				if err != nil {
					t.Error(err)
					return
				}
				got, err := c.Consume(ctx, "shared", base, batch)
				if err != nil || len(got) != batch {
					t.Errorf("Consume of my batch at %d: %d, %v", base, len(got), err)
					return
				}
				for k, m := range got {
					if !bytes.Equal(m.Value, msgs[k]) {
						t.Errorf("at %d: %q, want %q", base+int64(k), m.Value, msgs[k])
						return
					}
				}
				ob, err := c.Produce(ctx, own, msgs[0])
				if err != nil || ob != int64(r) {
					t.Errorf("Produce to %s: %d, %v; want %d", own, ob, err, r)
					return
				}
				switch r % 4 {
				case 0:
					err = c.Ping(ctx)
				case 1:
					var info client.TopicInfo
					info, err = c.TopicInfo(ctx, own)
					if err == nil && info.Next != int64(r+1) {
						err = fmt.Errorf("TopicInfo %s: %+v", own, info)
					}
				case 2:
					var names []string
					names, err = c.ListTopics(ctx, own)
					if err == nil && !slices.Contains(names, own) {
						err = fmt.Errorf("ListTopics %s: %q", own, names)
					}
				case 3:
					_, err = c.Consume(ctx, own, -1, 1)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	all, err := c.Consume(ctx, "shared", 0, 0)
	if err != nil || len(all) != workers*rounds*batch {
		t.Fatalf("shared topic: %d messages, %v", len(all), err)
	}
	st := c.Stats()
	wantMsgs := int64(workers * rounds * (batch + 1))
	if st.MessagesSent != wantMsgs || st.MessagesAcked != wantMsgs || st.InFlight != 0 || st.Errors != 0 || st.Reconnects != 0 {
		t.Fatalf("Stats: %+v; want %d messages sent and acked", st, wantMsgs)
	}
}

// Close racing with calls from many goroutines: every call ends, with its
// answer or ErrClosed.
func TestCloseRacesCalls(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c, err := client.Dial(testCtx(t), srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				var err error
				switch i % 3 {
				case 0:
					_, err = c.Produce(ctx, "race", fmt.Appendf(nil, "%d-%d", w, i))
				case 1:
					_, err = c.Consume(ctx, "race", 0, 10)
				case 2:
					err = c.Ping(ctx)
				}
				if errors.Is(err, client.ErrClosed) {
					return
				}
				if err != nil && !errors.Is(err, client.ErrTopicNotFound) {
					t.Errorf("worker %d call %d: %v", w, i, err)
					return
				}
			}
		})
	}
	waitFor(t, "calls to be under way", func() bool { return srv.Broker.Stats().Requests >= 8 })
	c.Close()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("calls still running after Close")
	}
}
