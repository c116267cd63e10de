package storage

import (
	"sync"
	"sync/atomic"
)

// This file: the bound on what validating compressed batches decodes at
// once (Options.MaxDecodeBytes). Every append of a compressed batch decodes
// its body once to check it (Store.validate); appends run on many
// goroutines at once (event loops, connection goroutines, HTTP requests),
// and each may declare up to MaxBatchBytes decoded, so without a bound the
// memory they decode into grows with the number of producers.

// decodeBudget is a counting semaphore of bytes: acquire waits until the
// bytes asked for fit.
type decodeBudget struct {
	max int64

	mu    sync.Mutex
	freed sync.Cond // broadcast by release
	used  int64     // guarded by mu

	waits atomic.Int64 // acquires that had to wait
}

func newDecodeBudget(max int64) *decodeBudget {
	d := &decodeBudget{max: max}
	d.freed.L = &d.mu
	return d
}

// acquire takes n bytes of the budget, waiting until they fit; n is capped
// at the whole budget, so a single decode never waits for ever. It returns
// what release must give back.
func (d *decodeBudget) acquire(n int64) int64 {
	n = min(max(n, 0), d.max)
	d.mu.Lock()
	if d.used+n > d.max {
		d.waits.Add(1)
		for d.used+n > d.max {
			d.freed.Wait()
		}
	}
	d.used += n
	d.mu.Unlock()
	return n
}

// release gives back n bytes taken by acquire.
func (d *decodeBudget) release(n int64) {
	d.mu.Lock()
	d.used -= n
	d.mu.Unlock()
	d.freed.Broadcast()
}
