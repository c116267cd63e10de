package storage

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// fileBudget bounds the descriptors a store holds for segment files:
// the read cache's handles and the topics' write handles (active segment
// logs and the next segment's prepared files) together, at most max
// (Options.MaxOpenFiles). A topic that needs write handles over the budget
// first sheds idle read handles, then parks the least recently written
// topics (closes their active segment's files, which are reopened by their
// next append); a topic busy committing is never parked. Read handles in
// use by a read are never closed, so reads may take the store over the
// budget for as long as they last, and never fail for it; a writer fails
// with ErrTooManyFiles only when write handles alone would exceed it after
// every idle topic is parked.
type fileBudget struct {
	max   int64
	used  atomic.Int64 // open descriptors: read cache and write handles
	cache *fileCache

	mu      sync.Mutex
	writes  int64          // write handles, of used
	writers map[*topic]int // write handles held per topic
}

func newFileBudget(max int) *fileBudget {
	return &fileBudget{max: int64(max), writers: make(map[*topic]int)}
}

// parkSlack is the share of the budget that parking frees beyond the
// need, so that a store cycling through more topics than fit parks a few
// topics at a time rather than one per append.
const parkSlack = 16

// reserve accounts for n write handles that t is about to open, making
// room first. On error nothing is reserved.
//
// Handles held by background work (a segment being sealed, the next one's
// files being created) cannot be parked but are soon closed, so reserve
// tries again for up to reserveWait before it gives up.
func (b *fileBudget) reserve(t *topic, n int) error {
	deadline := time.Now().Add(reserveWait)
	for {
		if b.used.Load()+int64(n) > b.max {
			if b.cache != nil {
				b.cache.shed(int(b.used.Load() + int64(n) - b.max))
			}
			if over := b.used.Load() + int64(n) - b.max; over > 0 {
				b.park(t, over+b.max/parkSlack)
			}
		}
		b.mu.Lock()
		if b.writes+int64(n) <= b.max {
			b.writes += int64(n)
			b.writers[t] += n
			b.used.Add(int64(n))
			b.mu.Unlock()
			return nil
		}
		writes := b.writes
		b.mu.Unlock()
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %d write handles open, budget %d (MaxOpenFiles)", ErrTooManyFiles, writes, b.max)
		}
		time.Sleep(reserveWait / 20)
	}
}

// reserveWait is how long reserve waits for background work to close
// write handles.
const reserveWait = 20 * time.Millisecond

// tight reports whether write handles hold half the budget or more: then
// topics seal full segments at once and create the next segment's files
// when it starts, not ahead in the background, so that no handle is held
// by work nobody waits for.
func (b *fileBudget) tight() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return 2*b.writes >= b.max
}

// release accounts for n write handles of t closed.
func (b *fileBudget) release(t *topic, n int) {
	if n == 0 {
		return
	}
	b.used.Add(int64(-n))
	b.mu.Lock()
	b.writes -= int64(n)
	if b.writers[t] -= n; b.writers[t] <= 0 {
		delete(b.writers, t)
	}
	b.mu.Unlock()
}

// park closes the write handles of the least recently written topics other
// than self, about want of them, skipping topics busy committing.
func (b *fileBudget) park(self *topic, want int64) {
	b.mu.Lock()
	victims := make([]*topic, 0, len(b.writers))
	for t := range b.writers {
		if t != self {
			victims = append(victims, t)
		}
	}
	b.mu.Unlock()
	slices.SortFunc(victims, func(x, y *topic) int {
		return int(x.lastWrite.Load() - y.lastWrite.Load())
	})
	freed := int64(0)
	for _, t := range victims {
		if freed >= want {
			return
		}
		if !t.wmu.TryLock() {
			continue // committing: it is in use, not a good victim anyway
		}
		if t.committer.flying() {
			t.wmu.Unlock()
			continue // a group is being fsynced in its files
		}
		freed += int64(t.park())
		t.wmu.Unlock()
	}
}

// writeFiles counts the write handles open, for Stats.
func (b *fileBudget) writeFiles() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return int(b.writes)
}

// DefaultMaxOpenFiles derives the default file budget from the process's
// descriptor limit: half of it less 64, at most 65536 and at least 16. The
// broker's default connection limit takes the other half.
func DefaultMaxOpenFiles() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 65536
	}
	return DefaultMaxOpenFilesFor(int(rl.Cur))
}

// DefaultMaxOpenFilesFor is DefaultMaxOpenFiles for a descriptor limit of
// nofile.
func DefaultMaxOpenFilesFor(nofile int) int {
	return max(16, min((nofile-64)/2, 65536))
}

// transientOpenErr reports whether err, from starting or reopening a
// segment (nothing written yet), says only that a resource ran out for now:
// descriptors, the file budget, space or memory. The topic stays writable
// and the next append tries again.
func transientOpenErr(err error) bool {
	return errors.Is(err, ErrTooManyFiles) || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.ENOMEM)
}

// noSpaceErr reports whether err is a write that failed for space.
func noSpaceErr(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// resourceError is an append that failed because a resource ran out, as
// the client is told it: its message names the limit and no server path;
// the cause, with paths, is logged.
type resourceError struct {
	kind  error // ErrNoSpace or ErrTooManyFiles
	msg   string
	cause error
}

func (e *resourceError) Error() string   { return e.msg }
func (e *resourceError) Unwrap() []error { return []error{e.kind, e.cause} }

// resourceErr turns a failure of the operating system for space or
// descriptors, after which nothing stays written, into an ErrNoSpace or
// ErrTooManyFiles fit for a client, and logs the cause; after a failure for
// space it measures free space at once, so that other topics' appends stop
// at the floor rather than at their own ENOSPC. Other errors pass as they
// are.
func (t *topic) resourceErr(err error) error {
	var kind error
	var msg string
	switch {
	case errors.Is(err, ErrTooManyFiles), errors.Is(err, ErrNoSpace):
		return err // from the budget or the floor: already fit to send
	case noSpaceErr(err):
		t.s.measureSpace()
		kind, msg = ErrNoSpace, fmt.Sprintf("%v: topic %q: a write failed for space and was cut back; appends resume once space is freed", ErrNoSpace, t.name)
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		kind, msg = ErrTooManyFiles, fmt.Sprintf("%v: topic %q: the process is out of descriptors (its RLIMIT_NOFILE); nothing was written", ErrTooManyFiles, t.name)
	default:
		return err
	}
	if t.s.resourceLog.due() {
		t.s.opts.Logger.Warn("append refused: a resource ran out; the topic stays writable", "topic", t.name, "err", err)
	}
	return &resourceError{kind: kind, msg: msg, cause: err}
}

// everyFew rate-limits a log line to one per resourceLogEvery.
type everyFew struct{ last atomic.Int64 }

const resourceLogEvery = 10 * time.Second

func (e *everyFew) due() bool {
	now := time.Now().UnixNano()
	last := e.last.Load()
	return now-last >= int64(resourceLogEvery) && e.last.CompareAndSwap(last, now)
}
