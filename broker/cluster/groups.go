package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/haraqa/haraqa/storage"
)

// This file: the consumer groups of replicated topics, held in the Raft
// group so that a failover neither rewinds a group nor drops a lease.
// The topic's leader proposes each change with the time it was asked
// (Command.Now), and every member applies it alike: a lease's expiry is
// an absolute time, so the member that leads next honours what is left
// of it (give or take the two members' clock difference). The rules are
// storage's, applied through storage.GroupState (storage/grouprules.go):
// a live lease of another member refuses a commit, a lease and a deletion
// (storage.ErrGroupBusy); a conditional commit checks the committed
// offset (storage.ErrCommitConflict); a group
// a commit or lease creates counts against storage.MaxGroupsPerTopic,
// storage.MaxGroups and its owner's quota (storage.ErrTooManyGroups).

// Group is one consumer group of a replicated topic.
type Group struct {
	// Committed is the offset the group reads from next, NoOffset
	// (storage.NoOffset) for a group that holds only a lease.
	Committed int64 `json:"committed"`
	// Owner names the token that created the group ("" without auth).
	Owner string `json:"owner,omitempty"`
	// Member holds the lease until Until (Unix milliseconds); a lease
	// past Until is no one's.
	Member string `json:"member,omitempty"`
	Until  int64  `json:"until,omitempty"`
	// Proposal is the ID of the conditional commit that set Committed
	// (Command.Proposal): that commit tried again after its first try
	// was applied (an answer lost to a leader change) succeeds instead of
	// meeting its own offset as a conflict.
	Proposal string `json:"proposal,omitempty"`
}

// LeasedBy returns the member holding g's lease at now (Unix
// milliseconds), "" for none.
func (g *Group) LeasedBy(now int64) string { return g.State().LeasedBy(time.UnixMilli(now)) }

// State is g as storage's group rules see it.
func (g *Group) State() storage.GroupState {
	return storage.GroupState{Committed: g.Committed, Owner: g.Owner, Member: g.Member, Until: time.UnixMilli(g.Until)}
}

// The group commands.
const (
	opGroupCommit  = "group-commit"  // Group commits Offset (if Compare: while the committed offset is Expect) as Member
	opGroupLease   = "group-lease"   // Member takes or renews Group's lease for TTL ms from Now
	opGroupRelease = "group-release" // Member gives Group's lease up
	opGroupDelete  = "group-delete"  // Group is forgotten
)

func isGroupOp(op string) bool {
	switch op {
	case opGroupCommit, opGroupLease, opGroupRelease, opGroupDelete:
		return true
	}
	return false
}

// GroupChange is a group command's arguments (Node.ChangeGroup).
type GroupChange struct {
	Topic, Group string
	// Member is the lease holder asking (a commit: "" for none).
	Member string
	// Owner names the caller's token: a group the change creates is its.
	Owner string
	// Offset, Compare and Expect: a commit's (storage.Commit).
	Offset  int64
	Compare bool
	Expect  int64
	// TTL is a lease's length.
	TTL time.Duration
	// MaxPerOwner is the leader's -max-groups-per-token.
	MaxPerOwner int
	// Epoch is the topic's leader epoch the change was asked under: a
	// leader deposed meanwhile gets ErrStaleEpoch.
	Epoch int64
}

// GroupResult is a group as a change left it: Exists false when the
// change removed it (or found none).
type GroupResult struct {
	Group  Group `json:"group"`
	Exists bool  `json:"exists"`
}

// groupAnswer is the Raft leader's answer to a group command c it
// applied to s: the group after it, JSON.
func groupAnswer(s *State, c Command) []byte {
	var r GroupResult
	if g := s.Groups[c.Topic][c.Group]; g != nil {
		r = GroupResult{Group: *g, Exists: true}
	}
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // strings and ints only
	}
	return b
}

// CommitGroup commits c.Offset for c.Group on c.Topic.
func (n *Node) CommitGroup(ctx context.Context, c GroupChange) (GroupResult, error) {
	return n.groupCommand(ctx, opGroupCommit, c)
}

// LeaseGroup takes or renews c.Member's lease of c.Group for c.TTL.
func (n *Node) LeaseGroup(ctx context.Context, c GroupChange) (GroupResult, error) {
	return n.groupCommand(ctx, opGroupLease, c)
}

// ReleaseGroup gives c.Member's lease of c.Group up, if it holds it.
func (n *Node) ReleaseGroup(ctx context.Context, c GroupChange) (GroupResult, error) {
	return n.groupCommand(ctx, opGroupRelease, c)
}

// DeleteGroup forgets c.Group (storage.ErrGroupBusy while leased).
func (n *Node) DeleteGroup(ctx context.Context, c GroupChange) (GroupResult, error) {
	return n.groupCommand(ctx, opGroupDelete, c)
}

// groupCommand commits a group change through the Raft leader and
// returns the group as the leader's apply left it. It does not wait for
// this member's own apply, which a member that is not the Raft leader
// learns of only with the leader's next message to it (up to a tenth
// of the heartbeat timeout later): Group and Groups wait for it instead.
func (n *Node) groupCommand(ctx context.Context, op string, c GroupChange) (GroupResult, error) {
	cmd := Command{Op: op, Topic: c.Topic, Group: c.Group, Member: c.Member, Owner: c.Owner,
		Offset: c.Offset, Compare: c.Compare, Expect: c.Expect, TTL: c.TTL.Milliseconds(),
		Now: time.Now().UnixMilli(), Limit: c.MaxPerOwner, Epoch: c.Epoch}
	if c.Compare {
		cmd.Proposal = newProposal() // the same in every try of commit
	}
	index, res, err := n.commit(ctx, cmd)
	if err != nil {
		return GroupResult{}, err
	}
	var r GroupResult
	if err := json.Unmarshal(res, &r); err != nil {
		return GroupResult{}, fmt.Errorf("%w: the Raft leader's answer to a group change: %w", ErrBadCommand, err)
	}
	n.groupMu.Lock()
	if n.groupIndex == nil {
		n.groupIndex = map[string]uint64{}
	}
	n.groupIndex[c.Topic] = max(n.groupIndex[c.Topic], index)
	n.groupMu.Unlock()
	return r, nil
}

// groupsApplied waits until this member has applied the group changes
// of topic it committed, so that a read after a change sees it.
func (n *Node) groupsApplied(ctx context.Context, topic string) error {
	n.groupMu.Lock()
	index := n.groupIndex[topic]
	n.groupMu.Unlock()
	if index == 0 {
		return nil
	}
	if err := n.waitApplied(ctx, index); err != nil {
		return fmt.Errorf("%w: the group changes of topic %q are not applied here yet: %w", ErrNoLeader, topic, err)
	}
	n.groupMu.Lock()
	if n.groupIndex[topic] == index {
		delete(n.groupIndex, topic)
	}
	n.groupMu.Unlock()
	return nil
}

// Group returns a copy of a group of topic, once this member applied
// the changes of topic's groups it committed.
func (n *Node) Group(ctx context.Context, topic, group string) (Group, bool, error) {
	if err := n.groupsApplied(ctx, topic); err != nil {
		return Group{}, false, err
	}
	var g Group
	var ok bool
	n.fsm.read(func(s *State) {
		if p := s.Groups[topic][group]; p != nil {
			g, ok = *p, true
		}
	})
	return g, ok, nil
}

// NamedGroup is a group with its name (Node.Groups).
type NamedGroup struct {
	Name string
	Group
}

// Groups returns the groups of topic, by name, as Group does.
func (n *Node) Groups(ctx context.Context, topic string) ([]NamedGroup, error) {
	if err := n.groupsApplied(ctx, topic); err != nil {
		return nil, err
	}
	var out []NamedGroup
	n.fsm.read(func(s *State) {
		for name, g := range s.Groups[topic] {
			out = append(out, NamedGroup{Name: name, Group: *g})
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// applyGroup applies a group command to s.
func (s *State) applyGroup(c Command) error {
	t, ok := s.Topics[c.Topic]
	if !ok {
		return fmt.Errorf("%w: %q", ErrTopicNotFound, c.Topic)
	}
	if c.Epoch != 0 && c.Epoch != t.Epoch {
		return fmt.Errorf("%w: topic %q is at epoch %d, the group change was asked at epoch %d", ErrStaleEpoch, c.Topic, t.Epoch, c.Epoch)
	}
	if c.Group == "" {
		return fmt.Errorf("%w: a group command without a group", ErrBadCommand)
	}
	groups := s.Groups[c.Topic]
	g := groups[c.Group]
	st, now := storage.NoGroup, time.UnixMilli(c.Now)
	if g != nil {
		st = g.State()
	}
	if c.Op != opGroupRelease {
		asker := c.Member
		if c.Op == opGroupDelete {
			asker = "" // any live lease refuses a deletion
		}
		if err := st.Busy(c.Topic, c.Group, asker, now); err != nil {
			return err
		}
	}
	switch c.Op {
	case opGroupCommit:
		if err := st.Conflict(c.Topic, c.Group, storage.Commit{Compare: c.Compare, Expect: c.Expect}); err != nil {
			if g != nil && c.Proposal != "" && g.Proposal == c.Proposal && g.Committed == c.Offset {
				return nil // this commit's own first try, applied before
			}
			return err
		}
		if g == nil {
			var err error
			if g, err = s.newGroup(c); err != nil {
				return err
			}
		}
		g.Committed, g.Proposal = c.Offset, c.Proposal
	case opGroupLease:
		if g == nil {
			var err error
			if g, err = s.newGroup(c); err != nil {
				return err
			}
		}
		g.Member, g.Until = c.Member, c.Now+c.TTL
	case opGroupRelease:
		if g != nil && g.Member == c.Member {
			g.Member, g.Until = "", 0
			if g.Committed == storage.NoOffset {
				delete(groups, c.Group)
			}
		}
	case opGroupDelete:
		delete(groups, c.Group)
	}
	return nil
}

// newGroup adds c.Group to c.Topic within the limits, dropping first the
// groups that held only a lease which has expired.
func (s *State) newGroup(c Command) (*Group, error) {
	var total, owned int
	for _, groups := range s.Groups {
		for name, g := range groups {
			if g.State().Lapsed(time.UnixMilli(c.Now)) {
				delete(groups, name)
				continue
			}
			total++
			if c.Owner != "" && g.Owner == c.Owner {
				owned++
			}
		}
	}
	groups := s.Groups[c.Topic]
	switch {
	case len(groups) >= storage.MaxGroupsPerTopic:
		return nil, fmt.Errorf("%w: topic %q holds %d groups, the most a topic keeps; group %q is refused", storage.ErrTooManyGroups, c.Topic, len(groups), c.Group)
	case total >= storage.MaxGroups:
		return nil, fmt.Errorf("%w: the cluster's replicated topics hold %d groups, the most it keeps; group %q on topic %q is refused", storage.ErrTooManyGroups, total, c.Group, c.Topic)
	case c.Owner != "" && c.Limit > 0 && owned >= c.Limit:
		return nil, fmt.Errorf("%w: the token holds %d groups of replicated topics, its limit (-max-groups-per-token); group %q on topic %q is refused: delete unused groups or let leases expire", storage.ErrTooManyGroups, owned, c.Group, c.Topic)
	}
	if groups == nil {
		groups = map[string]*Group{}
		s.Groups[c.Topic] = groups
	}
	g := &Group{Committed: storage.NoOffset, Owner: c.Owner}
	groups[c.Group] = g
	return g, nil
}
