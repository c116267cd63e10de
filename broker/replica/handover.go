package replica

import (
	"context"
	"errors"
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

// handOver makes the planned lead changes of the logs this member
// leads (planned), each drained first (handTo): the replica taking the
// lead then holds every batch acknowledged here, acks=leader ones too.
// The Raft leader's controller makes the changes a dead leader cannot.
func (m *Manager) handOver(now time.Time) {
	node := m.node.Load()
	if node == nil {
		return
	}
	for _, rl := range m.held() {
		if h, ok := rl.plan(node, now); ok {
			m.wg.Go(func() { rl.handTo(h) })
		}
	}
}

// plan returns the lead change rl needs now (planned), marking rl as
// handing it over.
func (rl *replicaLog) plan(node *cluster.Node, now time.Time) (handover, bool) {
	failed := rl.copyFailed()
	rl.mu.Lock()
	defer rl.mu.Unlock()
	h, ok := rl.planned(node, now, failed)
	if ok {
		rl.handing = true
	}
	return h, ok
}

// planned returns the lead change rl needs now, if this member leads it
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
// leads spread over the members again). rl.mu is held.
func (rl *replicaLog) planned(node *cluster.Node, now time.Time, failed bool) (handover, bool) {
	self := rl.sh.cfg.Self
	t := rl.meta
	if !rl.leading() || rl.handing || rl.altering || len(t.Replicas) == 0 {
		return handover{}, false
	}
	if failed {
		to := rl.liveFollower(now, rl.sh.cfg.LagTime)
		if to == "" {
			return handover{}, false
		}
		isr := append([]string{to}, slices.DeleteFunc(slices.Clone(t.ISR), func(id string) bool { return id == to || id == self })...)
		return handover{to: to, epoch: t.Epoch, version: t.Version, isr: isr, why: "its copy here is read-only"}, true
	}
	if len(t.Target) > 0 {
		rl.preferredSince = time.Time{}
		if slices.Contains(t.Target, self) || slices.ContainsFunc(t.Target, func(r string) bool { return !t.InSync(r) }) {
			return handover{}, false
		}
		isr := slices.DeleteFunc(slices.Clone(t.ISR), func(r string) bool { return !slices.Contains(t.Target, r) })
		return handover{to: isr[0], epoch: t.Epoch, version: t.Version, isr: isr, move: true, why: "moving off this member"}, true
	}
	first := rl.preferredLeader()
	if first != "" {
		if mb, ok := node.Member(first); !ok || mb.Leaving {
			first = ""
		}
	}
	if first == "" || rl.sh.cfg.LeaderBalance <= 0 {
		rl.preferredSince = time.Time{}
		return handover{}, false
	}
	if rl.preferredSince.IsZero() {
		rl.preferredSince = now
	}
	if now.Sub(rl.preferredSince) < rl.sh.cfg.LeaderBalance {
		return handover{}, false
	}
	isr := append([]string{first}, slices.DeleteFunc(slices.Clone(t.ISR), func(id string) bool { return id == first })...)
	return handover{to: first, epoch: t.Epoch, version: t.Version, isr: isr, why: "back to the first replica"}, true
}

// liveFollower returns the first member of rl's in-sync set, other than
// self, that fetched within lag: one that can take the lead now. rl.mu
// is held.
func (rl *replicaLog) liveFollower(now time.Time, lag time.Duration) string {
	self := rl.sh.cfg.Self
	for _, id := range rl.meta.ISR {
		if f := rl.fol[id]; id != self && f != nil && now.Sub(f.fetched) < lag {
			return id
		}
	}
	return ""
}

// preferredLeader returns the topic's first replica when this member
// (self) leads the topic and could hand the lead back to it: the first
// replica is another member, in sync, the topic is not moving, and no
// other change of it is under way; "" otherwise. rl.mu is held.
func (rl *replicaLog) preferredLeader() string {
	self := rl.sh.cfg.Self
	t := rl.meta
	if !rl.leading() || rl.handing || rl.altering || len(t.Replicas) == 0 || len(t.Target) > 0 {
		return ""
	}
	if first := t.Replicas[0]; first != self && t.InSync(first) {
		return first
	}
	return ""
}

// handTo makes the lead change h of rl. It drains the topic first:
// rl.handing, set by the caller, refuses new produces and makes those
// appended meanwhile wait for the followers whatever their acks; it waits
// up to handDrain for the in-sync followers to hold everything appended,
// h.to at least. If h.to does not, or the change is refused (the
// metadata moved on), the topic takes produces again; a lead back is then
// tried once the first replica has been in sync for another
// LeaderBalance, the end of a move at the next check.
func (rl *replicaLog) handTo(h handover) {
	sh := rl.sh
	ctx, cancel := context.WithTimeout(context.Background(), handDrain)
	sh.waitCopied(ctx, []*replicaLog{rl})
	cancel()
	err := errNotCaughtUp
	if rl.holds(h.to) {
		pctx, pcancel := sh.untilClosed(createTimeout)
		node := sh.node.Load()
		if h.move {
			err = node.FinishMove(pctx, rl.name, h.epoch, h.version, h.to, h.isr)
		} else {
			err = node.SetLeader(pctx, rl.name, h.epoch, h.version, h.to, h.isr)
		}
		pcancel()
	}
	if err == nil {
		// Applying the change ends the lead here (apply), and clears
		// rl.handing then: until it does, produces stay refused.
		sh.log.Info("replica: lead handed over", "topic", rl.name, "leader", h.to, "why", h.why, "decided_under_epoch", h.epoch)
		return
	}
	sh.log.Debug("replica: lead not handed over", "topic", rl.name, "to", h.to, "why", h.why, "err", err)
	rl.mu.Lock()
	if rl.meta.Epoch == h.epoch {
		rl.handing = false
		rl.preferredSince = time.Time{}
	}
	rl.mu.Unlock()
}

// holds reports whether follower id of rl holds everything this member
// appended. rl's lead is this member's.
func (rl *replicaLog) holds(id string) bool {
	info, err := rl.info()
	if err != nil {
		return false
	}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	f := rl.fol[id]
	return rl.leading() && f != nil && f.leo >= info.Next
}
