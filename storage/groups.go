package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// Consumer groups: per (group, topic) a committed offset, kept in the
// topic's groups file on every volume (see doc.go, "Groups file"), and a
// lease in memory that at most one member holds at a time. Every group
// holds a slot of MaxGroups and of its owner's quota (groupsquota.go).

// Group limits and lease bounds.
const (
	// MaxGroupsPerTopic bounds the groups a topic keeps (committed or
	// leased); one more is refused with ErrTooManyGroups. It bounds the
	// live size of the groups file to 530 KiB.
	MaxGroupsPerTopic = 1024
	// MaxGroups bounds the groups of all topics together, so that the
	// tables held in memory stay under about 20 MiB.
	MaxGroups = 65536
	// DefaultMaxGroupsPerToken is Options.MaxGroupsPerToken's default:
	// the groups one token holds over all topics.
	DefaultMaxGroupsPerToken = 1024
	// DefaultLease is the lease a member gets when it asks for none.
	DefaultLease = protocol.DefaultLeaseMs * time.Millisecond
	// MinLease is the shortest lease granted: shorter requests get it.
	MinLease = 100 * time.Millisecond
	// MaxLease is the longest lease granted.
	MaxLease = protocol.MaxLeaseMs * time.Millisecond
	// NoOffset is the committed offset of a group without a commit.
	NoOffset = protocol.NoOffset
)

// GroupOffset is the state of one (group, topic).
type GroupOffset struct {
	Group string
	// Committed is the offset the group committed last, NoOffset if none.
	Committed int64
	// Start is where the group reads from: Committed, raised to the
	// topic's oldest offset when a truncation went past it, or the oldest
	// offset when the group has no commit.
	Start int64
	// Oldest and Next are the topic's offsets.
	Oldest, Next int64
	// LeaseLeft is the time left on the lease held on the pair (0: none);
	// Member holds it.
	LeaseLeft time.Duration
	Member    string
}

// Commit describes a commit (Log.CommitOffset).
type Commit struct {
	// Offset is the offset the group reads from next: one past the last
	// message it processed. At least 0, at most the topic's next offset.
	Offset int64
	// Compare makes the commit conditional: it is applied only while the
	// committed offset is Expect (NoOffset: none), else ErrCommitConflict.
	Compare bool
	Expect  int64
	// Member is the committing lease holder; empty for none. A commit is
	// refused with ErrGroupBusy while another member holds a live lease.
	Member string
	// Owner names the caller's token (its hash; "" without auth): a group
	// the commit creates is its owner's, counted in its quota
	// (Options.MaxGroupsPerToken).
	Owner string
}

// groupEntry is one group of a topic. Committed is NoOffset for a group
// that only holds a lease, which is not written to the groups file.
type groupEntry struct {
	committed int64
	owner     string    // the token that created the group; "" without auth
	member    string    // lease holder; "" for none
	until     time.Time // lease expiry
}

// state is e as the group rules see it (grouprules.go); NoGroup for nil.
func (e *groupEntry) state() GroupState {
	if e == nil {
		return NoGroup
	}
	return GroupState{Committed: e.committed, Owner: e.owner, Member: e.member, Until: e.until}
}

func (e *groupEntry) leasedBy(now time.Time) string { return e.state().LeasedBy(now) }

// groupTable is a topic's groups. mu is taken before the topic's mu and
// after its wmu and index.mu (buryTopic takes all four).
type groupTable struct {
	mu    sync.Mutex
	m     map[string]*groupEntry
	gone  error // set when the topic is deleted or closed: no more writes
	dirty bool  // FsyncInterval: the groups file was written since the last sync
	// The groups file on every volume (groupslog.go): its size, the size
	// it would have compacted, and whether it is the same log on every
	// volume, which the next write may append to; if not (none yet, the
	// old format, or a write failed), that write rewrites it whole.
	logSize, live int64
	appendable    bool
}

// groupOp checks that the log is live, checks the group name and runs fn with the
// topic's group table locked. A group refused for a full MaxGroups or
// quota is tried once more after a sweep of expired leases made room.
func (l *Log) groupOp(group string, fn func(t *topic, g *groupTable) error) error {
	t, err := l.live()
	if err != nil {
		return err
	}
	if err := validGroup(group); err != nil {
		return err
	}
	run := func() error {
		g := &t.groups
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.gone != nil {
			return g.gone
		}
		return fn(t, g)
	}
	err = run()
	if err != nil && t.s.retryAfterSweep(err) {
		err = run()
	}
	return err
}

// view returns the state of group, whose entry e may be nil. g.mu must
// be held.
func (t *topic) viewLocked(group string, e *groupEntry, now time.Time) GroupOffset {
	t.mu.RLock()
	oldest, next := t.start, t.next
	t.mu.RUnlock()
	return e.state().View(group, now, oldest, next)
}

// FetchOffset returns the state of group on the log; a group never
// committed has Committed NoOffset and starts at the oldest offset.
func (l *Log) FetchOffset(group string) (GroupOffset, error) {
	var o GroupOffset
	err := l.groupOp(group, func(t *topic, g *groupTable) error {
		o = t.viewLocked(group, g.m[group], time.Now())
		return nil
	})
	return o, err
}

// CommitOffset sets the committed offset of group on the log, on every
// volume, under the fsync policy, before it returns; see Commit for the
// conditions. Errors: ErrGroupBusy, ErrCommitConflict,
// ErrOffsetOutOfRange (an offset past the topic's next), ErrTooManyGroups.
func (l *Log) CommitOffset(group string, c Commit) error {
	s, name := l.t.s, l.t.name
	if err := CheckCommit(name, group, c); err != nil {
		return err
	}
	return l.groupOp(group, func(t *topic, g *groupTable) error {
		now := time.Now()
		e := g.m[group]
		if err := e.state().Busy(name, group, c.Member, now); err != nil {
			return err
		}
		if err := e.state().Conflict(name, group, c); err != nil {
			return err
		}
		t.mu.RLock()
		next := t.next
		t.mu.RUnlock()
		if err := CommitPastNext(name, group, c.Offset, next); err != nil {
			return err
		}
		if e == nil {
			if err := s.reserveGroup(t, g, name, group, c.Owner); err != nil {
				return err
			}
			e = &groupEntry{committed: NoOffset, owner: c.Owner}
			g.m[group] = e
		}
		prev := e.committed
		e.committed = c.Offset
		var live int64
		if prev == NoOffset {
			live = groupRecordSize(group, e.owner)
		}
		rec := appendGroupRecord(nil, group, false, c.Offset, e.owner)
		if err := t.writeGroupLocked(g, rec, live); err != nil {
			if e.committed = prev; prev == NoOffset && e.member == "" {
				s.dropGroupLocked(g, group)
			}
			return err
		}
		return nil
	})
}

// Lease takes, or renews when member holds it, the lease of member on
// (group, log) for ttl (0: DefaultLease; within [MinLease,
// MaxLease]), and returns the group's state. Another member's live lease
// is ErrGroupBusy: the caller decides whether to wait and ask again. A
// lease lives in memory only; a restart frees every lease. A group the
// lease creates has no owner: LeaseFor names one.
func (l *Log) Lease(group, member string, ttl time.Duration) (GroupOffset, error) {
	return l.LeaseFor("", group, member, ttl)
}

// LeaseFor is Lease for the token owner ("" without auth): a group the
// lease creates is owner's, in its quota (Options.MaxGroupsPerToken),
// until it is committed and deleted, or holds only a lease that expires.
func (l *Log) LeaseFor(owner, group, member string, ttl time.Duration) (GroupOffset, error) {
	s, name := l.t.s, l.t.name
	if err := validMember(member); err != nil {
		return GroupOffset{}, err
	}
	if err := validOwner(owner); err != nil {
		return GroupOffset{}, err
	}
	ttl = LeaseTTL(ttl)
	var o GroupOffset
	err := l.groupOp(group, func(t *topic, g *groupTable) error {
		now := time.Now()
		e := g.m[group]
		if err := e.state().Busy(name, group, member, now); err != nil {
			return err
		}
		if e == nil {
			if err := s.reserveGroup(t, g, name, group, owner); err != nil {
				return err
			}
			e = &groupEntry{committed: NoOffset, owner: owner}
			g.m[group] = e
			s.noteLeaseOnly(now.Add(ttl))
		}
		e.member, e.until = member, now.Add(ttl)
		o = t.viewLocked(group, e, now)
		return nil
	})
	return o, err
}

// ReleaseLease gives up member's lease on (group, log), if it holds
// it, and returns the group's state.
func (l *Log) ReleaseLease(group, member string) (GroupOffset, error) {
	s := l.t.s
	var o GroupOffset
	err := l.groupOp(group, func(t *topic, g *groupTable) error {
		now := time.Now()
		e := g.m[group]
		if e != nil && e.member == member {
			e.member, e.until = "", time.Time{}
			if e.committed == NoOffset {
				s.dropGroupLocked(g, group)
				e = nil
			}
		}
		o = t.viewLocked(group, e, now)
		return nil
	})
	return o, err
}

// DeleteGroup forgets group on the log, on every volume. A group that
// does not exist is not an error; one whose lease a member holds is
// ErrGroupBusy.
func (l *Log) DeleteGroup(group string) error {
	s, name := l.t.s, l.t.name
	return l.groupOp(group, func(t *topic, g *groupTable) error {
		now := time.Now()
		e := g.m[group]
		if e == nil {
			return nil
		}
		if err := e.state().Busy(name, group, "", now); err != nil {
			return err // a deletion: any live lease refuses it
		}
		s.dropGroupLocked(g, group)
		if e.committed == NoOffset {
			return nil
		}
		rec := appendGroupRecord(nil, group, true, 0, "")
		if err := t.writeGroupLocked(g, rec, -groupRecordSize(group, e.owner)); err != nil {
			// Not deleted: the file may still hold it. Its slots are
			// taken back past any bound, as they were held before.
			g.m[group] = e
			s.countGroup(e.owner, 1)
			return err
		}
		return nil
	})
}

// ListGroups returns the groups of the log, by name.
func (l *Log) ListGroups() ([]GroupOffset, error) {
	t, err := l.live()
	if err != nil {
		return nil, err
	}
	return t.listGroups(), nil
}

func (t *topic) listGroups() []GroupOffset {
	g := &t.groups
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if g.gone == nil {
		t.s.dropExpiredLocked(g, now) // expired leases of groups never committed
	}
	out := make([]GroupOffset, 0, len(g.m))
	for name, e := range g.m {
		if o := t.viewLocked(name, e, now); o.Committed != NoOffset || o.Member != "" {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b GroupOffset) int { return strings.Compare(a.Group, b.Group) })
	return out
}

// GroupStats returns every group of every topic, by topic then group, for
// metrics.
func (s *Store) GroupStats() map[string][]GroupOffset {
	out := make(map[string][]GroupOffset)
	for _, t := range s.allTopics() {
		if gs := t.listGroups(); len(gs) > 0 {
			out[t.name] = gs
		}
	}
	return out
}

// reserveGroup makes room for one more group of owner in g, within the
// limits; expired leases of groups never committed are dropped first.
// g.mu must be held.
func (s *Store) reserveGroup(t *topic, g *groupTable, name, group, owner string) error {
	if g.m == nil {
		g.m = make(map[string]*groupEntry)
	}
	if len(g.m) >= MaxGroupsPerTopic {
		s.dropExpiredLocked(g, time.Now())
		if len(g.m) >= MaxGroupsPerTopic {
			return fmt.Errorf("%w: topic %q has %d groups, the limit (MaxGroupsPerTopic); group %q is refused: delete unused groups", ErrTooManyGroups, name, MaxGroupsPerTopic, group)
		}
	}
	return s.reserveSlot(owner, name, group)
}

// dropGroupLocked removes group from g. g.mu must be held.
func (s *Store) dropGroupLocked(g *groupTable, group string) {
	if e, ok := g.m[group]; ok {
		delete(g.m, group)
		s.countGroup(e.owner, -1)
	}
}

// closeGroups stops writes to t's groups file (err says why) and returns
// t's groups to the store's count. It takes g.mu; the caller may hold
// wmu and index.mu, never mu.
func (t *topic) closeGroups(err error) {
	g := &t.groups
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gone == nil {
		g.gone = err
		for _, e := range g.m {
			t.s.countGroup(e.owner, -1)
		}
	}
}

// groupWriteError is a failed write of a groups file, as a client is told
// it: without the server's paths, which the log has.
type groupWriteError struct {
	topic string
	cause error
}

func (e *groupWriteError) Error() string {
	return fmt.Sprintf("storage: topic %q: the groups file could not be written", e.topic)
}
func (e *groupWriteError) Unwrap() error { return e.cause }

// syncGroups fsyncs the groups file and the directory of t on every
// volume if it was written since the last sync (FsyncInterval).
func (t *topic) syncGroups() error {
	g := &t.groups
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.dirty || g.gone != nil {
		return nil
	}
	var errs []error
	for v := range t.s.opts.Volumes {
		dir := t.s.topicDir(v, t.name)
		f, err := t.s.fs.OpenFile(filepath.Join(dir, groupsName), os.O_RDONLY, 0)
		if err == nil {
			err = f.Sync()
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err == nil {
			err = t.s.fs.SyncDir(dir)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("storage: topic %q: fsync groups file: %w", t.name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		// Kept dirty: the next interval tries again. The commits are in
		// every volume's page cache, so only a power loss could lose them.
		t.s.opts.Logger.Error("fsync of the groups file failed; retried next interval", "topic", t.name, "err", err)
		return err
	}
	g.dirty = false
	return nil
}
