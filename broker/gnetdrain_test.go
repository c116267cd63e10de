package broker

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// spinEngine: a connection that sends "A" wakes itself (Conn.Wake) spins
// times, spending spinFor of the loop on each; a connection that sends "B"
// is answered with one byte, noting how many of those wakes had run.
type spinEngine struct {
	gnet.BuiltinEventEngine
	booted  chan struct{}
	eng     gnet.Engine
	woken   atomic.Int64 // wakes of the spinning connection run so far
	servedB atomic.Int64 // woken when "B" was answered; -1 before
}

const (
	spins   = 2000
	spinFor = 100 * time.Microsecond
)

func (e *spinEngine) OnBoot(eng gnet.Engine) gnet.Action {
	e.eng = eng
	close(e.booted)
	return gnet.None
}

func (e *spinEngine) OnTraffic(c gnet.Conn) gnet.Action {
	b, _ := c.Next(-1)
	if c.Context() == "spinner" || len(b) > 0 && b[0] == 'A' {
		c.SetContext("spinner")
		for begun := time.Now(); time.Since(begun) < spinFor; {
		}
		if e.woken.Add(1) < spins {
			_ = c.Wake(nil)
		}
		return gnet.None
	}
	if len(b) > 0 && b[0] == 'B' {
		e.servedB.Store(e.woken.Load())
		_, _ = c.Write([]byte{'b'})
	}
	return gnet.None
}

// TestGnetWakeDoesNotStarve: a connection that keeps waking itself (as
// one does after its turn, loopTurn) must not keep its event loop from
// epoll_wait: upstream gnet drains its task queue until it is empty,
// running wakes queued during the drain in the same drain, so another
// connection's readiness waited for all of them. The carried gnet runs
// only the tasks queued before a drain began (haraqa.patch).
func TestGnetWakeDoesNotStarve(t *testing.T) {
	e := &spinEngine{booted: make(chan struct{})}
	e.servedB.Store(-1)
	addr := runGnet(t, e, e.booted, func() gnet.Engine { return e.eng })
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	spinner, other := dial(), dial()
	if _, err := spinner.Write([]byte{'A'}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.woken.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the spinning connection never ran")
		}
		time.Sleep(100 * time.Microsecond)
	}
	if _, err := other.Write([]byte{'B'}); err != nil {
		t.Fatal(err)
	}
	other.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(other, make([]byte, 1)); err != nil {
		t.Fatalf("the other connection was not answered: %v", err)
	}
	if at := e.servedB.Load(); at >= spins {
		t.Fatalf("the other connection was served after all %d wakes of the spinning one", spins)
	} else {
		t.Logf("the other connection was served after %d of %d wakes", at, spins)
	}
}

// runGnet runs h on a gnet engine of one event loop at a free loopback
// address, with opts, and returns the address once h's OnBoot has closed
// booted; eng returns the engine OnBoot was given, stopped when the test
// or benchmark ends.
func runGnet(tb testing.TB, h gnet.EventHandler, booted <-chan struct{}, eng func() gnet.Engine, opts ...gnet.Option) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // gnet binds the address itself
	opts = append([]gnet.Option{gnet.WithMulticore(true), gnet.WithNumEventLoop(1),
		gnet.WithLogger(gnetLogger{slog.New(slog.DiscardHandler)})}, opts...)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := gnet.Run(h, "tcp://"+addr, opts...); err != nil {
			tb.Error(err)
		}
	})
	select {
	case <-booted:
	case <-time.After(10 * time.Second):
		tb.Fatal("gnet did not start")
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = eng().Stop(ctx)
		wg.Wait()
	})
	return addr
}
