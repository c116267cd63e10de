package service

import (
	"fmt"
	"time"

	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// This file: the consumer group calls, all of the consume right (a group
// is a consumer's position) on the topic and of the token's group patterns
// on the group (AllowGroup): a token sharing a topic with another tenant
// cannot touch the other's groups, nor see them in a list. Their state
// lives in the store (committed offsets on every volume, leases in
// memory), or for a replicated topic in the cluster's Raft group, served
// by the topic's leader (groupsOf);
// a group a commit or lease creates counts against its caller's token's
// quota (-max-groups-per-token). A commit or a deletion appends a record to
// a file per volume while it holds the topic's group table, which the
// others take: they may all wait on the disk.

type (
	// Commit is a group commit's offset and its conditions (storage's).
	Commit = storage.Commit
	// GroupOffset is a group's committed offset and lease (storage's).
	GroupOffset = storage.GroupOffset
)

// NoOffset is the committed offset of a group without a commit.
const NoOffset = storage.NoOffset

// CommitOffset commits cm for group on topic.
func (s *Service) CommitOffset(c Caller, topic, group string, cm Commit) error {
	if err := s.AllowGroup(c, protocol.OpCommitOffset, topic, group); err != nil {
		return err
	}
	gs, err := s.groupChange(c, topic)
	if err != nil {
		return err
	}
	cm.Owner = c.Owner()
	return gs.CommitOffset(topic, group, cm)
}

// FetchOffset returns group's committed offset on topic and its lease.
func (s *Service) FetchOffset(c Caller, topic, group string) (GroupOffset, error) {
	if err := s.AllowGroup(c, protocol.OpFetchOffset, topic, group); err != nil {
		return GroupOffset{}, err
	}
	gs, err := s.groupsOf(topic)
	if err != nil {
		return GroupOffset{}, err
	}
	return gs.FetchOffset(topic, group)
}

// Lease takes or renews group's lease on topic for member, for ttl.
func (s *Service) Lease(c Caller, topic, group, member string, ttl time.Duration) (GroupOffset, error) {
	if err := s.AllowGroup(c, protocol.OpGroupLease, topic, group); err != nil {
		return GroupOffset{}, err
	}
	gs, err := s.groupChange(c, topic)
	if err != nil {
		return GroupOffset{}, err
	}
	return gs.LeaseFor(c.Owner(), topic, group, member, ttl)
}

// ReleaseLease gives up member's lease of group on topic.
func (s *Service) ReleaseLease(c Caller, topic, group, member string) (GroupOffset, error) {
	if err := s.AllowGroup(c, protocol.OpGroupLease, topic, group); err != nil {
		return GroupOffset{}, err
	}
	gs, err := s.groupChange(c, topic)
	if err != nil {
		return GroupOffset{}, err
	}
	return gs.ReleaseLease(topic, group, member)
}

// ListGroups returns topic's info and its groups, those c may use.
func (s *Service) ListGroups(c Caller, topic string) (TopicInfo, []GroupOffset, error) {
	if err := s.Allow(c, protocol.OpListGroups, topic); err != nil {
		return TopicInfo{}, nil, err
	}
	store, err := s.groupsOf(topic)
	if err != nil {
		return TopicInfo{}, nil, err
	}
	l, err := s.store.Log(topic)
	if err != nil {
		return TopicInfo{}, nil, err
	}
	info, err := l.Info()
	if err != nil {
		return info, nil, err
	}
	if s.repl != nil {
		if hw, replicated, err := s.repl.Readable(topic); err == nil && replicated {
			info.Next = min(info.Next, hw) // as the groups see it
		}
	}
	var gs []GroupOffset
	if _, local := store.(localGroups); local {
		gs, err = l.ListGroups() // the log looked up above
	} else {
		gs, err = store.ListGroups(topic)
	}
	kept := gs[:0]
	for _, g := range gs {
		if s.allowsGroup(c, g.Group) {
			kept = append(kept, g)
		}
	}
	return info, kept, err
}

// DeleteGroup deletes group's commit and lease on topic.
func (s *Service) DeleteGroup(c Caller, topic, group string) error {
	if err := s.AllowGroup(c, protocol.OpDeleteGroup, topic, group); err != nil {
		return err
	}
	gs, err := s.groupChange(c, topic)
	if err != nil {
		return err
	}
	return gs.DeleteGroup(topic, group)
}

// FetchUnleased is FetchOffset for a reader that is not one of the
// group's members (an HTTP consume with a group): ErrGroupBusy while a
// member holds the group's lease.
func (s *Service) FetchUnleased(c Caller, topic, group string) (GroupOffset, error) {
	o, err := s.FetchOffset(c, topic, group)
	if err == nil && o.Member != "" {
		return o, fmt.Errorf("%w: topic %q, group %q: a member holds the lease for %s more", storage.ErrGroupBusy, topic, group, o.LeaseLeft.Round(time.Millisecond))
	}
	return o, err
}

// groupChange is groupsOf for a change of a group of topic by c: on a
// replicated topic a Raft entry, which takes one from c's token's bucket
// of Config.MaxGroupChangeRate (else a refusal of CodeLimitReached).
func (s *Service) groupChange(c Caller, topic string) (GroupStore, error) {
	gs, err := s.groupsOf(topic)
	if _, local := gs.(localGroups); err != nil || s.groupChangeLim == nil || local {
		return gs, err
	}
	if !s.groupChangeLim.Take(c.Owner()) {
		return nil, &protocol.Error{Code: protocol.CodeLimitReached,
			Message: fmt.Sprintf("group change on replicated topic %q refused: the token made more than %d a second on this server (-max-group-change-rate): retry shortly", topic, s.groupRate)}
	}
	return gs, nil
}

// groupsOf returns where topic's groups live: the cluster's Raft group
// for a replicated topic, which only the topic's leader changes and
// reads (a follower refuses with not leader), else the store.
func (s *Service) groupsOf(topic string) (GroupStore, error) {
	if s.replGroup == nil {
		return localGroups{s.store}, nil
	}
	gs, err := s.replGroup.Groups(topic)
	if err != nil {
		return nil, err
	}
	if gs != nil {
		return gs, nil
	}
	return localGroups{s.store}, nil
}

// localGroups is a GroupStore over the store: the groups of a topic that
// is not replicated live in its log (storage.Log's group methods).
type localGroups struct{ store *storage.Store }

var _ GroupStore = localGroups{}

func (g localGroups) FetchOffset(topic, group string) (GroupOffset, error) {
	l, err := g.store.Log(topic)
	if err != nil {
		return GroupOffset{}, err
	}
	return l.FetchOffset(group)
}

func (g localGroups) CommitOffset(topic, group string, c Commit) error {
	l, err := g.store.Log(topic)
	if err != nil {
		return err
	}
	return l.CommitOffset(group, c)
}

func (g localGroups) LeaseFor(owner, topic, group, member string, ttl time.Duration) (GroupOffset, error) {
	l, err := g.store.Log(topic)
	if err != nil {
		return GroupOffset{}, err
	}
	return l.LeaseFor(owner, group, member, ttl)
}

func (g localGroups) ReleaseLease(topic, group, member string) (GroupOffset, error) {
	l, err := g.store.Log(topic)
	if err != nil {
		return GroupOffset{}, err
	}
	return l.ReleaseLease(group, member)
}

func (g localGroups) DeleteGroup(topic, group string) error {
	l, err := g.store.Log(topic)
	if err != nil {
		return err
	}
	return l.DeleteGroup(group)
}

func (g localGroups) ListGroups(topic string) ([]GroupOffset, error) {
	l, err := g.store.Log(topic)
	if err != nil {
		return nil, err
	}
	return l.ListGroups()
}
