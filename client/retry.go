package client

import (
	"context"
	"time"
)

// maxBackoff caps the doubling wait between retries.
const maxBackoff = 5 * time.Second

// backoff is the wait between retries: the client's WithRetries backoff
// first, doubled after each wait, up to maxBackoff.
type backoff struct {
	next time.Duration
	done <-chan struct{} // the client's: closed by Close
}

func (c *Client) newBackoff() backoff { return backoff{next: c.opts.backoff, done: c.done} }

// wait sleeps the current backoff and doubles it. It returns ctx's error
// if ctx ends first, ErrClosed if the client is closed first.
func (b *backoff) wait(ctx context.Context) error {
	t := time.NewTimer(b.next)
	defer t.Stop()
	b.next = min(2*b.next, maxBackoff)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-b.done:
		return ErrClosed
	}
}
