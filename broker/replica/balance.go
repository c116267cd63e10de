package replica

import (
	"context"
	"errors"
	"slices"
	"time"
)

// errNotCaughtUp: the first replica did not hold everything in time.
var errNotCaughtUp = errors.New("replica: the first replica did not catch up within the drain")

// handBackDrain bounds how long a leader handing a topic back to its
// first replica waits for that replica to hold everything it appended.
const handBackDrain = time.Second

// balance hands the lead of each topic this member leads back to the
// topic's first replica, its preferred leader, once that replica has been
// in the in-sync set for LeaderBalance while this member leads, the topic
// is not moving and the replica's member is not leaving (Kafka's
// automatic leader rebalance): placement puts a topic's lead on its first
// replica, so after failovers and restarts the leads spread over the
// members again. The leader decides it rather than the Raft leader's
// controller because only the leader can drain the topic first (handBack):
// the replica taking the lead then holds every batch acknowledged here,
// acks=leader ones too.
func (m *Manager) balance(now time.Time) {
	wait := m.cfg.LeaderBalance
	node := m.node.Load()
	if wait <= 0 || node == nil {
		return
	}
	for _, rt := range m.held() {
		rt.mu.Lock()
		first := rt.preferredLeader(m.cfg.Self)
		if first != "" {
			if mb, ok := node.Member(first); !ok || mb.Leaving {
				first = ""
			}
		}
		if first == "" {
			rt.preferredSince = time.Time{}
			rt.mu.Unlock()
			continue
		}
		if rt.preferredSince.IsZero() {
			rt.preferredSince = now
		}
		if now.Sub(rt.preferredSince) < wait {
			rt.mu.Unlock()
			continue
		}
		rt.handing = true
		epoch, version := rt.meta.Epoch, rt.meta.Version
		isr := append([]string{first}, slices.DeleteFunc(slices.Clone(rt.meta.ISR), func(id string) bool { return id == first })...)
		rt.mu.Unlock()
		m.wg.Go(func() { m.handBack(rt, first, epoch, version, isr) })
	}
}

// preferredLeader returns the topic's first replica when this member
// (self) leads the topic and could hand the lead back to it: the first
// replica is another member, in sync, the topic is not moving, and no
// other change of it is under way; "" otherwise. rt.mu is held.
func (rt *rtopic) preferredLeader(self string) string {
	t := rt.meta
	if !rt.leading(self) || rt.handing || rt.altering || len(t.Replicas) == 0 || len(t.Target) > 0 {
		return ""
	}
	if first := t.Replicas[0]; first != self && t.InSync(first) {
		return first
	}
	return ""
}

// handBack hands the lead of rt to first, decided under epoch and
// version, with the in-sync set isr (first ahead). It drains the topic
// first: rt.handing, set by the caller, refuses new produces and makes
// those appended meanwhile wait for the followers; it waits up to
// handBackDrain for the in-sync followers to hold everything appended,
// first at least. If first does not, or the change is refused (the
// metadata moved on), the topic takes produces again and the hand-back
// is tried once first has been in sync for another LeaderBalance.
func (m *Manager) handBack(rt *rtopic, first string, epoch, version int64, isr []string) {
	ctx, cancel := context.WithTimeout(context.Background(), handBackDrain)
	defer cancel()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for !m.copied(rt) && ctx.Err() == nil {
		select {
		case <-m.done:
			cancel()
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	err := errNotCaughtUp
	if m.holds(rt, first) {
		pctx, pcancel := context.WithTimeout(context.Background(), createTimeout)
		go func() {
			select {
			case <-m.done:
				pcancel()
			case <-pctx.Done():
			}
		}()
		err = m.node.Load().SetLeader(pctx, rt.name, epoch, version, first, isr)
		pcancel()
	}
	if err == nil {
		// Applying the change ends the lead here (apply), and clears
		// rt.handing then: until it does, produces stay refused.
		m.log.Info("replica: lead handed back to the first replica", "topic", rt.name, "leader", first, "epoch", epoch+1)
		return
	}
	m.log.Debug("replica: lead not handed back", "topic", rt.name, "to", first, "err", err)
	rt.mu.Lock()
	if rt.meta.Epoch == epoch {
		rt.handing = false
		rt.preferredSince = time.Time{}
	}
	rt.mu.Unlock()
}

// holds reports whether follower id of rt holds everything this member
// appended. rt's lead is this member's.
func (m *Manager) holds(rt *rtopic, id string) bool {
	info, err := m.store.Info(rt.name)
	if err != nil {
		return false
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	f := rt.fol[id]
	return rt.leading(m.cfg.Self) && f != nil && f.leo >= info.Next
}

// held returns the replicas this member holds.
func (m *Manager) held() []*rtopic {
	m.mu.Lock()
	defer m.mu.Unlock()
	topics := make([]*rtopic, 0, len(m.topics))
	for _, rt := range m.topics {
		topics = append(topics, rt)
	}
	return topics
}
