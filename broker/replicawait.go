package broker

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// This file: replica wait (op 24), a follower's wait on every topic it
// follows from this leader, on the one connection it fetches them all
// on. It takes a slot as a consume does and parks the same way, on a
// watch of each topic's log and high-water mark; it is answered with the
// topics that are ready, which the follower then fetches (op 17, no
// wait) on the same connection.

// replicaWait is what a replica wait adds to a consume.
type replicaWait struct {
	follower string
	topics   []waitTopic
	polled   bool          // the topics were looked at once, their fetch recorded
	ready    []atomic.Bool // by topic: set by the poll and by the watches
	any      atomic.Bool   // some topic is ready
}

// waitTopic is one topic of a replica wait, and what the leader answers
// of it.
type waitTopic struct {
	name              string
	epoch, offset, hw int64
	leave             bool
	// The last poll's answer (ReplicaPoll); loop-owned.
	leaderHW int64
	fetch    bool
}

// mark records that topic i is ready. Watches call it from the goroutine
// that appended or moved the high-water mark: it never blocks.
func (rw *replicaWait) mark(i int) {
	rw.ready[i].Store(true)
	rw.any.Store(true)
}

// answer returns the ready topics, by ascending position. Those a watch
// woke are looked at again, for the leader's figures now.
func (cs *conn) answer(cr *consume) []protocol.ReplicaWaitReady {
	rw := cr.wait
	var out []protocol.ReplicaWaitReady
	for i := range rw.ready {
		if !rw.ready[i].Load() {
			continue
		}
		t := &rw.topics[i]
		if cr.waited {
			t.leaderHW, t.fetch = cs.b.svc.ReplicaPoll(cr.caller, t.name, rw.follower, t.epoch, t.offset)
		}
		if !t.fetch && t.leaderHW <= t.hw {
			continue // woken for a change the follower needs nothing for (a new leader fails the fetch)
		}
		out = append(out, protocol.ReplicaWaitReady{Index: uint32(i), Fetch: t.fetch, HighWater: t.leaderHW})
	}
	return out
}

// handleReplicaWait takes a follower's replica wait: the replication
// right on every topic listed, each recorded as fetched on this
// connection (or, with the leave flag, no longer), then served as a
// consume: answered at once when a topic is ready, else parked.
func (cs *conn) handleReplicaWait(h protocol.RequestHeader, payload []byte, start time.Time) {
	b := cs.b
	req, err := protocol.ParseReplicaWaitRequest(payload)
	if err == nil {
		for _, t := range req.Topics {
			if err = b.svc.Allow(cs.caller, h.Op, string(t.Topic)); err != nil {
				break
			}
		}
	}
	if err != nil {
		cs.respondError(h.Op, h.CorrID, err)
		b.observe(h.Op, false, start)
		return
	}
	rw := &replicaWait{follower: string(req.Follower), topics: make([]waitTopic, len(req.Topics)), ready: make([]atomic.Bool, len(req.Topics))}
	for i, t := range req.Topics {
		wt := waitTopic{name: string(t.Topic), epoch: t.Epoch, offset: t.Offset, hw: t.HighWater, leave: t.Flags&protocol.ReplicaWaitLeave != 0}
		rw.topics[i] = wt
		if wt.leave {
			cs.fetchLeft(wt.name, rw.follower)
		} else {
			cs.fetched(wt.name, rw.follower)
		}
	}
	cr := &consume{corrID: h.CorrID, caller: cs.caller, resolved: true, start: start, wait: rw}
	cs.queueConsume(cr, 0, req.MaxWaitMs)
}

// serveWait answers the replica wait cr once a topic is ready or its
// wait is over, and parks it otherwise. Runs on the event loop.
func (cs *conn) serveWait(cr *consume) bool {
	b, rw := cs.b, cr.wait
	if !rw.polled {
		rw.polled = true
		for i := range rw.topics {
			t := &rw.topics[i]
			if t.leave {
				continue
			}
			t.leaderHW, t.fetch = b.svc.ReplicaPoll(cr.caller, t.name, rw.follower, t.epoch, t.offset)
			if t.fetch || t.leaderHW > t.hw {
				rw.mark(i)
			}
		}
	}
	if !rw.any.Load() && !cr.deadline.IsZero() && time.Now().Before(cr.deadline) {
		if !cr.parked {
			cs.parkWait(cr)
		}
		if !rw.any.Load() {
			return false
		}
	}
	b.unpark(cr)
	cs.out = protocol.AppendReplicaWaitResponse(cs.out, cr.corrID, cs.answer(cr))
	b.observe(cr.op(), cr.waited, cr.start)
	return true
}

// parkWait watches each topic of the replica wait cr: its log growing
// past the follower's offset, its high-water mark passing the
// follower's. A topic whose watch cannot be set is ready (its fetch
// tells the follower why). The deadline's timer wakes the connection too.
func (cs *conn) parkWait(cr *consume) {
	b, c, rw := cs.b, cs.c, cr.wait
	var cancels []func() bool
	for i, t := range rw.topics {
		if t.leave {
			continue
		}
		fn := func() { rw.mark(i); _ = c.Wake(nil) }
		cancel, err := b.svc.ReplicaWatch(cr.caller, t.name, t.offset, fn)
		if err != nil {
			rw.mark(i)
			continue
		}
		cancels = append(cancels, cancel)
		if cancel, err = b.svc.ReplicaWatchHighWater(cr.caller, t.name, t.hw, fn); err != nil {
			rw.mark(i)
			continue
		}
		cancels = append(cancels, cancel)
	}
	cr.cancel = func() bool {
		removed := false
		for _, cancel := range cancels {
			removed = cancel() || removed
		}
		return removed
	}
	cr.parked, cr.waited = true, true
	cr.timer = time.AfterFunc(time.Until(cr.deadline), func() { _ = c.Wake(nil) })
	b.stats.parked.Add(1)
}

// cutWait ends the wait of a replica wait, or a replica fetch, parked at
// the head of the queue: a request behind it (the follower's ping when
// it has a topic to add) has it answered now, with the topics ready
// then, maybe none (the fetch: with no batch). A consume's wait is not
// cut. Runs on the loop.
func (cs *conn) cutWait() {
	if len(cs.slots) == 0 {
		return
	}
	if cr := cs.slots[0].consume; cr != nil && (cr.wait != nil || cr.replica != nil) && cr.parked {
		cr.deadline = time.Now()
	}
}

// fetched records that follower fetches topic on this connection: its
// closing drops the follower from the topic's in-sync set (OnClose).
// Runs on the loop.
func (cs *conn) fetched(topic, follower string) {
	if cs.fetching == nil {
		cs.fetching = make(map[string]string)
	}
	cs.fetching[topic] = follower
}

// fetchLeft tells the replication that follower fetches topic no more on
// this connection, as its closing would. Runs on the loop.
func (cs *conn) fetchLeft(topic, follower string) {
	delete(cs.fetching, topic)
	cs.b.svc.ReplicaGone(cs.caller, topic, follower)
}

// fetchesGone tells the replication that every follower that fetched on
// this connection, now closed, fetches none of its topics here any more.
func (cs *conn) fetchesGone() {
	topics := make([]string, 0, len(cs.fetching))
	for t := range cs.fetching {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	for _, t := range topics {
		cs.b.svc.ReplicaGone(cs.caller, t, cs.fetching[t])
	}
	cs.fetching = nil
}
