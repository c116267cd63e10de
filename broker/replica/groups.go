package replica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/storage"
)

// This file: the consumer groups of replicated topics. Their offsets and
// leases are in the cluster's Raft group (package cluster, groups.go),
// not in the store's groups files, so that the member leading a topic
// next finds every commit and lease its leader took. The service calls
// them on the topic's leader only (writable), with storage's rules and
// errors.

// Groups implements service.ReplicaGroups: nil for a topic the cluster
// does not know, the Raft group's on its leader, else not leader.
func (a groupAPI) Groups(topic string) (service.GroupStore, error) {
	f := a.m.find(topic)
	if err := a.m.writable(f); err != nil {
		return nil, err
	}
	if !f.known {
		return nil, nil
	}
	return raftGroups{a.m}, nil
}

// raftGroups is a service.GroupStore over the Raft group.
type raftGroups struct{ m *Manager }

var _ service.GroupStore = raftGroups{}

func validGroup(group string) error { return storage.ValidGroupArgs(group, "", "", false) }

// propose sends a group change to the Raft group, under the topic's
// epoch as this member leads it, and turns the cluster's refusals into
// the service's: a lost leadership or no Raft leader is not leader
// (asked again shortly), a topic gone is storage's not found.
func (g raftGroups) propose(change func(*cluster.Node, context.Context, cluster.GroupChange) (cluster.GroupResult, error), c cluster.GroupChange) (cluster.GroupResult, error) {
	n := g.m.node.Load()
	f := g.m.find(c.Topic)
	t := f.t
	if n == nil || !f.known {
		return cluster.GroupResult{}, fmt.Errorf("%w: %q", storage.ErrTopicNotFound, c.Topic)
	}
	c.Epoch = t.Epoch
	c.MaxPerOwner = g.m.store.MaxGroupsPerToken()
	ctx, cancel := context.WithTimeout(context.Background(), g.m.cfg.AckTimeout)
	defer cancel()
	r, err := change(n, ctx, c)
	return r, g.refusal(c.Topic, err)
}

// refusal is err, from the cluster, as the service's error.
func (g raftGroups) refusal(topic string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, cluster.ErrTopicNotFound):
		return fmt.Errorf("%w: %q", storage.ErrTopicNotFound, topic)
	case errors.Is(err, cluster.ErrStaleEpoch), errors.Is(err, cluster.ErrNoLeader), errors.Is(err, cluster.ErrNotLeader),
		errors.Is(err, context.DeadlineExceeded):
		g.m.log.Debug("replica: a group change or read failed", "topic", topic, "err", err)
		return g.m.notLeader(topic, notSelf(g.m.find(topic).t.Leader, g.m.cfg.Self))
	case errors.Is(err, cluster.ErrClosed):
		return errStarting
	}
	return err
}

// offsets returns topic's oldest offset here and its end for consumers:
// the high-water mark, or this replica's next offset if lower.
func (g raftGroups) offsets(topic string) (oldest, next int64, err error) {
	info, err := g.m.info(topic)
	if err != nil {
		return 0, 0, err
	}
	next = info.Next
	if hw, _, err := (dataAPI{g.m}).Readable(topic); err == nil {
		next = min(next, hw)
	}
	return min(info.Oldest, next), next, nil
}

// view returns group's state on topic from the Raft group's rg (ok
// false: none), with the topic's offsets here.
func (g raftGroups) view(topic, group string, rg cluster.Group, ok bool) (service.GroupOffset, error) {
	oldest, next, err := g.offsets(topic)
	if err != nil {
		return service.GroupOffset{}, err
	}
	st := storage.NoGroup
	if ok {
		st = rg.State()
	}
	return st.View(group, time.UnixMilli(time.Now().UnixMilli()), oldest, next), nil
}

// readCtx bounds a read's wait for this member's apply.
func (g raftGroups) readCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), g.m.cfg.AckTimeout)
}

// FetchOffset implements service.GroupStore.
func (g raftGroups) FetchOffset(topic, group string) (service.GroupOffset, error) {
	if err := validGroup(group); err != nil {
		return service.GroupOffset{}, err
	}
	ctx, cancel := g.readCtx()
	defer cancel()
	rg, ok, err := g.m.node.Load().Group(ctx, topic, group)
	if err != nil {
		return service.GroupOffset{}, g.refusal(topic, err)
	}
	return g.view(topic, group, rg, ok)
}

// CommitOffset implements service.GroupStore. An offset past the
// high-water mark, within this replica's log, is waited for
// (awaitHighWater).
func (g raftGroups) CommitOffset(topic, group string, c service.Commit) error {
	if err := storage.CheckCommit(topic, group, c); err != nil {
		return err
	}
	if err := validGroup(group); err != nil {
		return err
	}
	_, next, err := g.offsets(topic)
	if err == nil && c.Offset > next {
		next, err = g.awaitHighWater(topic, c.Offset)
	}
	if err != nil {
		return err
	}
	if err := storage.CommitPastNext(topic, group, c.Offset, next); err != nil {
		return err
	}
	_, err = g.propose((*cluster.Node).CommitGroup, cluster.GroupChange{Topic: topic, Group: group, Member: c.Member, Owner: c.Owner,
		Offset: c.Offset, Compare: c.Compare, Expect: c.Expect})
	return err
}

// awaitHighWater waits, up to the ack timeout, until topic's high-water
// mark reaches offset, when this replica holds offset: a leader that
// took over has a mark behind its log until its followers fetch again,
// and a member commits what it read from the previous leader. It
// returns the topic's end for consumers then.
func (g raftGroups) awaitHighWater(topic string, offset int64) (int64, error) {
	if info, err := g.m.info(topic); err == nil && offset <= info.Next {
		reached := make(chan struct{})
		if cancel, ok := g.m.watchReadable(topic, offset-1, func() { close(reached) }); ok {
			t := time.NewTimer(g.m.cfg.AckTimeout)
			select {
			case <-reached:
			case <-t.C:
				cancel()
			}
			t.Stop()
		}
	}
	_, next, err := g.offsets(topic)
	return next, err
}

// LeaseFor implements service.GroupStore.
func (g raftGroups) LeaseFor(owner, topic, group, member string, ttl time.Duration) (service.GroupOffset, error) {
	if err := storage.ValidGroupArgs(group, member, owner, true); err != nil {
		return service.GroupOffset{}, err
	}
	r, err := g.propose((*cluster.Node).LeaseGroup, cluster.GroupChange{Topic: topic, Group: group, Member: member, Owner: owner, TTL: storage.LeaseTTL(ttl)})
	if err != nil {
		return service.GroupOffset{}, err
	}
	return g.view(topic, group, r.Group, r.Exists)
}

// ReleaseLease implements service.GroupStore.
func (g raftGroups) ReleaseLease(topic, group, member string) (service.GroupOffset, error) {
	if err := validGroup(group); err != nil {
		return service.GroupOffset{}, err
	}
	r, err := g.propose((*cluster.Node).ReleaseGroup, cluster.GroupChange{Topic: topic, Group: group, Member: member})
	if err != nil {
		return service.GroupOffset{}, err
	}
	return g.view(topic, group, r.Group, r.Exists)
}

// DeleteGroup implements service.GroupStore.
func (g raftGroups) DeleteGroup(topic, group string) error {
	if err := validGroup(group); err != nil {
		return err
	}
	_, err := g.propose((*cluster.Node).DeleteGroup, cluster.GroupChange{Topic: topic, Group: group})
	return err
}

// ListGroups implements service.GroupStore.
func (g raftGroups) ListGroups(topic string) ([]service.GroupOffset, error) {
	ctx, cancel := g.readCtx()
	defer cancel()
	groups, err := g.m.node.Load().Groups(ctx, topic)
	if err != nil {
		return nil, g.refusal(topic, err)
	}
	var out []service.GroupOffset
	now := time.UnixMilli(time.Now().UnixMilli())
	for _, ng := range groups {
		if ng.State().Lapsed(now) {
			continue // a lease that expired, of a group never committed
		}
		o, err := g.view(topic, ng.Name, ng.Group, true)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}
