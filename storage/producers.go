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
//
// A producer is bound to the owner (a token's hash) whose batch first
// used its id: another owner's batch under that id is refused
// (ErrProducerFenced). Bindings are not in the batches, so they are kept
// in the topic's producers file (bindings.go) and joined to the rebuilt
// table at recovery. A producer forgotten to make room (not for being
// idle) leaves a tombstone, so that its retry is refused
// (ErrUnknownProducer) rather than stored twice.
//
// Sequences may arrive out of order (a Client's goroutines race), and
// may skip (a call given up before its batch was sent). A batch that asks
// for strict order (AppendOptions.StrictSequence: a client.Producer's,
// whose batches must keep Send order across resends and failovers) is
// stored only if its sequence is the highest stored for its producer plus
// one: a gap means an earlier batch is still to come (refused, resent),
// and storing this one first would put it before that batch in the log.

const (
	// dedupWindow is how many of a producer's sequences a topic remembers.
	// A Producer has 4 batches in flight by default; a Client's goroutines
	// take sequences at most this far above the lowest still unanswered
	// (the client waits rather than go further), so a resend always comes
	// back within the window, even with 64 goroutines producing on one
	// Client. A sequence below all of them cannot be told apart from one
	// stored long ago. 64 entries of 24 bytes: 1.5 KiB per producer.
	dedupWindow = 64
	// MaxSequenceStep bounds how far a remembered producer's sequence may
	// jump: a batch whose sequence is more than this above the highest
	// stored for its producer is refused (ErrOutOfOrderSequence). A
	// client's sequences go up by one per batch it sends, stored or
	// refused; only 2^32 refusals in a row, within ProducerIdle, reach it.
	MaxSequenceStep = 1 << 32
	// DefaultProducerIdle is Options.ProducerIdle's default.
	DefaultProducerIdle = time.Hour
	// DefaultMaxProducers is Options.MaxProducers's default.
	DefaultMaxProducers = 1000
)

// ownerQuota is how many producers one owner (token) may hold on a topic
// of at most max producers: a quarter of them, at least one. Past it,
// the owner's own producer idle longest is forgotten to make room.
func ownerQuota(limit int) int {
	return max(1, limit/4)
}

// dedupEntry is one stored batch of a producer.
type dedupEntry struct {
	seq   uint64
	base  int64
	count uint32
}

// producerState is what a topic remembers of one producer: its highest
// sequences, ascending, the append time of its last batch, and its owner
// ("": bound to none, stored without a token).
type producerState struct {
	recent []dedupEntry
	last   int64 // Unix ns
	owner  string
	// touch orders producers with the same last: a commit stamps all of
	// its batches with one time, and the one idle longest must still be
	// one producer, not whichever a map walk meets first.
	touch uint64
}

// producerTable is a topic's producers. The topic's wmu guards it (the
// committer checks and records), except during recovery, which owns the
// topic alone.
type producerTable struct {
	m     map[uint64]*producerState
	owned map[string]int // producers in m per owner ("" included)
	// gone holds the producers forgotten to make room, with their owners,
	// at most as many as m may hold (oldest first in goneFIFO).
	gone     map[uint64]string
	goneFIFO []uint64
	file     bindingsFile // the producers file (bindings.go)
	touches  uint64       // the last producerState.touch given
}

// undoRec restores a producer's state after a commit that wrote nothing.
type undoRec struct {
	id       uint64
	seq      uint64 // the sequence recorded
	owner    string // the owner recorded
	created  bool   // the producer was new
	claimed  bool   // the producer, bound to none, was bound to owner
	wasGone  bool   // the new producer had a tombstone
	evicted  dedupEntry
	hasEvict bool
	last     int64 // the producer's last time before
	touch    uint64
}

// binds reports whether the record bound a producer to an owner, which
// the producers file must hold before the batch is written.
func (u *undoRec) binds() bool {
	return (u.created || u.claimed) && u.owner != ""
}

// lookup classifies sequence seq of producer id, a batch of count
// messages sent by owner, at time now: a duplicate of a stored batch (its
// base offset); a producer bound to another owner (ErrProducerFenced); a
// forgotten producer's batch that is not a new producer's first
// (ErrUnknownProducer); a sequence below every remembered one, or too far
// above them, or with strict any but the highest stored plus one
// (ErrOutOfOrderSequence); or new. A producer the table does not know (or
// knew, but it was idle past idle) takes any sequence, strict or not.
// owner "" is trusted with every producer.
func (pt *producerTable) lookup(id, seq uint64, count int, owner string, strict bool, now int64, idle time.Duration) (base int64, dup bool, err error) {
	ps := pt.m[id]
	if ps != nil && owner != "" && ps.owner != "" && ps.owner != owner {
		return 0, false, fmt.Errorf("%w: producer %#x belongs to another token", ErrProducerFenced, id)
	}
	if ps == nil || now-ps.last > int64(idle) {
		if g, ok := pt.gone[id]; ok && ps == nil {
			if owner != "" && g != "" && g != owner {
				return 0, false, fmt.Errorf("%w: producer %#x belongs to another token", ErrProducerFenced, id)
			}
			if seq > 0 {
				return 0, false, fmt.Errorf("%w: producer %#x was forgotten to make room; sequence %d may have been stored", ErrUnknownProducer, id, seq)
			}
		}
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
	if n := len(ps.recent); strict && n > 0 && seq != ps.recent[n-1].seq+1 {
		return 0, false, fmt.Errorf("%w: producer %#x: sequence %d out of order, expected %d", ErrOutOfOrderSequence, id, seq, ps.recent[n-1].seq+1)
	}
	if n := len(ps.recent); n > 0 && seq > ps.recent[n-1].seq && seq-ps.recent[n-1].seq > MaxSequenceStep {
		return 0, false, fmt.Errorf("%w: sequence %d is more than %d above the highest stored (%d)", ErrOutOfOrderSequence, seq, uint64(MaxSequenceStep), ps.recent[n-1].seq)
	}
	if len(ps.recent) == dedupWindow && seq < ps.recent[0].seq {
		return 0, false, fmt.Errorf("%w: sequence %d is below the last %d remembered (from %d)", ErrOutOfOrderSequence, seq, dedupWindow, ps.recent[0].seq)
	}
	return 0, false, nil
}

// record remembers that producer id's batch seq of count messages, sent
// by owner, was stored at base at time now, and returns how to undo that.
// A new producer is bound to owner; one bound to none is bound to owner
// now.
func (pt *producerTable) record(id, seq uint64, base int64, count int, owner string, now int64, idle time.Duration, max int) undoRec {
	if pt.m == nil {
		pt.m = make(map[uint64]*producerState)
		pt.owned = make(map[string]int)
	}
	u := undoRec{id: id, seq: seq, owner: owner}
	ps := pt.m[id]
	if ps != nil && now-ps.last > int64(idle) {
		ps.recent = ps.recent[:0] // expired: start afresh
	}
	if ps == nil {
		if _, ok := pt.gone[id]; ok {
			delete(pt.gone, id)
			u.wasGone = true
		}
		pt.makeRoom(owner, now, idle, max)
		ps = &producerState{recent: make([]dedupEntry, 0, 4), owner: owner}
		pt.m[id] = ps
		pt.owned[owner]++
		u.created = true
	} else if ps.owner == "" && owner != "" {
		pt.rebind(ps, owner)
		u.claimed = true
	}
	u.last, u.touch = ps.last, ps.touch
	ps.last = max64(ps.last, now)
	pt.touches++
	ps.touch = pt.touches
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

// rebind moves ps to owner.
func (pt *producerTable) rebind(ps *producerState, owner string) {
	pt.owned[ps.owner]--
	ps.owner = owner
	pt.owned[owner]++
}

// undo reverses a record, most recent first.
func (pt *producerTable) undo(u undoRec) {
	ps := pt.m[u.id]
	if ps == nil {
		return
	}
	if u.created {
		delete(pt.m, u.id)
		pt.owned[ps.owner]--
		if u.wasGone {
			pt.bury(u.id, ps.owner, 0)
		}
		return
	}
	if u.claimed {
		pt.rebind(ps, "")
	}
	ps.last, ps.touch = u.last, u.touch
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

// makeRoom makes room for a new producer of owner in a table of at most
// max: past its quota, owner's own producer idle longest is forgotten;
// with the table full, every idle producer, then while still full the
// producer idle longest of the owner holding the most. So one owner can
// push out only its own producers. Owner "" (no token) has no quota.
func (pt *producerTable) makeRoom(owner string, now int64, idle time.Duration, max int) {
	if owner != "" && pt.owned[owner] >= ownerQuota(max) {
		pt.forget(pt.oldest(owner), max)
	}
	if len(pt.m) >= max {
		pt.evict(now, idle, max-1)
	}
}

// evict forgets the producers idle for longer than idle and then, while
// more than keep remain, the one idle longest of the owner holding the
// most, leaving it a tombstone.
func (pt *producerTable) evict(now int64, idle time.Duration, keep int) {
	for id, ps := range pt.m {
		if now-ps.last > int64(idle) {
			delete(pt.m, id)
			pt.owned[ps.owner]--
		}
	}
	for len(pt.m) > keep && len(pt.m) > 0 {
		pt.forget(pt.oldest(pt.largestOwner()), keep+1)
	}
}

// largestOwner is the owner holding the most producers.
func (pt *producerTable) largestOwner() string {
	best, n := "", -1
	for o, k := range pt.owned {
		if k > n || (k == n && o < best) {
			best, n = o, k
		}
	}
	return best
}

// oldest is owner's producer idle longest.
func (pt *producerTable) oldest(owner string) uint64 {
	var id uint64
	var best *producerState
	for pid, ps := range pt.m {
		if ps.owner == owner && (best == nil || ps.last < best.last || (ps.last == best.last && ps.touch < best.touch)) {
			id, best = pid, ps
		}
	}
	return id
}

// forget removes producer id, leaving a tombstone among at most max.
func (pt *producerTable) forget(id uint64, max int) {
	ps := pt.m[id]
	if ps == nil {
		return
	}
	delete(pt.m, id)
	pt.owned[ps.owner]--
	pt.bury(id, ps.owner, max)
}

// bury leaves a tombstone for id, bound to owner, keeping at most max
// (0: no bound) by dropping the oldest.
func (pt *producerTable) bury(id uint64, owner string, max int) {
	if pt.gone == nil {
		pt.gone = make(map[uint64]string)
	}
	pt.gone[id] = owner
	pt.goneFIFO = append(pt.goneFIFO, id)
	for max > 0 && len(pt.gone) > max && len(pt.goneFIFO) > 0 {
		delete(pt.gone, pt.goneFIFO[0])
		pt.goneFIFO = pt.goneFIFO[1:]
	}
	if len(pt.goneFIFO) > 2*len(pt.gone)+64 {
		// Drop the ids no longer buried, so the queue stays bounded too.
		q := pt.goneFIFO[:0]
		for _, g := range pt.goneFIFO {
			if _, ok := pt.gone[g]; ok {
				q = append(q, g)
			}
		}
		pt.goneFIFO = q
	}
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
