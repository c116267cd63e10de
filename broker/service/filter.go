package service

import (
	"fmt"
	"regexp"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/haraqa/haraqa/protocol"
)

// This file: list-topics regex filters. Compiling and matching one is CPU
// work that may take tens of milliseconds within protocol's bounds, so it
// runs off the event loops, at most Config.FilterWorkers at a
// time whatever the number of connections asking, with a bounded queue;
// and each pattern is compiled once while it stays in a small cache.

// filterCacheSize bounds the compiled filters kept. A compiled pattern of
// MaxRegexInsts instructions holds a few hundred KB at most, so the cache
// holds a few MB at most.
const filterCacheSize = 32

// filterQueuePerWorker bounds the filters waiting for a worker, per
// worker; past it a list-topics request with a regex is refused with
// CodeLimitReached.
const filterQueuePerWorker = 64

// filters runs the list-topics filters of both ports.
type filters struct {
	slots   chan struct{} // one token per worker
	waiting atomic.Int64  // filters waiting for a worker or running
	limit   int64         // most filters waiting or running

	mu    sync.Mutex
	cache map[string]compiled // by pattern
}

// compiled is a pattern's compiled filter, or why it was refused.
type compiled struct {
	re  *regexp.Regexp
	err error
}

func newFilters(workers int) *filters {
	return &filters{
		slots: make(chan struct{}, workers),
		limit: int64(workers) * (filterQueuePerWorker + 1),
		cache: make(map[string]compiled, filterCacheSize),
	}
}

// keep returns the names that match expr, having waited for a worker.
// It reuses names' array. It blocks: never call it on an event loop.
func (f *filters) keep(expr string, names []string) ([]string, error) {
	if n := f.waiting.Add(1); n > f.limit {
		f.waiting.Add(-1)
		return nil, &protocol.Error{Code: protocol.CodeLimitReached, Message: fmt.Sprintf(
			"list-topics regex: %d filters already waiting for the server's %d filter workers (FilterWorkers)", n-1, cap(f.slots))}
	}
	defer f.waiting.Add(-1)
	f.slots <- struct{}{}
	defer func() { <-f.slots }()
	re, err := f.compile(expr)
	if err != nil {
		return nil, err
	}
	kept := names[:0]
	for _, n := range names {
		if re.MatchString(n) {
			kept = append(kept, n)
		}
		// Yield between names: the scheduler would otherwise let a long
		// filter hold its processor for up to 10 ms, while an event loop
		// waits for one.
		runtime.Gosched()
	}
	return kept, nil
}

// compile returns expr's filter from the cache, compiling it on a miss;
// a pattern refused is remembered too. When the cache is full an
// arbitrary entry makes room. Runs on a filter worker.
func (f *filters) compile(expr string) (*regexp.Regexp, error) {
	f.mu.Lock()
	c, ok := f.cache[expr]
	f.mu.Unlock()
	if ok {
		return c.re, c.err
	}
	c.re, c.err = protocol.CompileTopicFilter(expr)
	f.mu.Lock()
	if len(f.cache) >= filterCacheSize {
		for k := range f.cache {
			delete(f.cache, k)
			break
		}
	}
	f.cache[expr] = c
	f.mu.Unlock()
	return c.re, c.err
}
