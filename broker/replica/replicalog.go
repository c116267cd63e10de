package replica

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/storage"
)

// replicaLog is one replicated log this member holds, a topic's, and
// everything this member does with it: on its leader, the followers'
// positions, the in-sync set's changes, the high-water mark, the
// produces waiting for it (acks=all) and the consumes parked on it; on a
// follower, its copy of the leader's log (follow.go) and the mark the
// leader sent. The Manager finds it by name once per request and hands
// the request to it.
type replicaLog struct {
	name string
	sh   *shared
	// lg is the handle on the log in the store, looked up once (handle),
	// again only once the topic was created anew or the log it held was
	// deleted (apply's ensureLog).
	lg atomic.Pointer[storage.Log]
	// record is the Raft record of the topic as the manager last
	// reconciled it (Manager.mu held): what a request is checked
	// against, meta trailing it until apply runs.
	record cluster.Topic

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

// newReplicaLog returns the replicated log of topic name, which holds no
// state yet: apply gives it its role.
func newReplicaLog(sh *shared, name string) *replicaLog {
	return &replicaLog{name: name, sh: sh, fol: map[string]*fstate{}, watches: map[*watch]struct{}{}}
}

// handle returns the handle on rl's log in the store, looking it up the
// first time.
func (rl *replicaLog) handle() (*storage.Log, error) {
	if l := rl.lg.Load(); l != nil {
		return l, nil
	}
	l, err := rl.sh.store.Log(rl.name)
	if err != nil {
		return nil, err
	}
	rl.lg.Store(l)
	return l, nil
}

// info returns the offsets and size of rl's log here.
func (rl *replicaLog) info() (storage.TopicInfo, error) {
	l, err := rl.handle()
	if err != nil {
		return storage.TopicInfo{}, err
	}
	return l.Info()
}

// copyFailed reports whether this member's copy of rl turned read-only:
// a write or an fsync of it failed (storage.Log.ReadOnly). Until a
// restart reopens it, it takes no batch, as a leader or as a follower.
func (rl *replicaLog) copyFailed() bool {
	l, err := rl.handle()
	if err != nil {
		return false
	}
	return errors.Is(l.ReadOnly(), storage.ErrReadOnly)
}

// damaged reports whether this member's copy of rl has a range
// unreadable on every volume (storage.Log.FirstUnreadable).
func (rl *replicaLog) damaged() bool {
	l, err := rl.handle()
	if err != nil {
		return false
	}
	_, bad, err := l.FirstUnreadable()
	return err == nil && bad
}

// notLeader refuses a request for rl on this member, naming leader.
func (rl *replicaLog) notLeader(leader string) error { return rl.sh.notLeader(rl.name, leader) }

// fstate is a follower's position, on its leader.
type fstate struct {
	leo      int64     // its next offset at its last fetch
	fetched  time.Time // that fetch
	caughtUp time.Time // when it last reached the leader's end
	// gone: its fetch connection closed and it has not fetched since
	// (fetchGone). The lag check takes it out of the in-sync set when
	// fetchGone could not (another change under way, or the change
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

// callbacks are what a change under rl.mu owes others, run once it is
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

// leading reports whether this replica leads, set up. rl.mu held.
func (rl *replicaLog) leading() bool { return rl.ready && rl.meta.Leader == rl.sh.cfg.Self }

// advance moves the leader's high-water mark to the lowest next offset of
// the in-sync replicas, if the set holds at least MinInsync, and returns
// the waiters and watches it satisfied. rl.mu held.
func (rl *replicaLog) advance() callbacks {
	self := rl.sh.cfg.Self
	if !rl.leading() || len(rl.meta.ISR) < rl.sh.cfg.MinInsync {
		return callbacks{}
	}
	info, err := rl.info()
	if err != nil {
		return callbacks{}
	}
	hw := info.Next
	for _, id := range rl.meta.ISR {
		if id == self {
			continue
		}
		f := rl.fol[id]
		if f == nil {
			return callbacks{}
		}
		hw = min(hw, f.leo)
	}
	return rl.raise(hw)
}

// raise sets the high-water mark to hw if that is higher. rl.mu held.
func (rl *replicaLog) raise(hw int64) callbacks {
	if hw <= rl.hw {
		return callbacks{}
	}
	rl.hw = hw
	var c callbacks
	kept := rl.waiters[:0]
	for _, w := range rl.waiters {
		if w.end <= hw {
			c.fns = append(c.fns, func() { w.fn(nil) })
		} else {
			kept = append(kept, w)
		}
	}
	clear(rl.waiters[len(kept):])
	rl.waiters = kept
	for w := range rl.watches {
		if w.offset < hw {
			c.watches = append(c.watches, w)
			delete(rl.watches, w)
		}
	}
	return c
}

// raiseTo takes the leader's high-water mark hw as this follower's, up
// to its own next offset.
func (rl *replicaLog) raiseTo(hw, next int64) {
	rl.mu.Lock()
	calls := rl.raise(min(hw, next))
	rl.mu.Unlock()
	calls.run()
}

// failWaiters answers every waiting produce with err. rl.mu held. The
// produces waiting were written here: a change of leader (err a
// NotLeaderError) leaves their outcome unknown, since the new leader may
// hold them or not, and they are answered so (outcomeUnknown).
func (rl *replicaLog) failWaiters(err error) callbacks {
	err = outcomeUnknown(err)
	var c callbacks
	for _, w := range rl.waiters {
		c.fns = append(c.fns, func() { w.fn(err) })
	}
	clear(rl.waiters)
	rl.waiters = rl.waiters[:0]
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
// and hear of the change. rl.mu held.
func (rl *replicaLog) takeWatches() []*watch {
	ws := make([]*watch, 0, len(rl.watches))
	for w := range rl.watches {
		ws = append(ws, w)
	}
	clear(rl.watches)
	return ws
}

// stop ends what the replica does: its follower loop, its waiting
// produces (answered err) and parked consumes.
func (rl *replicaLog) stop(err error) {
	rl.mu.Lock()
	rl.halt(err)
}

// halt is stop with rl.mu held, which it releases.
func (rl *replicaLog) halt(err error) {
	rl.ready = false
	calls := rl.failWaiters(err)
	calls.watches = rl.takeWatches()
	cancel, stopped := rl.cancel, rl.stopped
	rl.cancel, rl.stopped = nil, nil
	rl.mu.Unlock()
	calls.run()
	if cancel != nil {
		cancel()
		<-stopped
	}
}
