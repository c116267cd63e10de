package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// This file: the cluster's changes a client asks for (members, topics
// created, moved and deleted) and its status.

// ChangeMember implements service.ClusterAdmin.
func (m *Manager) ChangeMember(action uint8, entry string) error {
	n := m.node.Load()
	if n == nil || !m.isSynced() {
		return errStarting
	}
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	var err error
	switch action {
	case protocol.MemberAdd:
		if m.cfg.ParseMember == nil {
			return fmt.Errorf("%w: this server cannot read a member's addresses", protocol.ErrInvalidArgument)
		}
		var mb cluster.Member
		if mb, err = m.cfg.ParseMember(entry); err != nil {
			return fmt.Errorf("%w: %w", protocol.ErrInvalidArgument, err)
		}
		err = n.AddMember(ctx, mb)
	case protocol.MemberRemove:
		err = n.RemoveMember(ctx, entry)
	default:
		return fmt.Errorf("%w: cluster member action %d", protocol.ErrInvalidArgument, action)
	}
	if errors.Is(err, cluster.ErrBadCommand) || errors.Is(err, cluster.ErrNotEnoughMembers) {
		return fmt.Errorf("%w: %w", protocol.ErrInvalidArgument, err)
	}
	if err == nil {
		m.log.Info("replica: membership changed", "action", action, "entry", entry)
	}
	return err
}

// ProducerOwners implements service.Followers.
func (m *Manager) ProducerOwners(topic string, ids []uint64) (map[uint64]string, error) {
	t, rt, ok := m.lookup(topic)
	if !ok || rt == nil {
		return nil, m.notLeader(topic, t.Leader)
	}
	rt.mu.Lock()
	leading := rt.leading(m.cfg.Self)
	rt.mu.Unlock()
	if !leading {
		return nil, m.notLeader(topic, t.Leader)
	}
	l, err := m.store.Log(topic)
	if err != nil {
		return nil, err
	}
	return l.ProducerOwners(ids)
}

// Create implements service.ClusterAdmin.
func (m *Manager) Create(topic string) (bool, error) {
	return m.create(topic, m.cfg.Replicas, " (-replicas)")
}

// SetReplicas implements service.ClusterAdmin.
func (m *Manager) SetReplicas(topic string, replicas int) (bool, error) {
	if replicas < m.cfg.MinInsync {
		return false, fmt.Errorf("%w: %d replicas for topic %q: fewer than -min-insync %d, which every acks=all produce needs", protocol.ErrInvalidArgument, replicas, topic, m.cfg.MinInsync)
	}
	n := m.node.Load()
	if n == nil {
		return false, errStarting
	}
	if _, _, ok := m.lookup(topic); !ok {
		existed, err := m.create(topic, replicas, "")
		if !existed {
			return true, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	_, err := n.SetReplicas(ctx, topic, replicas)
	switch {
	case errors.Is(err, cluster.ErrNotEnoughMembers), errors.Is(err, cluster.ErrTopicMoving):
		return false, fmt.Errorf("%w: %w", protocol.ErrInvalidArgument, err)
	case errors.Is(err, cluster.ErrTopicNotFound):
		return false, fmt.Errorf("%w: %q", storage.ErrTopicNotFound, topic)
	case err != nil:
		return false, errUnrecorded("the change", err)
	}
	m.Poke()
	return false, nil
}

// create records topic on replicas members (Create, SetReplicas); hint
// follows the error of too few members.
func (m *Manager) create(topic string, replicas int, hint string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	n := m.node.Load()
	if n == nil {
		return false, errStarting
	}
	t, err := n.CreateTopic(ctx, topic, replicas)
	existed := errors.Is(err, cluster.ErrTopicExists)
	switch {
	case existed:
	case errors.Is(err, cluster.ErrNotEnoughMembers):
		return false, fmt.Errorf("%w: %w%s", protocol.ErrInvalidArgument, err, hint)
	case err != nil:
		return false, errUnrecorded("the topic", err)
	}
	if t.Leader != m.cfg.Self {
		return existed, m.notLeader(topic, t.Leader)
	}
	// This member leads it: wait until it can take writes.
	for {
		m.Poke()
		if err := m.writable(topic); err == nil {
			return existed, nil
		}
		select {
		case <-ctx.Done():
			return existed, m.notLeader(topic, "")
		case <-m.done:
			return existed, storage.ErrClosed
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// createTimeout bounds Create: the Raft commit and taking the lead.
const createTimeout = 10 * time.Second

// Delete implements service.ClusterAdmin.
func (m *Manager) Delete(topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	n := m.node.Load()
	if n == nil {
		return errStarting
	}
	err := n.DeleteTopic(ctx, topic)
	if errors.Is(err, cluster.ErrTopicNotFound) {
		return fmt.Errorf("%w: %q", storage.ErrTopicNotFound, topic)
	}
	if err == nil {
		m.Poke()
	}
	return err
}

// ReplicaStatus is a replica's position as its leader sees it.
type ReplicaStatus struct {
	ID       string `json:"id"`
	Next     int64  `json:"next"`      // the follower's next offset at its last fetch
	Lag      int64  `json:"lag"`       // messages behind the leader's end
	InSync   bool   `json:"in_sync"`   // in the in-sync set
	CaughtUp string `json:"caught_up"` // how long ago it last reached the leader's end
}

// TopicStatus is a replicated topic as this member sees it.
type TopicStatus struct {
	cluster.Topic
	ReplicaCount int             `json:"replica_count"` // len(Replicas), also when the members are hidden
	InSyncCount  int             `json:"in_sync_count"` // len(ISR), likewise
	HighWater    int64           `json:"high_water"`
	Next         int64           `json:"next"`                // this replica's next offset
	ReadOnly     bool            `json:"read_only,omitempty"` // this replica's copy turned read-only (copyFailed)
	Repairing    bool            `json:"repairing,omitempty"` // this replica's copy had a range unreadable on every volume at the start, and is not back in sync yet
	Followers    []ReplicaStatus `json:"followers,omitzero"`  // on the leader
}

// Status is the cluster status of op 19 and GET /cluster, which the
// ports encode as JSON (package client/admin decodes it into its typed
// status, field for field).
type Status struct {
	Self   string `json:"self"`
	InStep bool   `json:"in_step"` // caught up with the Raft group since it started: serving
	// MembersHidden: the caller may not see the members
	// (service.StatusView): RaftLeader is empty, Members absent, and
	// the topics name no replica but their leader.
	MembersHidden bool           `json:"members_hidden,omitempty"`
	RaftLeader    string         `json:"raft_leader"`
	Members       []MemberStatus `json:"members,omitempty"`
	// DownUnknown: why the members' liveness is not known (no Raft
	// leader, or it did not answer); Down is then false for every member.
	DownUnknown string        `json:"down_unknown,omitempty"`
	Topics      []TopicStatus `json:"topics"`
}

// MemberStatus is a member with its liveness as the Raft leader sees it.
type MemberStatus struct {
	cluster.Member
	// Down: no heartbeat from it within the member timeout; DownSince:
	// when it was last heard from (RFC 3339).
	Down      bool   `json:"down,omitempty"`
	DownSince string `json:"down_since,omitempty"`
}

// statusDownTimeout bounds the question to the Raft leader of which
// members are down (cluster.Node.Down).
const statusDownTimeout = 2 * time.Second

// Status implements service.ClusterView: the cluster status of op 19,
// the topics and members v shows.
func (m *Manager) Status(v service.StatusView) json.Marshaler {
	n := m.node.Load()
	if n == nil {
		return json.RawMessage(`{"error":"the server is joining its cluster"}`)
	}
	st := n.Status()
	out := &Status{Self: st.Self, InStep: m.isSynced(), Topics: []TopicStatus{}}
	if v.Members {
		out.RaftLeader = st.RaftLeader
		ctx, cancel := context.WithTimeout(context.Background(), statusDownTimeout)
		down, err := n.Down(ctx)
		cancel()
		if err != nil {
			out.DownUnknown = err.Error()
		}
		for _, mb := range st.Members {
			ms := MemberStatus{Member: mb}
			if since, ok := down[mb.ID]; ok && mb.ID != st.Self {
				ms.Down, ms.DownSince = true, since.UTC().Format(time.RFC3339)
			}
			out.Members = append(out.Members, ms)
		}
	} else {
		out.MembersHidden = true
	}
	for _, t := range st.Topics {
		if v.Topic != nil && !v.Topic(t.Name) {
			continue
		}
		ts := TopicStatus{Topic: t, ReplicaCount: len(t.Replicas), InSyncCount: len(t.ISR)}
		ts.Proposal = "" // the create's ID, internal to the Raft record
		if l, err := m.store.Log(t.Name); err == nil {
			if info, err := l.Info(); err == nil {
				ts.Next = info.Next
				ts.ReadOnly = errors.Is(l.ReadOnly(), storage.ErrReadOnly) // copyFailed
			}
		}
		m.mu.Lock()
		ts.Repairing = m.repairing[t.Name]
		m.mu.Unlock()
		if _, rt, ok := m.lookup(t.Name); ok && rt != nil {
			rt.mu.Lock()
			ts.HighWater = rt.hw
			if v.Members && rt.leading(m.cfg.Self) {
				for _, id := range t.Replicas {
					if f := rt.fol[id]; f != nil {
						ts.Followers = append(ts.Followers, ReplicaStatus{ID: id, Next: f.leo, Lag: max(0, ts.Next-f.leo),
							InSync: t.InSync(id), CaughtUp: time.Since(f.caughtUp).Round(time.Millisecond).String()})
					}
				}
			}
			rt.mu.Unlock()
		}
		if !v.Members {
			ts.Replicas, ts.ISR, ts.Target, ts.Stepped = nil, nil, nil, nil
		}
		out.Topics = append(out.Topics, ts)
	}
	return out
}

// MarshalJSON encodes st with its fields' names.
func (st *Status) MarshalJSON() ([]byte, error) {
	type plain Status // without this method
	return json.Marshal((*plain)(st))
}
