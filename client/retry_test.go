package client

import (
	"context"
	"errors"
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
