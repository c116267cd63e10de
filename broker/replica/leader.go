package replica

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// This file: the leader's side of a replicated topic, as the service
// asks it (service.Replicas, service.Followers): who takes writes, the acks=all wait,
// the high-water mark reads stop at, and the followers' fetches.

// Replicated implements service.Replicas.
func (m *Manager) Replicated(topic string) bool {
	_, _, ok := m.lookup(topic)
	return ok || !m.isSynced() // before, every topic may be: writable refuses
}

// Producing implements service.Replicas: whether topic is replicated,
// and whether this member takes the produce (writable, then, for
// acks=all, canAckAll).
func (m *Manager) Producing(topic string, acksAll bool) (bool, error) {
	replicated := m.Replicated(topic)
	if err := m.writable(topic); err != nil {
		return replicated, err
	}
	if acksAll {
		return replicated, m.canAckAll(topic)
	}
	return replicated, nil
}

// writable returns nil when this member takes writes to topic (it leads
// it, or topic is not replicated), else a *service.NotLeaderError.
func (m *Manager) writable(topic string) error {
	if !m.isSynced() {
		return m.notLeader(topic, "") // not known yet: ask again shortly
	}
	t, rt, ok := m.lookup(topic)
	if !ok {
		return nil
	}
	if rt == nil || t.Leader != m.cfg.Self || !m.inContact() {
		if t.Leader == m.cfg.Self {
			return m.notLeader(topic, "") // cut off from the cluster
		}
		return m.notLeader(topic, t.Leader)
	}
	rt.mu.Lock()
	ready, handing, others := rt.ready, rt.handing, len(rt.meta.ISR) > 1
	rt.mu.Unlock()
	if !ready || handing || m.draining.Load() {
		return m.notLeader(topic, "") // taking the lead, or handing it off: retry shortly
	}
	if others && m.copyFailed(topic) {
		// The lead goes to an in-sync follower (handOver): retry shortly.
		m.Poke()
		return m.notLeader(topic, "")
	}
	return nil
}

// copyFailed reports whether this member's copy of topic turned
// read-only: a write or an fsync of it failed (storage.Log.ReadOnly).
// Until a restart reopens it, it takes no batch, as a leader or as a
// follower.
func (m *Manager) copyFailed(topic string) bool {
	l, err := m.store.Log(topic)
	if err != nil {
		return false
	}
	return errors.Is(l.ReadOnly(), storage.ErrReadOnly)
}

// ErrNotEnoughReplicas refuses a produce with acks=all.
var ErrNotEnoughReplicas = errors.New("replica: not enough in-sync replicas")

type codedErr struct {
	error
	code protocol.Code
}

func (e codedErr) WireCode() protocol.Code { return e.code }
func (e codedErr) Unwrap() error           { return e.error }

// canAckAll returns nil when a produce to topic with acks=all may be
// appended: its in-sync set holds at least the minimum, else an error of
// CodeNotEnoughReplicas.
func (m *Manager) canAckAll(topic string) error {
	t, _, ok := m.lookup(topic)
	if !ok || len(t.ISR) >= m.cfg.MinInsync {
		return nil
	}
	return codedErr{fmt.Errorf("%w: topic %q has %d in-sync replicas, %d needed (-min-insync)", ErrNotEnoughReplicas, topic, len(t.ISR), m.cfg.MinInsync),
		protocol.CodeNotEnoughReplicas}
}

// Appended implements service.Replicas.
func (m *Manager) Appended(topic string, end int64, acksAll bool, fn func(error)) {
	_, rt, ok := m.lookup(topic)
	if !ok || rt == nil {
		if acksAll && ok {
			fn(outcomeUnknown(m.notLeader(topic, ""))) // no longer a replica here, though written
			return
		}
		fn(nil)
		return
	}
	rt.mu.Lock()
	calls := rt.advance(m)
	switch {
	case !acksAll && !rt.handing && !m.draining.Load():
		rt.mu.Unlock()
		calls.run()
		fn(nil)
		return
	case !rt.leading(m.cfg.Self):
		leader := rt.meta.Leader
		rt.mu.Unlock()
		calls.run()
		fn(outcomeUnknown(m.notLeader(topic, leader))) // written here, not committed
		return
	case rt.hw >= end:
		rt.mu.Unlock()
		calls.run()
		fn(nil)
		return
	}
	rt.waiters = append(rt.waiters, &waiter{end: end, fn: fn, deadline: time.Now().Add(m.cfg.AckTimeout)})
	rt.mu.Unlock()
	calls.run()
}

// Readable implements service.Replicas.
func (m *Manager) Readable(topic string) (int64, bool, error) {
	if !m.isSynced() {
		return 0, true, m.notLeader(topic, "")
	}
	t, rt, ok := m.lookup(topic)
	if !ok {
		return 0, false, nil
	}
	if rt == nil || !m.inContact() || !(t.Leader == m.cfg.Self || t.InSync(m.cfg.Self)) {
		return 0, true, m.notLeader(topic, t.Leader)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if t.Leader == m.cfg.Self && !rt.ready {
		return 0, true, m.notLeader(topic, "")
	}
	return rt.hw, true, nil
}

// WatchReadable implements service.Replicas.
func (m *Manager) WatchReadable(topic string, offset int64, fn func()) (func() bool, bool) {
	_, rt, ok := m.lookup(topic)
	if !ok || rt == nil {
		return nil, false
	}
	w := &watch{offset: offset, fn: fn}
	rt.mu.Lock()
	if rt.hw > offset {
		rt.mu.Unlock()
		fn()
		return func() bool { return false }, true
	}
	rt.watches[w] = struct{}{}
	rt.mu.Unlock()
	return func() bool {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		if _, ok := rt.watches[w]; ok {
			delete(rt.watches, w)
			return true
		}
		return false
	}, true
}

// errFenced answers a replica request under another epoch.
func errFenced(topic string, theirs, ours int64) error {
	return &protocol.Error{Code: protocol.CodeFencedEpoch,
		Message: fmt.Sprintf("topic %q: the follower follows epoch %d, the leader leads epoch %d", topic, theirs, ours)}
}

// Fetch implements service.Followers.
func (m *Manager) Fetch(topic, follower string, epoch, offset int64) (service.FetchAnswer, error) {
	t, rt, ok := m.lookup(topic)
	if !ok || rt == nil {
		return service.FetchAnswer{}, m.notLeader(topic, t.Leader)
	}
	if !t.IsReplica(follower) || follower == m.cfg.Self {
		return service.FetchAnswer{}, fmt.Errorf("%w: %q is not a follower of topic %q", protocol.ErrInvalidArgument, follower, topic)
	}
	if !m.inContact() {
		return service.FetchAnswer{}, m.notLeader(topic, "")
	}
	l, err := m.store.Log(topic)
	if err != nil {
		return service.FetchAnswer{}, err
	}
	epochs, err := l.Epochs()
	if err != nil {
		return service.FetchAnswer{}, err
	}
	info, err := l.Info()
	if err != nil {
		return service.FetchAnswer{}, err
	}
	rt.mu.Lock()
	if !rt.leading(m.cfg.Self) {
		leader := rt.meta.Leader
		rt.mu.Unlock()
		return service.FetchAnswer{}, m.notLeader(topic, leader)
	}
	if epoch != rt.meta.Epoch {
		ours := rt.meta.Epoch
		rt.mu.Unlock()
		return service.FetchAnswer{}, errFenced(topic, epoch, ours)
	}
	if offset > info.Next {
		rt.mu.Unlock()
		return service.FetchAnswer{}, fmt.Errorf("%w: topic %q: the follower is at %d, past the leader's end %d: it must truncate first", storage.ErrOffsetOutOfRange, topic, offset, info.Next)
	}
	f := rt.fol[follower]
	if f == nil {
		f = &fstate{caughtUp: time.Now()}
		rt.fol[follower] = f
	}
	f.leo, f.fetched, f.gone = offset, time.Now(), false
	if offset >= info.Next {
		f.caughtUp = f.fetched
	}
	// A follower whose log ends before this one's start (retention or a
	// truncation dropped what it lacks) is sent the log from the start,
	// and starts its own there (session.fetch, restartAt).
	from := max(offset, info.Oldest)
	var expand []string
	if !rt.meta.InSync(follower) && offset >= rt.hw && !rt.altering {
		expand = append(slices.Clone(rt.meta.ISR), follower)
		rt.altering = true
	}
	calls := rt.advance(m)
	ans := service.FetchAnswer{HighWater: rt.hw, Epoch: rt.meta.Epoch, From: from}
	version := rt.meta.Version
	rt.mu.Unlock()
	calls.run()
	ans.BatchEpoch, ans.Limit = epochAt(epochs, from)
	if expand != nil {
		m.alterISR(rt, epoch, version, expand, "caught up", follower)
	}
	return ans, nil
}

// epochAt returns the epoch of the batches at offset from and how many
// messages from there belong to it (0: all the log holds), so that one
// answer never carries batches of two epochs.
func epochAt(epochs []storage.EpochStart, from int64) (epoch int64, limit int) {
	if len(epochs) > 0 && epochs[0].Start > from {
		limit = int(min(epochs[0].Start-from, 1<<31-1)) // written before any epoch was recorded
	}
	for i, e := range epochs {
		if e.Start > from {
			break
		}
		epoch = e.Epoch
		if i+1 < len(epochs) {
			limit = int(min(epochs[i+1].Start-from, 1<<31-1))
		} else {
			limit = 0
		}
	}
	return epoch, limit
}

// EpochEnd implements service.Followers.
func (m *Manager) EpochEnd(topic string, epoch int64) (int64, int64, error) {
	t, rt, ok := m.lookup(topic)
	if !ok || rt == nil {
		return 0, 0, m.notLeader(topic, t.Leader)
	}
	rt.mu.Lock()
	leading := rt.leading(m.cfg.Self)
	rt.mu.Unlock()
	if !leading {
		return 0, 0, m.notLeader(topic, t.Leader)
	}
	l, err := m.store.Log(topic)
	if err != nil {
		return 0, 0, err
	}
	return l.EpochEnd(epoch)
}
