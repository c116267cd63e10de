package replica

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/protocol"
)

// This file: the followers' lag as their leader sees it, and the in-sync
// set's changes it leads to.

// checkLag drops from the in-sync sets of the logs this member leads
// the followers that have not caught up for LagTime, and answers the
// produces that waited past AckTimeout.
func (m *Manager) checkLag() {
	now := time.Now()
	for _, rl := range m.held() {
		rl.checkLag(now)
	}
}

// checkLag answers the produces waiting on rl past AckTimeout and, if
// this member leads rl, takes a follower out of its in-sync set that
// lags (laggingFollower).
func (rl *replicaLog) checkLag(now time.Time) {
	rl.mu.Lock()
	calls := rl.expireWaiters(now)
	var shrink []string
	lagging, why := rl.laggingFollower(now)
	if lagging != "" {
		shrink = slices.DeleteFunc(slices.Clone(rl.meta.ISR), func(x string) bool { return x == lagging })
		rl.altering = true
	}
	epoch, version := rl.meta.Epoch, rl.meta.Version
	rl.mu.Unlock()
	calls.run()
	if shrink != nil {
		rl.alterISR(epoch, version, shrink, why, lagging)
	}
}

// expireWaiters removes the produces that waited past their deadline
// and returns their answers: not enough replicas. rl.mu is held.
func (rl *replicaLog) expireWaiters(now time.Time) callbacks {
	var calls callbacks
	for i := 0; i < len(rl.waiters); i++ {
		if w := rl.waiters[i]; now.After(w.deadline) {
			calls.fns = append(calls.fns, func() {
				w.fn(codedErr{fmt.Errorf("%w: topic %q: the in-sync replicas did not confirm the batch within %v (-ack-timeout)", ErrNotEnoughReplicas, rl.name, rl.sh.cfg.AckTimeout),
					protocol.CodeNotEnoughReplicas})
			})
			rl.waiters = slices.Delete(rl.waiters, i, i+1)
			i--
		}
	}
	return calls
}

// laggingFollower returns an in-sync follower to take out of the set, and
// why: one that has not reached the leader's end for LagTime, one whose
// fetch connection closed (goneFollower), or one more than LagBytes
// behind; "" for none, or when this member does not lead rl or another
// change of the set is under way. rl.mu is held.
func (rl *replicaLog) laggingFollower(now time.Time) (id, why string) {
	cfg := &rl.sh.cfg
	behind := map[string]int64{} // in-sync followers short of the end: their next offset
	if rl.leading() && !rl.altering {
		for _, id := range rl.meta.ISR {
			f := rl.fol[id]
			if id == cfg.Self || f == nil {
				continue
			}
			if now.Sub(f.caughtUp) > cfg.LagTime {
				return id, "lagging"
			}
			behind[id] = f.leo
		}
		if id := rl.goneFollower(cfg.MinInsync); id != "" {
			return id, "fetch connection closed"
		}
	}
	if cfg.LagBytes > 0 {
		if id := rl.lagBytes(behind); id != "" {
			return id, "lagging bytes"
		}
	}
	return "", ""
}

// FetchGone implements service.Followers: a follower whose fetch
// connection closed fetches no more until it connects again, killed, cut
// off or no longer following this member. It leaves the in-sync set now,
// as long as the set keeps -min-insync members, rather than hold acks=all
// until the controller finds it down (-member-timeout) or it lags for
// -replica-lag-time. Back, it is taken in again once caught up, as any
// follower is.
func (a followerAPI) FetchGone(topic, follower string) {
	m := a.m
	m.mu.Lock()
	rl, closed := m.logs[topic], m.closed
	m.mu.Unlock()
	if rl == nil || closed {
		return // closed: this server stops, and its own connections close
	}
	rl.fetchGone(follower)
}

// fetchGone takes follower, whose fetch connection closed, out of rl's
// in-sync set when goneShrink allows, and marks it gone until it fetches
// again.
func (rl *replicaLog) fetchGone(follower string) {
	rl.mu.Lock()
	if f := rl.fol[follower]; f != nil {
		f.gone = true // until it fetches again: checkLag retries the change
	}
	shrink := rl.goneShrink(follower, rl.sh.cfg.MinInsync)
	if shrink != nil {
		rl.altering = true
	}
	epoch, version := rl.meta.Epoch, rl.meta.Version
	rl.mu.Unlock()
	if shrink != nil {
		rl.alterISR(epoch, version, shrink, "fetch connection closed", follower)
	}
}

// goneShrink returns the in-sync set without follower, whose fetch
// connection closed, when this member leads rl, follower is in the set,
// no other change of it is under way and at least minInsync members
// stay; nil otherwise. rl.mu is held.
func (rl *replicaLog) goneShrink(follower string, minInsync int) []string {
	if !rl.leading() || rl.altering || follower == rl.sh.cfg.Self || !rl.meta.InSync(follower) {
		return nil
	}
	rest := slices.DeleteFunc(slices.Clone(rl.meta.ISR), func(id string) bool { return id == follower })
	if len(rest) < max(minInsync, 1) {
		return nil
	}
	return rest
}

// goneFollower returns an in-sync follower whose fetch connection closed
// and which has not fetched since, when goneShrink would take it out of
// the set; "" for none. rl.mu is held.
func (rl *replicaLog) goneFollower(minInsync int) string {
	for _, id := range rl.meta.ISR {
		if f := rl.fol[id]; f != nil && f.gone && rl.goneShrink(id, minInsync) != nil {
			return id
		}
	}
	return ""
}

// lagBytes returns a follower of behind (ID to its next offset) more than
// LagBytes of batches behind rl's end, "" for none. It reads the
// batches' spans from the index, at most LagBytes+1 bytes' worth each.
// rl.mu is held: the index is the store's.
func (rl *replicaLog) lagBytes(behind map[string]int64) string {
	if len(behind) == 0 {
		return ""
	}
	l, err := rl.handle()
	if err != nil {
		return ""
	}
	info, err := l.Info()
	if err != nil {
		return ""
	}
	limit := rl.sh.cfg.LagBytes
	for id, leo := range behind {
		if leo >= info.Next {
			continue
		}
		r, err := l.Peek(leo, 0, limit+1)
		if err != nil {
			continue
		}
		// Short of the end, the next batch would have passed the bound.
		over := r.Bytes > limit || r.Next < info.Next
		r.Release()
		if over {
			return id
		}
	}
	return ""
}

// alterISR records rl's new in-sync set in the cluster, in the
// background; rl.altering is set by the caller and cleared here.
func (rl *replicaLog) alterISR(epoch, version int64, isr []string, why, who string) {
	sh := rl.sh
	sh.wg.Go(func() {
		ctx, cancel := sh.untilClosed(createTimeout)
		defer cancel()
		err := sh.node.Load().SetISR(ctx, rl.name, epoch, version, isr)
		rl.mu.Lock()
		rl.altering = false
		rl.mu.Unlock()
		if err != nil {
			// A stale change lost to a newer one, and a deleted topic's
			// followers leaving it (their fetches end with it), are
			// nothing to warn of.
			if !errors.Is(err, cluster.ErrStaleEpoch) && !errors.Is(err, cluster.ErrTopicNotFound) {
				sh.log.Warn("replica: changing the in-sync set", "topic", rl.name, "isr", isr, "err", err)
			}
			return
		}
		sh.stats.isrChanges.Add(1)
		sh.log.Info("replica: in-sync set changed", "topic", rl.name, "member", who, "why", why, "isr", isr)
		sh.Poke()
	})
}
