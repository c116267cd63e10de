package client

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// This file: when a failed operation is tried again, and how long it waits
// first. One rule for the Client's requests (do), a Reader's and a
// Producer's batches: see retryable and retrier.

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

// untilDone is the retries of a retrier that only its context bounds.
const untilDone = -1

// retryable reports whether an operation that failed with err may be tried
// again on a new connection: its connection broke (ErrConnection), ctx has
// not ended and the client is open. Whether the operation is harmless to
// repeat once it may have reached the server is the caller's to say; how
// often and after what wait it is tried again, a retrier's.
func (c *Client) retryable(ctx context.Context, err error) bool {
	return errors.Is(err, ErrConnection) && ctx.Err() == nil && !c.isClosed()
}

// retrier paces the retries of one operation: at most a number of them in
// a row, each after a backoff, and one more at once after a server closed
// the connection as idle without reading the request.
type retrier struct {
	backoff
	c        *Client
	limit    int  // retries in a row; untilDone: no bound but ctx
	left     int  // retries left of limit
	redialed bool // the one at-once retry after an idle close is used
}

// newRetrier allows limit retries in a row (untilDone: until ctx ends),
// waiting the backoff of newBackoff(ceiling) before each.
func (c *Client) newRetrier(limit int, ceiling time.Duration) retrier {
	return retrier{backoff: c.newBackoff(ceiling), c: c, limit: limit, left: limit}
}

// retry is called after an attempt failed with err. It returns nil, after
// waiting the backoff, when the operation should be tried again; else the
// error to fail with: ErrClosed once the client is closed; err when it is
// not retryable or no retry is left; err wrapping ctx's error if ctx ends
// during the wait, or had ended when a connection error came. A request
// the server did not read because it closed the connection as idle
// (ErrIdleTimeout, not sent) is tried again at once, once, whatever the
// limit.
func (r *retrier) retry(ctx context.Context, err error) error {
	switch {
	case r.c.isClosed():
		return ErrClosed
	case ctx.Err() != nil && errors.Is(err, ErrConnection):
		// The attempt failed as ctx ended: the caller hears both, as
		// from a wait cut short below, so that a deadline is told
		// from a server that failed (errors.Is(err, ctx.Err())).
		return fmt.Errorf("%w (retrying: %w)", err, ctx.Err())
	case !r.c.retryable(ctx, err):
		return err
	case !r.redialed && errors.Is(err, ErrIdleTimeout) && errors.Is(err, errNotSent):
		r.redialed = true
		return nil
	case r.left == 0:
		return err
	}
	if r.left > 0 {
		r.left--
	}
	if werr := r.wait(ctx); werr != nil {
		if errors.Is(werr, ErrClosed) {
			return ErrClosed
		}
		return fmt.Errorf("%w (retrying: %w)", err, werr)
	}
	return nil
}

// reset starts the retries afresh after an attempt succeeded: the full
// number left, the first wait, the at-once retry after an idle close.
func (r *retrier) reset() {
	r.left, r.redialed = r.limit, false
	r.restart()
}

// backoff is the wait between retries: the client's WithRetries backoff
// first, doubled after each wait up to a ceiling. A ceiling equal to the
// first wait keeps it constant.
type backoff struct {
	first, next, ceiling time.Duration
	done                 <-chan struct{} // the client's: closed by Close
}

// newBackoff starts at the WithRetries backoff and doubles up to ceiling
// (at least that first wait).
func (c *Client) newBackoff(ceiling time.Duration) backoff {
	b := c.opts.backoff
	return backoff{first: b, next: b, ceiling: max(ceiling, b), done: c.done}
}

// wait sleeps the current backoff and doubles it. It returns ctx's error
// if ctx ends first, ErrClosed if the client is closed first.
func (b *backoff) wait(ctx context.Context) error {
	t := time.NewTimer(b.next)
	defer t.Stop()
	b.double(1)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-b.done:
		return ErrClosed
	}
}

// double doubles the next wait n times, up to the ceiling, as n waits
// would, without waiting.
func (b *backoff) double(n int) {
	for range n {
		b.next = min(2*b.next, b.ceiling)
	}
}

// restart makes the next wait the first again.
func (b *backoff) restart() { b.next = b.first }
