package storage

import (
	"sync"
	"sync/atomic"
)

// This file: a replicated topic's leader hands each commit's batches to
// its followers' reads as it writes them, not after (SetHandEarly). The
// followers' copy then overlaps the leader's own write instead of
// following it. A follower may so hold a batch the leader's log does not,
// for as long as the leader's write of it is in progress; the leader
// accounts for that:
//
//   - a write of a part a follower read that fails for space is not cut
//     back: the topic turns read-only, as after any other failed write,
//     and its replication hands the lead on (a leader that went on at the
//     same offsets would leave the follower holding other batches there);
//   - the replication does not let a leader that restarted take writes
//     under the epoch it led before (the part it lost with its process
//     may be on a follower): it leads under a new epoch, and its followers
//     cut their logs back to its end of the old one (KIP-101).
//
// The batches are the appender's buffers: a read holds the part's read
// lock while the broker copies them into the follower's connection, and
// the writer takes the write lock once its write ends, before any
// appender is answered (and its buffer reused), so that no read sees them
// afterwards. A read that finds the writer there reads from the files.

// earlyPart is one part of a commit (commit.go) handed to followers'
// reads before it is written.
type earlyPart struct {
	base, end int64    // the offsets of its first message and past its last
	bufs      [][]byte // the batches, in order
	bytes     int64

	mu    sync.RWMutex
	gone  bool        // the write ended: bufs are no longer to be read; mu held
	taken atomic.Bool // a read took the batches (set under the read lock)
}

// SetHandEarly makes topic name hand each commit's batches to followers'
// reads (ReadReplica, WatchReplica) as it writes them (on), or after
// (off, the default). A replicated topic's leader sets it.
func (s *Store) SetHandEarly(name string, on bool) error {
	t, err := s.lookup(name)
	if err != nil {
		return err
	}
	t.handEarly.Store(on)
	return nil
}

// handOut makes the part [base, end) of bufs readable by followers' reads
// and wakes those parked before end, ahead of its write. It returns nil
// when the topic does not hand parts out early. wmu must be held.
func (t *topic) handOut(base, end int64, bufs [][]byte) *earlyPart {
	if !t.handEarly.Load() || len(bufs) == 0 {
		return nil
	}
	e := &earlyPart{base: base, end: end, bufs: append([][]byte(nil), bufs...)}
	for _, b := range bufs {
		e.bytes += int64(len(b))
	}
	t.early.Store(e)
	t.mu.Lock()
	var ready []waiter
	kept := t.waiters[:0]
	for _, w := range t.waiters {
		if w.replica && end > w.offset {
			ready = append(ready, w)
		} else {
			kept = append(kept, w)
		}
	}
	clear(t.waiters[len(kept):])
	t.waiters = kept
	t.mu.Unlock()
	for _, w := range ready {
		w.fn()
	}
	return e
}

// retire ends e's reads once its write has ended, written or not, and
// reports whether a read took its batches. A part that was not written is
// forgotten at once; a written one stays known (earlyEnd) until readers
// see it published. wmu must be held.
func (t *topic) retire(e *earlyPart, written bool) (taken bool) {
	if e == nil {
		return false
	}
	e.mu.Lock()
	e.gone = true
	e.mu.Unlock()
	if !written {
		t.early.CompareAndSwap(e, nil)
	}
	return e.taken.Load()
}

// readEarly returns the part that begins at offset as a read's result, if
// one is being written and nothing before it is unpublished; the result
// holds the part's read lock until it is released.
func (t *topic) readEarly(offset int64) *ReadResult {
	e := t.early.Load()
	if e == nil || e.base != offset || !e.mu.TryRLock() {
		return nil
	}
	if e.gone {
		e.mu.RUnlock()
		return nil
	}
	t.mu.RLock()
	ok := t.next == offset && t.err == nil
	t.mu.RUnlock()
	if !ok {
		e.mu.RUnlock()
		return nil
	}
	e.taken.Store(true)
	t.replicaRead.Add(e.end - e.base)
	t.replicaReadBytes.Add(e.bytes)
	return &ReadResult{Offset: offset, First: offset, Next: e.end, End: e.end, Batches: len(e.bufs), Bytes: e.bytes,
		Mem: e.bufs, early: e}
}

// EarlyEnd returns where topic name's log ends counting the part being
// written or written and not yet published (SetHandEarly): a follower
// may have read up to there.
func (s *Store) EarlyEnd(name string) (int64, error) {
	t, err := s.lookup(name)
	if err != nil {
		return 0, err
	}
	t.mu.RLock()
	next := t.next
	t.mu.RUnlock()
	if e := t.early.Load(); e != nil && e.end > next {
		return e.end, nil
	}
	return next, nil
}
