package replica

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/haraqa/haraqa/broker/cluster"
)

// handDrain bounds how long a leader handing a topic's lead over waits for
// the replica taking it to hold everything it appended.
const handDrain = time.Second

// errNotCaughtUp: the replica taking the lead did not hold everything in
// time.
var errNotCaughtUp = errors.New("replica: the replica taking the lead did not catch up within the drain")

// handover is a planned change of a topic's lead that its leader makes:
// to leads next, heading isr, decided under epoch and version; move ends
// the topic's move (cluster.Node.FinishMove), else the lead goes back to
// the first replica (cluster.Node.SetLeader).
type handover struct {
	to             string
	epoch, version int64
	isr            []string
	move           bool
	why            string // for the log
}

// handOver makes the planned lead changes of the topics this member
// leads (planned), each drained first (handTo): the replica taking the
// lead then holds every batch acknowledged here, acks=leader ones too.
// The Raft leader's controller makes the changes a dead leader cannot.
func (m *Manager) handOver(now time.Time) {
	node := m.node.Load()
	if node == nil {
		return
	}
	for _, rt := range m.held() {
		failed := m.copyFailed(rt.name)
		rt.mu.Lock()
		h, ok := m.planned(rt, node, now, failed)
		if ok {
			rt.handing = true
		}
		rt.mu.Unlock()
		if ok {
			m.wg.Go(func() { m.handTo(rt, h) })
		}
	}
}

// planned returns the lead change rt needs now, if this member leads it
// and no other change of it is under way: when this member's copy failed
// (copyFailed), the lead to the first in-sync follower that is fetching,
// this member out of the in-sync set, since it copies nothing more until
// it restarts (session.setup), as Kafka moves the partitions of a failed log
// directory; else the end of its move to members
// that do not include this one, once all of them are in sync (while this
// member stays a replica, the controller ends the move, the lead kept);
// or, with LeaderBalance, the lead back to its first replica, once that
// replica has been in sync for LeaderBalance while another leads, its
// member not leaving (Kafka's automatic leader rebalance: placement puts a
// topic's lead on its first replica, so after failovers and restarts the
// leads spread over the members again). rt.mu is held.
func (m *Manager) planned(rt *rtopic, node *cluster.Node, now time.Time, failed bool) (handover, bool) {
	t := rt.meta
	if !rt.leading(m.cfg.Self) || rt.handing || rt.altering || len(t.Replicas) == 0 {
		return handover{}, false
	}
	if failed {
		to := rt.liveFollower(m.cfg.Self, now, m.cfg.LagTime)
		if to == "" {
			return handover{}, false
		}
		isr := append([]string{to}, slices.DeleteFunc(slices.Clone(t.ISR), func(id string) bool { return id == to || id == m.cfg.Self })...)
		return handover{to: to, epoch: t.Epoch, version: t.Version, isr: isr, why: "its copy here is read-only"}, true
	}
	if len(t.Target) > 0 {
		rt.preferredSince = time.Time{}
		if slices.Contains(t.Target, m.cfg.Self) || slices.ContainsFunc(t.Target, func(r string) bool { return !t.InSync(r) }) {
			return handover{}, false
		}
		isr := slices.DeleteFunc(slices.Clone(t.ISR), func(r string) bool { return !slices.Contains(t.Target, r) })
		return handover{to: isr[0], epoch: t.Epoch, version: t.Version, isr: isr, move: true, why: "moving off this member"}, true
	}
	first := rt.preferredLeader(m.cfg.Self)
	if first != "" {
		if mb, ok := node.Member(first); !ok || mb.Leaving {
			first = ""
		}
	}
	if first == "" || m.cfg.LeaderBalance <= 0 {
		rt.preferredSince = time.Time{}
		return handover{}, false
	}
	if rt.preferredSince.IsZero() {
		rt.preferredSince = now
	}
	if now.Sub(rt.preferredSince) < m.cfg.LeaderBalance {
		return handover{}, false
	}
	isr := append([]string{first}, slices.DeleteFunc(slices.Clone(t.ISR), func(id string) bool { return id == first })...)
	return handover{to: first, epoch: t.Epoch, version: t.Version, isr: isr, why: "back to the first replica"}, true
}

// liveFollower returns the first member of rt's in-sync set, other than
// self, that fetched within lag: one that can take the lead now. rt.mu
// is held.
func (rt *rtopic) liveFollower(self string, now time.Time, lag time.Duration) string {
	for _, id := range rt.meta.ISR {
		if f := rt.fol[id]; id != self && f != nil && now.Sub(f.fetched) < lag {
			return id
		}
	}
	return ""
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

// handTo makes the lead change h of rt. It drains the topic first:
// rt.handing, set by the caller, refuses new produces and makes those
// appended meanwhile wait for the followers whatever their acks; it waits
// up to handDrain for the in-sync followers to hold everything appended,
// h.to at least. If h.to does not, or the change is refused (the
// metadata moved on), the topic takes produces again; a lead back is then
// tried once the first replica has been in sync for another
// LeaderBalance, the end of a move at the next check.
func (m *Manager) handTo(rt *rtopic, h handover) {
	ctx, cancel := context.WithTimeout(context.Background(), handDrain)
	m.waitCopied(ctx, []*rtopic{rt})
	cancel()
	err := errNotCaughtUp
	if m.holds(rt, h.to) {
		pctx, pcancel := m.untilClosed(createTimeout)
		node := m.node.Load()
		if h.move {
			err = node.FinishMove(pctx, rt.name, h.epoch, h.version, h.to, h.isr)
		} else {
			err = node.SetLeader(pctx, rt.name, h.epoch, h.version, h.to, h.isr)
		}
		pcancel()
	}
	if err == nil {
		// Applying the change ends the lead here (apply), and clears
		// rt.handing then: until it does, produces stay refused.
		m.log.Info("replica: lead handed over", "topic", rt.name, "leader", h.to, "why", h.why, "decided_under_epoch", h.epoch)
		return
	}
	m.log.Debug("replica: lead not handed over", "topic", rt.name, "to", h.to, "why", h.why, "err", err)
	rt.mu.Lock()
	if rt.meta.Epoch == h.epoch {
		rt.handing = false
		rt.preferredSince = time.Time{}
	}
	rt.mu.Unlock()
}

// holds reports whether follower id of rt holds everything this member
// appended. rt's lead is this member's.
func (m *Manager) holds(rt *rtopic, id string) bool {
	info, err := m.info(rt.name)
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
	return slices.Collect(maps.Values(m.topics))
}
