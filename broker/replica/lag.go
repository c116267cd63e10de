package replica

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// This file: the followers' lag as their leader sees it, the in-sync
// set's changes it leads to, and the replication figures for /metrics.

// checkLag drops from the in-sync sets of the topics this member leads
// the followers that have not caught up for LagTime, and answers the
// produces that waited past AckTimeout.
func (m *Manager) checkLag() {
	now := time.Now()
	for _, rt := range m.held() {
		rt.mu.Lock()
		var calls callbacks
		for i := 0; i < len(rt.waiters); i++ {
			if w := rt.waiters[i]; now.After(w.deadline) {
				calls.fns = append(calls.fns, func() {
					w.fn(codedErr{fmt.Errorf("%w: topic %q: the in-sync replicas did not confirm the batch within %v (-ack-timeout)", ErrNotEnoughReplicas, rt.name, m.cfg.AckTimeout),
						protocol.CodeNotEnoughReplicas})
				})
				rt.waiters = slices.Delete(rt.waiters, i, i+1)
				i--
			}
		}
		var shrink []string
		var lagging, why string
		behind := map[string]int64{} // in-sync followers short of the end: their next offset
		if rt.leading(m.cfg.Self) && !rt.altering {
			for _, id := range rt.meta.ISR {
				f := rt.fol[id]
				if id == m.cfg.Self || f == nil {
					continue
				}
				if now.Sub(f.caughtUp) > m.cfg.LagTime {
					lagging, why = id, "lagging"
					break
				}
				behind[id] = f.leo
			}
		}
		if lagging == "" && rt.leading(m.cfg.Self) && !rt.altering {
			lagging, why = rt.goneFollower(m.cfg.Self, m.cfg.MinInsync), "fetch connection closed"
		}
		if lagging == "" && m.cfg.LagBytes > 0 {
			lagging = m.lagBytes(rt.name, behind)
			why = "lagging bytes"
		}
		if lagging != "" {
			shrink = slices.DeleteFunc(slices.Clone(rt.meta.ISR), func(x string) bool { return x == lagging })
			rt.altering = true
		}
		epoch, version := rt.meta.Epoch, rt.meta.Version
		rt.mu.Unlock()
		calls.run()
		if shrink != nil {
			m.alterISR(rt, epoch, version, shrink, why, lagging)
		}
	}
}

// FetchGone implements service.Followers: a follower whose fetch
// connection closed fetches no more until it connects again, killed, cut
// off or no longer following this member. It leaves the in-sync set now,
// as long as the set keeps -min-insync members, rather than hold acks=all
// until the controller finds it down (-member-timeout) or it lags for
// -replica-lag-time. Back, it is taken in again once caught up, as any
// follower is.
func (m *Manager) FetchGone(topic, follower string) {
	m.mu.Lock()
	rt, closed := m.topics[topic], m.closed
	m.mu.Unlock()
	if rt == nil || closed {
		return // closed: this server stops, and its own connections close
	}
	rt.mu.Lock()
	if f := rt.fol[follower]; f != nil {
		f.gone = true // until it fetches again: checkLag retries the change
	}
	shrink := rt.goneShrink(m.cfg.Self, follower, m.cfg.MinInsync)
	if shrink != nil {
		rt.altering = true
	}
	epoch, version := rt.meta.Epoch, rt.meta.Version
	rt.mu.Unlock()
	if shrink != nil {
		m.alterISR(rt, epoch, version, shrink, "fetch connection closed", follower)
	}
}

// goneShrink returns the in-sync set without follower, whose fetch
// connection closed, when this member (self) leads the topic,
// follower is in the set, no other change of it is under way and at
// least minInsync members stay; nil otherwise. rt.mu is held.
func (rt *rtopic) goneShrink(self, follower string, minInsync int) []string {
	if !rt.leading(self) || rt.altering || follower == self || !rt.meta.InSync(follower) {
		return nil
	}
	rest := slices.DeleteFunc(slices.Clone(rt.meta.ISR), func(id string) bool { return id == follower })
	if len(rest) < max(minInsync, 1) {
		return nil
	}
	return rest
}

// goneFollower returns an in-sync follower whose fetch connection closed
// and which has not fetched since, when goneShrink would take it out of
// the set; "" for none. rt.mu is held.
func (rt *rtopic) goneFollower(self string, minInsync int) string {
	for _, id := range rt.meta.ISR {
		if f := rt.fol[id]; f != nil && f.gone && rt.goneShrink(self, id, minInsync) != nil {
			return id
		}
	}
	return ""
}

// lagBytes returns a follower of behind (ID to its next offset) more than
// LagBytes of batches behind topic's end, "" for none. It reads the
// batches' spans from the index, at most LagBytes+1 bytes' worth each.
// rt.mu is held: the index is the store's.
func (m *Manager) lagBytes(topic string, behind map[string]int64) string {
	if len(behind) == 0 {
		return ""
	}
	l, err := m.store.Log(topic)
	if err != nil {
		return ""
	}
	info, err := l.Info()
	if err != nil {
		return ""
	}
	for id, leo := range behind {
		if leo >= info.Next {
			continue
		}
		r, err := l.Peek(leo, 0, m.cfg.LagBytes+1)
		if err != nil {
			continue
		}
		// Short of the end, the next batch would have passed the bound.
		over := r.Bytes > m.cfg.LagBytes || r.Next < info.Next
		r.Release()
		if over {
			return id
		}
	}
	return ""
}

// alterISR records a topic's new in-sync set in the cluster, in the
// background; rt.altering is set by the caller and cleared here.
func (m *Manager) alterISR(rt *rtopic, epoch, version int64, isr []string, why, who string) {
	m.wg.Go(func() {
		ctx, cancel := m.untilClosed(createTimeout)
		defer cancel()
		err := m.node.Load().SetISR(ctx, rt.name, epoch, version, isr)
		rt.mu.Lock()
		rt.altering = false
		rt.mu.Unlock()
		if err != nil {
			// A stale change lost to a newer one, and a deleted topic's
			// followers leaving it (their fetches end with it), are
			// nothing to warn of.
			if !errors.Is(err, cluster.ErrStaleEpoch) && !errors.Is(err, cluster.ErrTopicNotFound) {
				m.log.Warn("replica: changing the in-sync set", "topic", rt.name, "isr", isr, "err", err)
			}
			return
		}
		m.stats.isrChanges.Add(1)
		m.log.Info("replica: in-sync set changed", "topic", rt.name, "member", who, "why", why, "isr", isr)
		m.Poke()
	})
}

// Stats implements service.ClusterView.
func (m *Manager) Stats() service.ReplicationStats {
	st := service.ReplicationStats{LeaderChanges: m.stats.leaderChanges.Load(), ISRChanges: m.stats.isrChanges.Load(),
		Truncations: m.stats.truncations.Load(), FetchedBytes: m.stats.fetchedBytes.Load(), Repairs: m.stats.repairs.Load()}
	m.mu.Lock()
	for name, t := range m.meta {
		if t.IsReplica(m.cfg.Self) && t.Leader == "" {
			st.Offline++
		}
		if m.repairing[name] {
			st.Repairing++
		}
	}
	m.mu.Unlock()
	topics := m.held()
	slices.SortFunc(topics, func(a, b *rtopic) int { return strings.Compare(a.name, b.name) })
	for _, rt := range topics {
		rt.mu.Lock()
		ts := service.ReplicaTopicStats{Topic: rt.name, Leader: rt.leading(m.cfg.Self), Replicas: len(rt.meta.Replicas),
			InSync: len(rt.meta.ISR), Epoch: rt.meta.Epoch}
		var fols []service.FollowerLag
		if ts.Leader {
			for _, id := range rt.meta.Replicas {
				if f := rt.fol[id]; f != nil {
					fols = append(fols, service.FollowerLag{ID: id, Messages: f.leo})
				}
			}
		}
		rt.mu.Unlock()
		if ts.Leader {
			l, err := m.store.Log(rt.name)
			var info storage.TopicInfo
			if err == nil {
				info, err = l.Info()
			}
			for i := range fols {
				from := fols[i].Messages
				fols[i].Messages = max(0, info.Next-from)
				if err == nil && fols[i].Messages > 0 {
					if r, rerr := l.Peek(from, 0, 1<<62); rerr == nil {
						fols[i].Bytes = r.Bytes
						r.Release()
					}
				}
			}
			ts.Followers = fols
		}
		st.Topics = append(st.Topics, ts)
	}
	return st
}
