package replica

import (
	"context"
	"errors"
	"time"

	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/storage"
)

// This file: a replicated log taking the role its topic's Raft record
// gives this member (leader, follower, neither) and the start the record
// sets.

// roles is what a replicated log asks of its manager when it takes a
// new role (apply).
type roles interface {
	// mustRelead reports whether this member must not lead t under its
	// epoch (Manager.mustRelead).
	mustRelead(topic string, t cluster.Topic) bool
	// follow copies rl from leader at epoch until ctx ends, closing
	// stopped then (Manager.follow).
	follow(ctx context.Context, rl *replicaLog, leader string, epoch int64, stopped chan struct{})
}

var _ roles = (*Manager)(nil)

// apply acts on rl's Raft record t: a new leader or epoch stops what the
// replica did and starts its new role.
func (rl *replicaLog) apply(t cluster.Topic, r roles) {
	self := rl.sh.cfg.Self
	rl.applyStart(t.Start)
	rl.mu.Lock()
	old := rl.meta
	rl.meta = t
	if old.Epoch == t.Epoch && old.Leader == t.Leader && rl.started {
		for id := range rl.fol {
			if !t.IsReplica(id) {
				delete(rl.fol, id) // moved away
			}
		}
		calls := rl.advance() // the in-sync set or the replicas may have changed
		rl.mu.Unlock()
		calls.run()
		return
	}
	if t.Leader == self && r.mustRelead(rl.name, t) {
		rl.mu.Unlock()
		return
	}
	rl.started = true
	rl.handing, rl.preferredSince = false, time.Time{}
	rl.halt(rl.notLeader(t.Leader))
	if err := rl.ensureLog(); err != nil {
		rl.sh.log.Error("replica: creating a replicated topic", "topic", rl.name, "err", err)
		return
	}
	switch t.Leader {
	case self:
		rl.takeLead(t)
	case "":
		// No leader: nothing to copy from; reads and writes are refused.
	default:
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		rl.mu.Lock()
		rl.cancel, rl.stopped = cancel, stopped
		rl.mu.Unlock()
		go r.follow(ctx, rl, t.Leader, t.Epoch, stopped)
	}
}

// ensureLog creates rl's log in the store when it is missing, the handle
// then looked up anew, as it is when the log it held was deleted.
func (rl *replicaLog) ensureLog() error {
	if l := rl.lg.Load(); l != nil {
		if _, err := l.Info(); errors.Is(err, storage.ErrTopicNotFound) {
			rl.lg.CompareAndSwap(l, nil)
		}
	}
	if rl.sh.store.HasTopic(rl.name) {
		return nil
	}
	if err := rl.sh.store.CreateTopic(rl.name); err != nil && !errors.Is(err, storage.ErrTopicExists) {
		return err
	}
	rl.lg.Store(nil)
	return nil
}

// takeLead sets rl up to lead t's epoch: the epoch recorded in the log
// from its end, the followers' positions started afresh, writes taken.
func (rl *replicaLog) takeLead(t cluster.Topic) {
	self := rl.sh.cfg.Self
	l, err := rl.handle()
	var info storage.TopicInfo
	if err == nil {
		info, err = l.Info()
	}
	if err == nil {
		err = l.SetEpoch(t.Epoch, info.Next)
	}
	if err != nil && !rl.copyFailed() {
		rl.sh.log.Error("replica: taking the lead", "topic", rl.name, "epoch", t.Epoch, "err", err)
		return
	}
	// A copy that turned read-only may fail to record the epoch; it
	// takes no batch under it, and hands the lead on (handOver).
	rl.mu.Lock()
	if rl.meta.Epoch == t.Epoch && rl.meta.Leader == self {
		now := time.Now()
		clear(rl.fol)
		for _, id := range t.Replicas {
			if id != self {
				rl.fol[id] = &fstate{caughtUp: now}
			}
		}
		rl.ready = true
		rl.sh.stats.leaderChanges.Add(1)
		rl.sh.log.Info("replica: leading", "topic", rl.name, "epoch", t.Epoch, "next", info.Next, "isr", t.ISR)
	}
	calls := rl.advance()
	rl.mu.Unlock()
	calls.run()
}

// applyStart drops what rl holds before start, the topic's start in the
// Raft group (an admin truncation on its leader), once for each start. A
// replica that holds less keeps an empty log at its end, and its next
// fetch starts it again at the leader's start (restartAt).
func (rl *replicaLog) applyStart(start int64) {
	rl.mu.Lock()
	done := rl.startDone
	rl.mu.Unlock()
	if start <= done {
		return
	}
	l, err := rl.handle()
	if err != nil {
		return // not created here yet: the next reconcile
	}
	info, err := l.Info()
	if err != nil {
		return
	}
	if info.Oldest < min(start, info.Next) {
		if err := l.Truncate(start); err != nil {
			rl.sh.log.Error("replica: truncating to the topic's start", "topic", rl.name, "start", start, "err", err)
			return
		}
		rl.sh.log.Info("replica: truncated to the topic's start", "topic", rl.name, "start", start, "was", info.Oldest)
	}
	rl.mu.Lock()
	rl.startDone = max(rl.startDone, start)
	rl.mu.Unlock()
}
