package httpapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/valyala/bytebufferpool"
	"golang.org/x/sync/semaphore"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/protocol"
)

// This file: the HTTP port's memory budget (Config.MaxBufferedBytes).
//
// A request's body, the batch built from it, a consume's batches and the
// bodies it decodes are reserved here before they are read or built, and
// given back when the answer is written. Two bounds hold: the port's own
// (Config.MaxBufferedBytes, a quarter of the server's by default), so that
// HTTP requests alone cannot take the memory the binary port's clients
// and the Go runtime's garbage need, and the server's, -max-buffered-bytes,
// which both ports share (broker.Broker.Reserve). A request that does not
// fit the port's bound waits its turn, first come first served, at most
// Config.BudgetWait; then, or at once when the server's bound is the one
// passed, it is answered 429 with Retry-After naming the limit.

// DefaultBudgetWait is the default Config.BudgetWait.
const DefaultBudgetWait = time.Second

// Bounds of DefaultMaxBufferedBytes.
const (
	minHTTPBuffered     = 64 << 20  // a 64 MiB body fits
	defaultHTTPBuffered = 256 << 20 // without a server budget
)

// DefaultMaxBufferedBytes is the default Config.MaxBufferedBytes for a
// server that buffers at most serverBudget bytes (-max-buffered-bytes; 0
// or less: no bound): a quarter of it, at least 64 MiB (one largest
// body) yet no more than serverBudget; 256 MiB without a server budget.
func DefaultMaxBufferedBytes(serverBudget int64) int64 {
	if serverBudget <= 0 {
		return defaultHTTPBuffered
	}
	return min(serverBudget, max(serverBudget/4, minHTTPBuffered))
}

// errOverBudget refuses a request whose body or response would pass the
// HTTP port's bound or the server's (429, with Retry-After).
var errOverBudget error = &apiError{protocol.CodeLimitReached, "httpapi: server busy"}

// httpBudget is the port's bound: a weighted semaphore of bytes, whose
// waiters are served in the order they came.
type httpBudget struct {
	max  int64
	wait time.Duration
	sem  *semaphore.Weighted
}

func newHTTPBudget(maxBytes int64, wait time.Duration) *httpBudget {
	return &httpBudget{max: maxBytes, wait: wait, sem: semaphore.NewWeighted(maxBytes)}
}

// reservation is what one request holds of the port's budget and of the
// server's: each grow is given back by release.
type reservation struct {
	ctx  context.Context // the request's: a client gone stops the wait
	hb   *httpBudget     // nil: no port bound
	b    *broker.Broker  // nil: no server bound
	held int64
}

// grow reserves n bytes more: it waits for the port's budget at most
// BudgetWait, then takes them from the server's. It returns an error of
// CodeLimitReached that names the flag of the bound that refused.
func (r *reservation) grow(n int64) error {
	if n <= 0 {
		return nil
	}
	if hb := r.hb; hb != nil {
		if n > hb.max {
			return fmt.Errorf("%w: %d bytes are more than the HTTP port's whole budget of %d bytes (-max-http-buffered-bytes)", errOverBudget, n, hb.max)
		}
		if !hb.sem.TryAcquire(n) {
			ctx, cancel := context.WithTimeout(r.ctx, hb.wait)
			err := hb.sem.Acquire(ctx, n)
			cancel()
			if err != nil {
				return fmt.Errorf("%w: %d bytes more did not fit the HTTP port's budget of %d bytes (-max-http-buffered-bytes) within %s: retry later", errOverBudget, n, hb.max, hb.wait)
			}
		}
	}
	if r.b != nil {
		if err := r.b.Reserve(n); err != nil {
			if r.hb != nil {
				r.hb.sem.Release(n)
			}
			return fmt.Errorf("%w: %w", errOverBudget, err)
		}
	}
	r.held += n
	return nil
}

// release gives back all that r holds.
func (r *reservation) release() {
	if r.held == 0 {
		return
	}
	if r.b != nil {
		r.b.Release(r.held)
	}
	if r.hb != nil {
		r.hb.sem.Release(r.held)
	}
	r.held = 0
}

// overBudget reports whether err refused a request for memory.
func overBudget(err error) bool { return errors.Is(err, errOverBudget) }

// maxPooledBuffer bounds the buffers kept for reuse: a larger one (a
// 64 MiB body) is left to the garbage collector rather than held by the
// pool outside every budget.
const maxPooledBuffer = 1 << 20

// putBuffer gives b back to the pool, without its memory if that is over
// maxPooledBuffer.
func putBuffer(b *bytebufferpool.ByteBuffer) {
	if cap(b.B) > maxPooledBuffer {
		b.B = nil
	}
	bytebufferpool.Put(b)
}
