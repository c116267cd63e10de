package storage

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// This file: the bound on the validations of compressed batches in flight
// (Options.DecodeWorkers, Options.MaxDecodeBytes). Every append of a
// compressed batch decodes its body once to check it (Store.validate);
// appends run on many goroutines at once (connection goroutines, HTTP
// requests), and each may declare up to MaxBatchBytes decoded from a few
// kilobytes sent, so without a bound the CPU and the memory they decode
// into grow with the number of producers. An event loop never validates
// a compressed batch: it would wait here.

// DefaultDecodeWorkers is the default Options.DecodeWorkers: GOMAXPROCS
// less one, at least 1, so that a core stays for the event loops.
func DefaultDecodeWorkers() int { return max(1, runtime.GOMAXPROCS(0)-1) }

// decodeBudget is a counting semaphore of decodes and of bytes: acquire
// waits until a decode worker is free and the bytes asked for fit. Waiters
// are served first come, first served, so a connection decoding one batch
// at a time gets its turn among those that pipeline.
type decodeBudget struct {
	max     int64 // bytes
	workers int   // decodes at once

	mu      sync.Mutex
	used    int64           // guarded by mu
	running int             // guarded by mu
	queue   []*decodeWaiter // guarded by mu: acquires waiting, oldest first

	waits atomic.Int64 // acquires that had to wait
}

// decodeWaiter is one acquire waiting for its turn: ready is closed once
// its n bytes and a worker are taken for it.
type decodeWaiter struct {
	n     int64
	ready chan struct{}
}

func newDecodeBudget(maxBytes int64, workers int) *decodeBudget {
	return &decodeBudget{max: maxBytes, workers: max(workers, 1)}
}

// acquire takes a decode worker and n bytes of the budget, waiting until
// both are free and every acquire that came before has its own; n is
// capped at the whole budget, so a single decode never waits for ever
// (validate refuses a batch that declares more). It returns what release
// must give back.
func (d *decodeBudget) acquire(n int64) int64 {
	n = min(max(n, 0), d.max)
	d.mu.Lock()
	if len(d.queue) == 0 && d.fits(n) {
		d.take(n)
		d.mu.Unlock()
		return n
	}
	w := &decodeWaiter{n: n, ready: make(chan struct{})}
	d.queue = append(d.queue, w)
	d.mu.Unlock()
	d.waits.Add(1)
	<-w.ready
	return n
}

// fits reports whether a decode of n bytes may start now. d.mu is held.
func (d *decodeBudget) fits(n int64) bool { return d.running < d.workers && d.used+n <= d.max }

// take starts a decode of n bytes. d.mu is held.
func (d *decodeBudget) take(n int64) {
	d.used += n
	d.running++
}

// release gives back the worker and the n bytes taken by acquire, and
// starts the waiters at the head of the queue that fit now.
func (d *decodeBudget) release(n int64) {
	d.mu.Lock()
	d.used -= n
	d.running--
	for len(d.queue) > 0 && d.fits(d.queue[0].n) {
		w := d.queue[0]
		d.queue[0] = nil
		d.queue = d.queue[1:]
		d.take(w.n)
		close(w.ready)
	}
	d.mu.Unlock()
}
