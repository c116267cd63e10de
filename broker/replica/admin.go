package replica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// This file: the cluster's changes a client asks for (members, topics
// created, moved and deleted) and its status.

// ChangeMember implements service.ClusterAdmin.
func (a adminAPI) ChangeMember(action uint8, entry string) error {
	m := a.m
	n := m.node.Load()
	if n == nil || !m.synced.Load() {
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

// Create implements service.ClusterAdmin.
func (a adminAPI) Create(topic string) (bool, error) {
	return a.m.create(topic, a.m.cfg.Replicas, " (-replicas)")
}

// SetReplicas implements service.ClusterAdmin.
func (a adminAPI) SetReplicas(topic string, replicas int) (bool, error) {
	m := a.m
	if replicas < m.cfg.MinInsync {
		return false, fmt.Errorf("%w: %d replicas for topic %q: fewer than -min-insync %d, which every acks=all produce needs", protocol.ErrInvalidArgument, replicas, topic, m.cfg.MinInsync)
	}
	n := m.node.Load()
	if n == nil {
		return false, errStarting
	}
	if !m.find(topic).known {
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
		if err := m.writable(m.find(topic)); err == nil {
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
func (a adminAPI) Delete(topic string) error {
	m := a.m
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

// Truncatable implements service.ClusterAdmin.
func (a adminAPI) Truncatable(topic string) (int64, bool, error) {
	m := a.m
	f := m.find(topic)
	if !f.known && m.synced.Load() {
		return 0, false, nil
	}
	if err := m.writable(f); err != nil {
		return 0, true, err
	}
	return m.readable(f)
}

// Truncate implements service.ClusterAdmin.
func (a adminAPI) Truncate(topic string, before int64) error {
	m := a.m
	f := m.find(topic)
	if !f.known {
		return fmt.Errorf("%w: %q", storage.ErrTopicNotFound, topic)
	}
	if err := m.writable(f); err != nil {
		return err
	}
	if f.rl == nil {
		return m.notLeader(topic, "") // taken up here meanwhile: ask again
	}
	return f.rl.truncateStart(f.t, before)
}

// truncateStart drops rl's messages before before, no further than its
// high-water mark, on every replica, t its Raft record: the new start is
// recorded in the Raft group (its followers truncate as they apply it,
// applyStart), then the log here is truncated.
func (rl *replicaLog) truncateStart(t cluster.Topic, before int64) error {
	rl.mu.Lock()
	epoch, hw := rl.meta.Epoch, rl.hw
	rl.mu.Unlock()
	start := min(before, hw) // every in-sync replica holds it
	if start <= t.Start {
		return rl.truncateHere(t.Start) // recorded before: done here too
	}
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	n := rl.sh.node.Load()
	if n == nil {
		return errStarting
	}
	if err := n.SetStart(ctx, rl.name, epoch, start); err != nil {
		if errors.Is(err, cluster.ErrStaleEpoch) {
			return rl.notLeader("")
		}
		return errUnrecorded("the truncation", err)
	}
	rl.sh.Poke()
	return rl.truncateHere(start)
}

// truncateHere truncates this replica's log of rl before offset.
func (rl *replicaLog) truncateHere(before int64) error {
	l, err := rl.handle()
	if err != nil {
		return err
	}
	return l.Truncate(before)
}
