package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// A caller reading its own response stops at its context's end, even in
// the middle of a frame; the connection stays in step: the rest of the
// frame is read by whoever reads next, and the next request on the same
// connection gets its own answer.
func TestDirectReadStopsMidFrame(t *testing.T) {
	rest := make(chan struct{})
	addr := fakeServer(t, func(i int, nc net.Conn) {
		for n := 0; ; n++ {
			h, _, err := readRequest(nc)
			if err != nil {
				return
			}
			resp := protocol.AppendEmptyResponse(nil, h.Op, h.CorrID)
			if n == 1 { // the first Ping after Dial's: half now, half later
				nc.Write(resp[:5])
				select {
				case <-rest:
				case <-time.After(ioTimeout):
					return
				}
				nc.Write(resp[5:])
				continue
			}
			nc.Write(resp)
		}
	})
	c := dial(t, addr, client.WithRetries(0, time.Millisecond))
	ctx, cancel := context.WithTimeout(testCtx(t), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := c.Ping(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ping answered halfway: %v, want the context's deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the ping took %v to give up", d)
	}
	close(rest)
	for i := range 3 {
		if err := c.Ping(testCtx(t)); err != nil {
			t.Fatalf("ping %d after the cut-short one: %v", i, err)
		}
	}
	if n := c.Stats().Reconnects; n != 0 {
		t.Fatalf("%d reconnects: the connection should have stayed in step", n)
	}
}

// A connection the server closed while nothing was in flight (nobody
// reads it then) is found closed before the next request is written on
// it: the request goes on a new connection, without a retry.
func TestDirectClosedWhileIdle(t *testing.T) {
	closed := make(chan struct{})
	addr := fakeServer(t, func(i int, nc net.Conn) {
		for {
			h, _, err := readRequest(nc)
			if err != nil {
				return
			}
			switch h.Op {
			case protocol.OpProduce:
				nc.Write(protocol.AppendProduceResponse(nil, h.CorrID, 7, 1))
			default:
				nc.Write(protocol.AppendEmptyResponse(nil, h.Op, h.CorrID))
			}
			if i == 0 { // the first connection: closed after Dial's Ping
				nc.Close()
				close(closed)
				return
			}
		}
	})
	c := dial(t, addr, client.WithRetries(0, time.Millisecond), client.WithIdleTimeout(0))
	<-closed
	<-time.After(5 * time.Millisecond) // the idleness under test
	off, err := c.Produce(testCtx(t), "t", []byte("a"))
	if err != nil || off != 7 {
		t.Fatalf("produce after the server closed the idle connection: %d, %v", off, err)
	}
	if n := c.Stats().Reconnects; n != 1 {
		t.Fatalf("%d reconnects, want 1", n)
	}
}

// Many goroutines sharing one connection, some giving up early, others
// through a Producer and a Reader on it: every request that is waited for
// gets its own answer, whoever reads it.
func TestDirectReadShared(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	p := c.NewProducer("shared-p")
	defer p.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				switch i % 4 {
				case 0:
					short, cancel := context.WithTimeout(ctx, time.Duration(i%7)*time.Microsecond)
					_ = c.Ping(short) // may or may not be answered in time
					cancel()
				case 1:
					if _, err := p.Send(ctx, []byte("x")); err != nil {
						errs <- err
						return
					}
				default:
					want := fmt.Sprintf("g%d-%d", g, i)
					off, err := c.Produce(ctx, "shared", []byte(want))
					if err != nil {
						errs <- err
						return
					}
					msgs, err := c.Consume(ctx, "shared", off, 1)
					if err != nil || len(msgs) != 1 || string(msgs[0].Value) != want {
						errs <- fmt.Errorf("offset %d: %v, %v; want %q", off, msgs, err, want)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := c.NewReader("shared-p", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := 0
	for got < 8*50 {
		msgs, err := r.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got += len(msgs)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}
