package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
)

// The backoff doubles up to its ceiling, stays put when the ceiling is
// the first wait, and ends early on ctx or Close.
func TestBackoff(t *testing.T) {
	c := &Client{opts: options{backoff: time.Microsecond}, done: make(chan struct{})}
	ctx := context.Background()
	for _, tc := range []struct {
		ceiling time.Duration
		want    []time.Duration // the wait after each wait
	}{
		{8 * time.Microsecond, []time.Duration{2, 4, 8, 8}},
		{0, []time.Duration{1, 1, 1}},
	} {
		b := c.newBackoff(tc.ceiling)
		for i, w := range tc.want {
			if err := b.wait(ctx); err != nil {
				t.Fatal(err)
			}
			if b.next != w*time.Microsecond {
				t.Errorf("ceiling %s, after wait %d: next %s, want %s", tc.ceiling, i+1, b.next, w*time.Microsecond)
			}
		}
	}

	c.opts.backoff = time.Hour
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	b := c.newBackoff(0)
	if err := b.wait(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with a cancelled ctx: %v", err)
	}
	close(c.done)
	if err := b.wait(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("wait on a closed client: %v", err)
	}
}

// A retrier allows its number of retries in a row of broken connections
// only, one more at once after an idle close, all of them again after
// reset (the backoff back at its first wait), and none once the client is
// closed, whose wait it cuts short with ErrClosed.
func TestRetrier(t *testing.T) {
	o := defaultOptions()
	o.backoff = time.Microsecond
	c := newClient("127.0.0.1:1", o)
	ctx := context.Background()
	broken := fmt.Errorf("%w: %w", ErrConnection, io.EOF)
	idle := fmt.Errorf("%w: %w: %w", ErrConnection, errNotSent, ErrIdleTimeout)
	refused := &Error{Code: CodeTopicNotFound}

	rt := c.newRetrier(2, time.Hour)
	// Each attempt's error and whether retry allows another.
	check := func(what string, steps []error, again []bool) {
		t.Helper()
		for i, err := range steps {
			got := rt.retry(ctx, err)
			if again[i] && got != nil || !again[i] && got != err {
				t.Fatalf("%s, retry %d after %v: %v; want again %v", what, i, err, got, again[i])
			}
		}
	}
	check("first", []error{refused, broken, idle, broken, broken, idle},
		[]bool{false, true, true, true, false, false})
	if rt.next != 4*time.Microsecond {
		t.Fatalf("after 2 waits the next is %s, want 4µs", rt.next)
	}
	rt.reset()
	if rt.next != time.Microsecond {
		t.Fatalf("after reset the next wait is %s, want 1µs", rt.next)
	}
	check("after reset", []error{broken, idle, broken, broken}, []bool{true, true, true, false})

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	ended := c.newRetrier(untilDone, time.Second)
	if got := ended.retry(cctx, broken); !errors.Is(got, broken) || !errors.Is(got, context.Canceled) {
		t.Fatalf("retry with ctx ended: %v, want the error and the context's", got)
	}
	if got := ended.retry(cctx, refused); got != refused {
		t.Fatalf("retry of a refusal with ctx ended: %v, want the refusal itself", got)
	}
	unbounded := c.newRetrier(untilDone, time.Second)
	for i := range 10 {
		if err := unbounded.retry(ctx, broken); err != nil {
			t.Fatalf("retry %d until ctx ends: %v", i, err)
		}
	}

	c.opts.backoff = time.Hour
	long := c.newRetrier(untilDone, time.Hour)
	res := make(chan error, 1)
	go func() { res <- long.retry(ctx, broken) }()
	c.Close()
	if got := <-res; got != ErrClosed {
		t.Fatalf("retry while the client closes: %v, want ErrClosed", got)
	}
	if got := long.retry(ctx, broken); got != ErrClosed {
		t.Fatalf("retry on a closed client: %v, want ErrClosed", got)
	}
}
