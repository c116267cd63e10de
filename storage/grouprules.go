package storage

import (
	"fmt"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// This file: the rules of a consumer group, pure functions of its state,
// which the store (groups.go) and a cluster's Raft group for replicated
// topics (packages broker/cluster and broker/replica) both apply, so that
// a group behaves alike wherever it is kept: who holds a lease, which
// change a live lease refuses, a conditional commit's compare, a commit's
// bounds, a lease's length (LeaseTTL), the names (ValidGroupArgs) and the
// state a reader is shown.

// GroupState is what is kept of one group of a topic, wherever it is
// kept. NoGroup is a group that does not exist.
type GroupState struct {
	// Committed is the offset the group committed last, NoOffset for a
	// group that holds only a lease.
	Committed int64
	// Owner names the token that created the group ("" without auth).
	Owner string
	// Member holds the lease until Until ("" for none); a lease past
	// Until is no one's.
	Member string
	Until  time.Time
}

// NoGroup is the state of a group that does not exist.
var NoGroup = GroupState{Committed: NoOffset}

// LeasedBy returns the member holding g's lease at now, "" for none.
func (g GroupState) LeasedBy(now time.Time) string {
	if g.Member != "" && now.Before(g.Until) {
		return g.Member
	}
	return ""
}

// Lapsed reports whether g keeps nothing at now: no commit and no live
// lease (a group that held only a lease which expired). It is dropped.
func (g GroupState) Lapsed(now time.Time) bool {
	return g.Committed == NoOffset && g.LeasedBy(now) == ""
}

// Busy returns ErrGroupBusy when g's live lease at now refuses a change
// of group on topic asked by member: a commit or a lease of another
// member than the holder. A deletion asks as "" and any live lease
// refuses it; a release is never refused.
func (g GroupState) Busy(topic, group, member string, now time.Time) error {
	if m := g.LeasedBy(now); m != "" && m != member {
		return busyErr(topic, group, g.Until.Sub(now))
	}
	return nil
}

// Conflict returns ErrCommitConflict when c is conditional and g's
// committed offset (NoOffset: none) is not the one c expects.
func (g GroupState) Conflict(topic, group string, c Commit) error {
	if c.Compare && g.Committed != c.Expect {
		return fmt.Errorf("%w: topic %q, group %q: committed offset is %d, not %d", ErrCommitConflict, topic, group, g.Committed, c.Expect)
	}
	return nil
}

// View returns the state of group, kept as g, at now on a topic whose
// offsets are [oldest, next): where it reads from (Start) and its live
// lease.
func (g GroupState) View(group string, now time.Time, oldest, next int64) GroupOffset {
	o := GroupOffset{Group: group, Committed: g.Committed, Oldest: oldest, Next: next}
	if o.Member = g.LeasedBy(now); o.Member != "" {
		o.LeaseLeft = g.Until.Sub(now)
	}
	o.Start = min(max(o.Committed, oldest), next)
	return o
}

// CheckCommit checks a commit's offsets and owner before its group is
// looked up (ErrOffsetOutOfRange, ErrInvalidGroup).
func CheckCommit(topic, group string, c Commit) error {
	if c.Offset < 0 || c.Compare && c.Expect < NoOffset {
		return fmt.Errorf("%w: topic %q, group %q: commit offset %d, expected %d", ErrOffsetOutOfRange, topic, group, c.Offset, c.Expect)
	}
	return validOwner(c.Owner)
}

// CommitPastNext returns ErrOffsetOutOfRange when a commit of offset is
// past next, the topic's next offset (for a replicated topic, as its
// consumers see it).
func CommitPastNext(topic, group string, offset, next int64) error {
	if offset > next {
		return fmt.Errorf("%w: topic %q, group %q: commit offset %d is past the next offset %d", ErrOffsetOutOfRange, topic, group, offset, next)
	}
	return nil
}

// LeaseTTL is the lease granted for ttl: DefaultLease for 0, else ttl
// within [MinLease, MaxLease].
func LeaseTTL(ttl time.Duration) time.Duration {
	if ttl == 0 {
		ttl = DefaultLease
	}
	return min(max(ttl, MinLease), MaxLease)
}

// ValidGroupArgs checks a group call's group name and, if not "", its
// member ID and owner, as the store does: for groups held elsewhere (a
// cluster's replicated topics), with the same errors.
func ValidGroupArgs(group, member, owner string, needMember bool) error {
	if needMember {
		if err := validMember(member); err != nil {
			return err
		}
	}
	if err := validOwner(owner); err != nil {
		return err
	}
	return validGroup(group)
}

// validMember checks a lease's member ID.
func validMember(member string) error {
	if member == "" || len(member) > protocol.MaxMemberLen {
		return fmt.Errorf("%w: member id must be 1 to %d bytes", ErrInvalidGroup, protocol.MaxMemberLen)
	}
	return nil
}

func validGroup(name string) error {
	if err := protocol.ValidGroup(name); err != nil {
		return fmt.Errorf("%w: %q", ErrInvalidGroup, name)
	}
	return nil
}

// validOwner checks that owner fits the groups file's owner field.
func validOwner(owner string) error {
	if len(owner) > 255 {
		return fmt.Errorf("%w: owner must be at most 255 bytes", ErrInvalidGroup)
	}
	return nil
}

func busyErr(name, group string, left time.Duration) error {
	return fmt.Errorf("%w: topic %q, group %q: another member holds the lease for %s more", ErrGroupBusy, name, group, left.Round(time.Millisecond))
}
