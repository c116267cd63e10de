package storage

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Group slots: every group of every topic holds one of MaxGroups, and one
// of Options.MaxGroupsPerToken of the token (its hash, Owner) that created
// it; groups created without a token ("") count against MaxGroups only.
// The owner of a committed group is kept in the groups file, so a restart
// does not reset the quota. A group that holds only a lease frees its
// slot once the lease expires: at once on the topic's next listing, and
// over all topics by a sweep that a group refused for a full bound runs
// (at most once per groupsSweepGap, and only once some lease may have
// expired) before it is refused.

// groupsSweepGap is the shortest time between two sweeps, which bounds
// the work refused groups can cause: one sweep walks every group (at most
// MaxGroups) once.
const groupsSweepGap = 10 * time.Millisecond

// groupQuota counts the groups of each owner and schedules sweeps.
type groupQuota struct {
	mu     sync.Mutex
	owners map[string]int // groups per owner, "" not counted

	sweepMu   sync.Mutex
	lastSweep time.Time // guarded by sweepMu
	// nextExpiry is at most the lease expiry (UnixNano) of every group
	// that holds only a lease: no sweep is run before it.
	nextExpiry atomic.Int64
}

// groupsFullError is a group refused for a full MaxGroups or owner quota:
// a sweep of expired leases may make room.
type groupsFullError struct{ err error }

func (e *groupsFullError) Error() string { return e.err.Error() }
func (e *groupsFullError) Unwrap() error { return e.err }

// countGroup adds delta groups of owner to the counts.
func (s *Store) countGroup(owner string, delta int) {
	s.groupCount.Add(int64(delta))
	if owner == "" {
		return
	}
	q := &s.groupOwners
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.owners == nil {
		q.owners = make(map[string]int)
	}
	if n := q.owners[owner] + delta; n > 0 {
		q.owners[owner] = n
	} else {
		delete(q.owners, owner)
	}
}

// ownerGroups returns the groups owner holds (for tests).
func (s *Store) ownerGroups(owner string) int {
	q := &s.groupOwners
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.owners[owner]
}

// reserveSlot takes a slot of MaxGroups and of owner's quota for group on
// topic name, or returns a groupsFullError naming the bound.
func (s *Store) reserveSlot(owner, name, group string) error {
	if s.groupCount.Add(1) > MaxGroups {
		s.groupCount.Add(-1)
		return &groupsFullError{fmt.Errorf("%w: the server holds %d groups over all topics, the limit (MaxGroups); group %q on topic %q is refused", ErrTooManyGroups, MaxGroups, group, name)}
	}
	if owner == "" {
		return nil
	}
	q := &s.groupOwners
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.owners == nil {
		q.owners = make(map[string]int)
	}
	if limit := s.opts.MaxGroupsPerToken; q.owners[owner] >= limit {
		s.groupCount.Add(-1)
		return &groupsFullError{fmt.Errorf("%w: the token holds %d groups over all topics, its limit (-max-groups-per-token); group %q on topic %q is refused: delete unused groups or let leases expire", ErrTooManyGroups, limit, group, name)}
	}
	q.owners[owner]++
	return nil
}

// noteLeaseOnly records that a group holding only a lease expires at
// until, so that a sweep may run from then.
func (s *Store) noteLeaseOnly(until time.Time) {
	at := until.UnixNano()
	for {
		cur := s.groupOwners.nextExpiry.Load()
		if cur <= at || s.groupOwners.nextExpiry.CompareAndSwap(cur, at) {
			return
		}
	}
}

// sweepGroups drops, over all topics, the groups that hold only an
// expired lease, and returns how many it dropped; it does nothing when
// the last sweep was less than groupsSweepGap ago or no such lease can
// have expired yet. It takes each topic's group table in turn, so the
// caller must hold none.
func (s *Store) sweepGroups() int {
	q := &s.groupOwners
	q.sweepMu.Lock()
	defer q.sweepMu.Unlock()
	now := time.Now()
	if now.Sub(q.lastSweep) < groupsSweepGap || now.UnixNano() < q.nextExpiry.Load() {
		return 0
	}
	q.lastSweep = now
	q.nextExpiry.Store(math.MaxInt64)
	dropped := 0
	for _, t := range s.allTopics() {
		dropped += t.dropExpiredLeases(now)
	}
	return dropped
}

// dropExpiredLeases drops t's groups that hold only a lease expired at
// now, notes the expiry of those still leased, and returns how many it
// dropped.
func (t *topic) dropExpiredLeases(now time.Time) int {
	g := &t.groups
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gone != nil {
		return 0
	}
	return t.s.dropExpiredLocked(g, now)
}

// dropExpiredLocked is dropExpiredLeases with g.mu held.
func (s *Store) dropExpiredLocked(g *groupTable, now time.Time) int {
	dropped := 0
	for n, e := range g.m {
		if e.committed != NoOffset {
			continue
		}
		if e.leasedBy(now) == "" {
			s.dropGroupLocked(g, n)
			dropped++
		} else {
			s.noteLeaseOnly(e.until)
		}
	}
	return dropped
}

// retryAfterSweep reports whether err refused a group for a full bound
// and a sweep made room, so that the operation is worth trying again.
func (s *Store) retryAfterSweep(err error) bool {
	var full *groupsFullError
	return errors.As(err, &full) && s.sweepGroups() > 0
}

// MaxGroupsPerToken returns Options.MaxGroupsPerToken.
func (s *Store) MaxGroupsPerToken() int { return s.opts.MaxGroupsPerToken }
