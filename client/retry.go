package client

import (
	"context"
	"time"
)

// Ceilings of the doubling wait, one per retry loop, as each loop had them
// before they shared this helper.
const (
	// requestBackoffMax caps the waits of a request's retries (do, Reader),
	// which WithRetries bounds in number: the cap only keeps a large count
	// from doubling past any sensible wait.
	requestBackoffMax = time.Minute
	// producerBackoffMax caps the waits of a Producer batch's resends,
	// which go on until the request timeout.
	producerBackoffMax = time.Second
)

// backoff is the wait between retries: the client's WithRetries backoff
// first, doubled after each wait up to a ceiling. A ceiling equal to the
// first wait keeps it constant.
type backoff struct {
	next, ceiling time.Duration
	done          <-chan struct{} // the client's: closed by Close
}

// newBackoff starts at the WithRetries backoff and doubles up to ceiling
// (at least that first wait).
func (c *Client) newBackoff(ceiling time.Duration) backoff {
	return backoff{next: c.opts.backoff, ceiling: max(ceiling, c.opts.backoff), done: c.done}
}

// wait sleeps the current backoff and doubles it. It returns ctx's error
// if ctx ends first, ErrClosed if the client is closed first.
func (b *backoff) wait(ctx context.Context) error {
	t := time.NewTimer(b.next)
	defer t.Stop()
	b.next = min(2*b.next, b.ceiling)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-b.done:
		return ErrClosed
	}
}
