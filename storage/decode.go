package storage

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// This file: the bound on the validations of compressed batches in flight
// (Options.DecodeWorkers, Options.MaxDecodeBytes), and how they are shared
// among tenants. Every append of a compressed batch decodes its body once
// to check it (Store.validate); appends run on many goroutines at once
// (connection goroutines, HTTP requests), and each may declare up to
// MaxBatchBytes decoded from a few kilobytes sent, so without a bound the
// CPU and the memory they decode into grow with the number of producers.
// An event loop never validates a compressed batch: it would wait here.
//
// Fairness. Decodes wait in one queue per tenant (AppendOptions.Tenant: a
// token, or a connection without tokens), and the queues are served by
// start-time fair queueing: each waiter gets a start tag, the larger of
// the budget's virtual time and the finish tag of its tenant's waiter
// before it, and a finish tag, its start plus its cost (the decoded bytes
// it declares and decodeCostFloor); the waiter with the smallest start
// tag among the queues' heads goes next, and the virtual time moves to
// its start. A tenant that floods the workers thus runs ahead of the
// virtual time by its backlog, and another tenant's single batch, whose
// start is the virtual time, goes before all of that backlog: it waits
// for the decodes running when it came, never for the ones queued. Two
// tenants both backlogged get the workers in proportion to bytes, not to
// batches. A tenant may hold at most MaxDecodeQueued declared bytes
// waiting (one batch always fits); past it an append is refused with
// ErrDecodeQueueFull.

// DefaultDecodeWorkers is the default Options.DecodeWorkers: GOMAXPROCS
// less one, at least 1, so that a core stays for the event loops.
func DefaultDecodeWorkers() int { return max(1, runtime.GOMAXPROCS(0)-1) }

// decodeCostFloor is the least cost of a decode in the fair queue, in
// bytes: a batch of a few bytes still costs a decode's set-up and its
// thread's wake, so a flood of tiny batches is not free.
const decodeCostFloor = 4 << 10

// decodeBudget is a counting semaphore of decodes and of bytes, with one
// queue per tenant: acquire waits until a decode worker is free, the
// bytes asked for fit and its turn among the tenants comes (see above).
type decodeBudget struct {
	max       int64 // bytes
	workers   int   // decodes at once
	maxQueued int64 // declared bytes one tenant may have waiting

	mu      sync.Mutex
	used    int64                    // guarded by mu
	running int                      // guarded by mu
	waiting int                      // guarded by mu: waiters in all queues
	vtime   int64                    // guarded by mu: the start tag of the last waiter started
	seq     uint64                   // guarded by mu: waiters queued so far, which orders equal tags
	tenants map[string]*decodeTenant // guarded by mu: the tenants with waiters

	waits   atomic.Int64 // acquires that had to wait
	refused atomic.Int64 // acquires refused with ErrDecodeQueueFull
}

// decodeTenant is one tenant's queue.
type decodeTenant struct {
	queue  []*decodeWaiter // oldest first
	queued int64           // the bytes its waiters declare
	finish int64           // the finish tag of its last waiter
}

// decodeWaiter is one acquire waiting for its turn: ready is closed once
// its n bytes and a worker are taken for it.
type decodeWaiter struct {
	n     int64
	start int64  // its start tag
	seq   uint64 // its place among all waiters, for equal start tags
	ready chan struct{}
}

func newDecodeBudget(maxBytes int64, workers int, maxQueued int64) *decodeBudget {
	return &decodeBudget{max: maxBytes, workers: max(workers, 1), maxQueued: maxQueued, tenants: make(map[string]*decodeTenant)}
}

// acquire takes a decode worker and n bytes of the budget for tenant,
// waiting until both are free and its turn comes; n is capped at the
// whole budget, so a single decode never waits for ever (validate refuses
// a batch that declares more). It returns what release must give back,
// or ErrDecodeQueueFull if tenant already has waiters declaring
// maxQueued bytes with these.
func (d *decodeBudget) acquire(tenant string, n int64) (int64, error) {
	n = min(max(n, 0), d.max)
	d.mu.Lock()
	if d.waiting == 0 && d.fits(n) {
		d.take(n)
		d.mu.Unlock()
		return n, nil
	}
	t := d.tenants[tenant]
	if t == nil {
		t = &decodeTenant{}
		d.tenants[tenant] = t
	} else if t.queued+n > d.maxQueued {
		q := t.queued
		d.mu.Unlock()
		d.refused.Add(1)
		return 0, fmt.Errorf("%w: %d bytes declared decoded are waiting for this tenant's decodes already, %d more would pass %d", ErrDecodeQueueFull, q, n, d.maxQueued)
	}
	d.seq++
	w := &decodeWaiter{n: n, start: max(d.vtime, t.finish), seq: d.seq, ready: make(chan struct{})}
	t.finish = w.start + n + decodeCostFloor
	t.queue = append(t.queue, w)
	t.queued += n
	d.waiting++
	d.dispatch()
	d.mu.Unlock()
	d.waits.Add(1)
	<-w.ready
	return n, nil
}

// before reports whether w goes before o: a smaller start tag, or the same
// and queued first.
func (w *decodeWaiter) before(o *decodeWaiter) bool {
	return w.start < o.start || w.start == o.start && w.seq < o.seq
}

// fits reports whether a decode of n bytes may start now. d.mu is held.
func (d *decodeBudget) fits(n int64) bool { return d.running < d.workers && d.used+n <= d.max }

// take starts a decode of n bytes. d.mu is held.
func (d *decodeBudget) take(n int64) {
	d.used += n
	d.running++
}

// release gives back the worker and the n bytes taken by acquire, and
// starts the waiters whose turn it is.
func (d *decodeBudget) release(n int64) {
	d.mu.Lock()
	d.used -= n
	d.running--
	d.dispatch()
	d.mu.Unlock()
}

// dispatch starts waiters while the one with the smallest start tag fits;
// it does not let a smaller one pass it, so a large batch is not starved.
// d.mu is held.
func (d *decodeBudget) dispatch() {
	for d.waiting > 0 {
		var next *decodeTenant
		var key string
		for k, t := range d.tenants {
			if next == nil || t.queue[0].before(next.queue[0]) {
				next, key = t, k
			}
		}
		w := next.queue[0]
		if !d.fits(w.n) {
			return
		}
		next.queue[0] = nil
		next.queue = next.queue[1:]
		next.queued -= w.n
		d.waiting--
		if len(next.queue) == 0 {
			delete(d.tenants, key)
		}
		d.vtime = max(d.vtime, w.start)
		d.take(w.n)
		close(w.ready)
	}
}
