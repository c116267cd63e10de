package replica

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/broker/service"
)

// rtopic is one replicated topic this member holds.
type rtopic struct {
	name string

	mu      sync.Mutex
	meta    cluster.Topic // the metadata this replica acts on
	started bool          // meta was applied once
	ready   bool          // leader: set up at meta.Epoch, taking writes
	hw      int64         // high-water mark: what every in-sync replica holds
	fol     map[string]*fstate
	waiters []*waiter
	watches map[*watch]struct{}

	altering  bool  // an in-sync set change is being recorded
	startDone int64 // the topic's start (cluster.Topic.Start) this replica truncated to

	// handing: the lead is being handed over (handOver): produces are
	// refused, and those appended meanwhile wait for the followers
	// whatever their acks. preferredSince: since when the lead could go
	// back to the first replica.
	handing        bool
	preferredSince time.Time

	cancel  context.CancelFunc // the follower loop's
	stopped chan struct{}      // closed when it has returned
}

// fstate is a follower's position, on its leader.
type fstate struct {
	leo      int64     // its next offset at its last fetch
	fetched  time.Time // that fetch
	caughtUp time.Time // when it last reached the leader's end
	// gone: its fetch connection closed and it has not fetched since
	// (FetchGone). The lag check takes it out of the in-sync set when
	// FetchGone could not (another change under way, or the change
	// failed to commit).
	gone bool
}

// waiter is a produce with acks=all waiting for the high-water mark.
type waiter struct {
	end      int64
	fn       func(error)
	deadline time.Time
}

// watch is a consume parked until the high-water mark passes offset.
type watch struct {
	offset int64
	fn     func()
}

// callbacks are what a change under rt.mu owes others, run once it is
// released.
type callbacks struct {
	fns     []func()
	watches []*watch
}

func (c callbacks) run() {
	for _, f := range c.fns {
		f()
	}
	for _, w := range c.watches {
		w.fn()
	}
}

// leading reports whether this replica leads, set up. rt.mu held.
func (rt *rtopic) leading(self string) bool { return rt.ready && rt.meta.Leader == self }

// advance moves the leader's high-water mark to the lowest next offset of
// the in-sync replicas, if the set holds at least MinInsync, and returns
// the waiters and watches it satisfied. rt.mu held.
func (rt *rtopic) advance(m *Manager) callbacks {
	if !rt.leading(m.cfg.Self) || len(rt.meta.ISR) < m.cfg.MinInsync {
		return callbacks{}
	}
	info, err := m.info(rt.name)
	if err != nil {
		return callbacks{}
	}
	hw := info.Next
	for _, id := range rt.meta.ISR {
		if id == m.cfg.Self {
			continue
		}
		f := rt.fol[id]
		if f == nil {
			return callbacks{}
		}
		hw = min(hw, f.leo)
	}
	return rt.raise(hw)
}

// raise sets the high-water mark to hw if that is higher. rt.mu held.
func (rt *rtopic) raise(hw int64) callbacks {
	if hw <= rt.hw {
		return callbacks{}
	}
	rt.hw = hw
	var c callbacks
	kept := rt.waiters[:0]
	for _, w := range rt.waiters {
		if w.end <= hw {
			c.fns = append(c.fns, func() { w.fn(nil) })
		} else {
			kept = append(kept, w)
		}
	}
	clear(rt.waiters[len(kept):])
	rt.waiters = kept
	for w := range rt.watches {
		if w.offset < hw {
			c.watches = append(c.watches, w)
			delete(rt.watches, w)
		}
	}
	return c
}

// failWaiters answers every waiting produce with err. rt.mu held. The
// produces waiting were written here: a change of leader (err a
// NotLeaderError) leaves their outcome unknown, since the new leader may
// hold them or not, and they are answered so (outcomeUnknown).
func (rt *rtopic) failWaiters(err error) callbacks {
	err = outcomeUnknown(err)
	var c callbacks
	for _, w := range rt.waiters {
		c.fns = append(c.fns, func() { w.fn(err) })
	}
	clear(rt.waiters)
	rt.waiters = rt.waiters[:0]
	return c
}

// outcomeUnknown turns a not leader answer to a produce that was written
// here into an outcome unknown one, naming the same leader: not leader
// tells a client that nothing was written and that it may send the batch
// again, which would store it twice when the new leader holds it.
func outcomeUnknown(err error) error {
	var nl *service.NotLeaderError
	if errors.As(err, &nl) {
		return &service.OutcomeUnknownError{Topic: nl.Topic, Leader: nl.Leader, LeaderHTTP: nl.LeaderHTTP}
	}
	return err
}

// takeWatches removes and returns every parked consume: they read again
// and hear of the change. rt.mu held.
func (rt *rtopic) takeWatches() []*watch {
	ws := make([]*watch, 0, len(rt.watches))
	for w := range rt.watches {
		ws = append(ws, w)
	}
	clear(rt.watches)
	return ws
}

// stop ends what the replica does: its follower loop, its waiting
// produces (answered err) and parked consumes.
func (rt *rtopic) stop(m *Manager, err error) {
	rt.mu.Lock()
	rt.halt(err)
}

// halt is stop with rt.mu held, which it releases.
func (rt *rtopic) halt(err error) {
	rt.ready = false
	calls := rt.failWaiters(err)
	calls.watches = rt.takeWatches()
	cancel, stopped := rt.cancel, rt.stopped
	rt.cancel, rt.stopped = nil, nil
	rt.mu.Unlock()
	calls.run()
	if cancel != nil {
		cancel()
		<-stopped
	}
}

// stats are the manager's counters (Stats).
type stats struct {
	leaderChanges atomic.Int64
	isrChanges    atomic.Int64
	truncations   atomic.Int64
	repairs       atomic.Int64 // logs cut at a range unreadable on every volume (repair)
	fetchedBytes  atomic.Int64
}
