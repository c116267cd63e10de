package storage

import (
	"fmt"
	"time"
)

// Idempotent producers. A batch with protocol.FlagProducer carries its
// producer's id and a sequence number; each topic remembers, per producer,
// the dedupWindow highest sequences it stored with their base offsets, so
// that a batch sent again (after a lost answer or a reconnect) is answered
// with the offset it got the first time instead of being stored twice.
// The table is state derived from the log: recovery rebuilds it from the
// batch headers it reads anyway, so it survives restarts and kill -9.

const (
	// dedupWindow is how many of a producer's sequences a topic remembers.
	// A Producer has 4 batches in flight by default, and a Client's
	// goroutines as many Produce calls as they make at once; a resend
	// comes back among the last few dozen unless more than that many
	// produces were in flight when its connection broke. A sequence below
	// all of them cannot be told apart from one stored long ago. 32
	// entries of 24 bytes: under 1 KiB per producer.
	dedupWindow = 32
	// DefaultProducerIdle is Options.ProducerIdle's default.
	DefaultProducerIdle = time.Hour
	// DefaultMaxProducers is Options.MaxProducers's default.
	DefaultMaxProducers = 1000
)

// dedupEntry is one stored batch of a producer.
type dedupEntry struct {
	seq   uint64
	base  int64
	count uint32
}

// producerState is what a topic remembers of one producer: its highest
// sequences, ascending, and the append time of its last batch.
type producerState struct {
	recent []dedupEntry
	last   int64 // Unix ns
}

// producerTable is a topic's producers. The topic's wmu guards it (the
// committer checks and records), except during recovery, which owns the
// topic alone.
type producerTable struct {
	m map[uint64]*producerState
}

// undoRec restores a producer's state after a commit that wrote nothing.
type undoRec struct {
	id       uint64
	seq      uint64 // the sequence recorded
	created  bool   // the producer was new
	evicted  dedupEntry
	hasEvict bool
	last     int64 // the producer's last time before
}

// lookup classifies sequence seq of producer id, a batch of count
// messages, at time now: a duplicate of a stored batch (its base offset),
// a sequence below every remembered one (ErrOutOfOrderSequence), or new.
func (pt *producerTable) lookup(id, seq uint64, count int, now int64, idle time.Duration) (base int64, dup bool, err error) {
	ps := pt.m[id]
	if ps == nil || now-ps.last > int64(idle) {
		return 0, false, nil
	}
	for i := len(ps.recent) - 1; i >= 0; i-- {
		e := ps.recent[i]
		if e.seq == seq {
			if int(e.count) != count {
				return 0, false, fmt.Errorf("%w: sequence %d was stored with %d messages, sent again with %d", ErrOutOfOrderSequence, seq, e.count, count)
			}
			return e.base, true, nil
		}
		if e.seq < seq {
			break
		}
	}
	if len(ps.recent) == dedupWindow && seq < ps.recent[0].seq {
		return 0, false, fmt.Errorf("%w: sequence %d is below the last %d remembered (from %d)", ErrOutOfOrderSequence, seq, dedupWindow, ps.recent[0].seq)
	}
	return 0, false, nil
}

// record remembers that producer id's batch seq of count messages was
// stored at base at time now, and returns how to undo that.
func (pt *producerTable) record(id, seq uint64, base int64, count int, now int64, idle time.Duration, max int) undoRec {
	if pt.m == nil {
		pt.m = make(map[uint64]*producerState)
	}
	u := undoRec{id: id, seq: seq}
	ps := pt.m[id]
	if ps != nil && now-ps.last > int64(idle) {
		ps.recent = ps.recent[:0] // expired: start afresh
	}
	if ps == nil {
		if len(pt.m) >= max {
			pt.evict(now, idle, max-1)
		}
		ps = &producerState{recent: make([]dedupEntry, 0, 4)}
		pt.m[id] = ps
		u.created = true
	}
	u.last = ps.last
	ps.last = max64(ps.last, now)
	e := dedupEntry{seq: seq, base: base, count: uint32(count)}
	i := len(ps.recent)
	for i > 0 && ps.recent[i-1].seq > seq {
		i--
	}
	if len(ps.recent) == dedupWindow {
		if i == 0 {
			return u // lower than everything remembered: lookup refuses it anyway
		}
		u.evicted, u.hasEvict = ps.recent[0], true
		copy(ps.recent, ps.recent[1:i])
		ps.recent[i-1] = e
		return u
	}
	ps.recent = append(ps.recent, dedupEntry{})
	copy(ps.recent[i+1:], ps.recent[i:])
	ps.recent[i] = e
	return u
}

// undo reverses a record, most recent first.
func (pt *producerTable) undo(u undoRec) {
	ps := pt.m[u.id]
	if ps == nil {
		return
	}
	if u.created {
		delete(pt.m, u.id)
		return
	}
	ps.last = u.last
	for i, e := range ps.recent {
		if e.seq == u.seq {
			ps.recent = append(ps.recent[:i], ps.recent[i+1:]...)
			break
		}
	}
	if u.hasEvict {
		ps.recent = append([]dedupEntry{u.evicted}, ps.recent...)
	}
}

// evict forgets the producers idle for longer than idle and then, while
// more than keep remain, the one idle longest.
func (pt *producerTable) evict(now int64, idle time.Duration, keep int) {
	for id, ps := range pt.m {
		if now-ps.last > int64(idle) {
			delete(pt.m, id)
		}
	}
	for len(pt.m) > keep {
		var oldest uint64
		first := true
		var t int64
		for id, ps := range pt.m {
			if first || ps.last < t {
				oldest, t, first = id, ps.last, false
			}
		}
		delete(pt.m, oldest)
	}
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
