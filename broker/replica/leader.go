package replica

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// This file: the leader's side of a replicated log, as the service asks
// it (service.Replicas, service.Followers): who takes writes, the
// acks=all wait, the high-water mark reads stop at, and the followers'
// fetches. The manager finds the log a request names once (find) and
// hands the request to it.

// Replicated implements service.Replicas.
func (a dataAPI) Replicated(topic string) bool {
	return a.m.find(topic).known || !a.m.synced.Load() // before, every topic may be: writable refuses
}

// Producing implements service.Replicas: whether topic is replicated,
// and whether this member takes the produce (writable, then, for
// acks=all, canAckAll).
func (a dataAPI) Producing(topic string, acksAll bool) (bool, error) {
	f := a.m.find(topic)
	replicated := f.known || !a.m.synced.Load()
	if err := a.m.writable(f); err != nil {
		return replicated, err
	}
	if acksAll && f.rl != nil {
		return replicated, f.rl.canAckAll(f.t)
	}
	return replicated, nil
}

// Appended implements service.Replicas.
func (a dataAPI) Appended(topic string, end int64, acksAll bool, fn func(error)) {
	f := a.m.find(topic)
	if f.rl == nil {
		if acksAll && f.known {
			fn(outcomeUnknown(a.m.notLeader(topic, ""))) // no longer a replica here, though written
			return
		}
		fn(nil)
		return
	}
	f.rl.appended(end, acksAll, fn)
}

// Readable implements service.Replicas.
func (a dataAPI) Readable(topic string) (int64, bool, error) {
	if !a.m.synced.Load() {
		return 0, true, a.m.notLeader(topic, "")
	}
	return a.m.readable(a.m.find(topic))
}

// WatchReadable implements service.Replicas.
func (a dataAPI) WatchReadable(topic string, offset int64, fn func()) (func() bool, bool) {
	return a.m.watchReadable(topic, offset, fn)
}

// writable returns nil when this member takes writes to f's topic (it
// leads it, or the topic is not replicated), else a
// *service.NotLeaderError.
func (m *Manager) writable(f found) error {
	switch {
	case !m.synced.Load():
		return m.notLeader(f.topic, "") // not known yet: ask again shortly
	case !f.known:
		return nil
	case f.rl == nil:
		return m.notLeader(f.topic, notSelf(f.t.Leader, m.cfg.Self))
	}
	return f.rl.writable(f.t)
}

// notSelf is leader, "" when it is self: a member that leads a topic it
// may not serve is asked again shortly, not named.
func notSelf(leader, self string) string {
	if leader == self {
		return ""
	}
	return leader
}

// readable is Readable of f, once the member is in step.
func (m *Manager) readable(f found) (int64, bool, error) {
	switch {
	case !f.known:
		return 0, false, nil
	case f.rl == nil:
		return 0, true, m.notLeader(f.topic, f.t.Leader)
	}
	hw, err := f.rl.readable(f.t)
	return hw, true, err
}

// watchReadable is WatchReadable.
func (m *Manager) watchReadable(topic string, offset int64, fn func()) (func() bool, bool) {
	f := m.find(topic)
	if f.rl == nil {
		return nil, false
	}
	return f.rl.watchReadable(offset, fn), true
}

// writable returns nil when this member takes writes to rl, t its Raft
// record, else a *service.NotLeaderError.
func (rl *replicaLog) writable(t cluster.Topic) error {
	if t.Leader != rl.sh.cfg.Self || !rl.sh.inContact() {
		return rl.notLeader(notSelf(t.Leader, rl.sh.cfg.Self)) // led elsewhere, or cut off from the cluster
	}
	rl.mu.Lock()
	ready, handing, others := rl.ready, rl.handing, len(rl.meta.ISR) > 1
	rl.mu.Unlock()
	if !ready || handing || rl.sh.draining.Load() {
		return rl.notLeader("") // taking the lead, or handing it off: retry shortly
	}
	if others && rl.copyFailed() {
		// The lead goes to an in-sync follower (handOver): retry shortly.
		rl.sh.Poke()
		return rl.notLeader("")
	}
	return nil
}

// ErrNotEnoughReplicas refuses a produce with acks=all.
var ErrNotEnoughReplicas = errors.New("replica: not enough in-sync replicas")

type codedErr struct {
	error
	code protocol.Code
}

func (e codedErr) WireCode() protocol.Code { return e.code }
func (e codedErr) Unwrap() error           { return e.error }

// canAckAll returns nil when a produce to rl with acks=all may be
// appended: its in-sync set (t's) holds at least the minimum, else an
// error of CodeNotEnoughReplicas.
func (rl *replicaLog) canAckAll(t cluster.Topic) error {
	if n := rl.sh.cfg.MinInsync; len(t.ISR) < n {
		return codedErr{fmt.Errorf("%w: topic %q has %d in-sync replicas, %d needed (-min-insync)", ErrNotEnoughReplicas, rl.name, len(t.ISR), n),
			protocol.CodeNotEnoughReplicas}
	}
	return nil
}

// appended hears of a batch this member appended to rl, ending before
// end: fn hears once it is committed as acksAll asks (Appended).
func (rl *replicaLog) appended(end int64, acksAll bool, fn func(error)) {
	rl.mu.Lock()
	calls := rl.advance()
	switch {
	case !acksAll && !rl.handing && !rl.sh.draining.Load():
		rl.mu.Unlock()
		calls.run()
		fn(nil)
		return
	case !rl.leading():
		leader := rl.meta.Leader
		rl.mu.Unlock()
		calls.run()
		fn(outcomeUnknown(rl.notLeader(leader))) // written here, not committed
		return
	case rl.hw >= end:
		rl.mu.Unlock()
		calls.run()
		fn(nil)
		return
	}
	rl.waiters = append(rl.waiters, &waiter{end: end, fn: fn, deadline: time.Now().Add(rl.sh.cfg.AckTimeout)})
	rl.mu.Unlock()
	calls.run()
}

// readable returns the high-water mark reads of rl stop at, or why this
// member may not serve them, t its Raft record.
func (rl *replicaLog) readable(t cluster.Topic) (int64, error) {
	self := rl.sh.cfg.Self
	if !rl.sh.inContact() || !(t.Leader == self || t.InSync(self)) {
		return 0, rl.notLeader(t.Leader)
	}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if t.Leader == self && !rl.ready {
		return 0, rl.notLeader("")
	}
	return rl.hw, nil
}

// watchReadable calls fn once rl's high-water mark passes offset, or the
// lead changes; cancel removes fn if it has not run yet.
func (rl *replicaLog) watchReadable(offset int64, fn func()) (cancel func() bool) {
	w := &watch{offset: offset, fn: fn}
	rl.mu.Lock()
	if rl.hw > offset {
		rl.mu.Unlock()
		fn()
		return func() bool { return false }
	}
	rl.watches[w] = struct{}{}
	rl.mu.Unlock()
	return func() bool {
		rl.mu.Lock()
		defer rl.mu.Unlock()
		if _, ok := rl.watches[w]; ok {
			delete(rl.watches, w)
			return true
		}
		return false
	}
}

// errFenced answers a replica request under another epoch.
func errFenced(topic string, theirs, ours int64) error {
	return &protocol.Error{Code: protocol.CodeFencedEpoch,
		Message: fmt.Sprintf("topic %q: the follower follows epoch %d, the leader leads epoch %d", topic, theirs, ours)}
}

// Fetch implements service.Followers.
func (a followerAPI) Fetch(topic, follower string, epoch, offset int64) (service.FetchAnswer, error) {
	f := a.m.find(topic)
	if f.rl == nil {
		return service.FetchAnswer{}, a.m.notLeader(topic, f.t.Leader)
	}
	return f.rl.serveFetch(f.t, follower, epoch, offset)
}

// serveFetch serves follower's fetch of rl from offset under epoch, t
// rl's Raft record: it records the follower's position, takes it into
// the in-sync set once it has caught up, and returns how to answer.
func (rl *replicaLog) serveFetch(t cluster.Topic, follower string, epoch, offset int64) (service.FetchAnswer, error) {
	if !t.IsReplica(follower) || follower == rl.sh.cfg.Self {
		return service.FetchAnswer{}, fmt.Errorf("%w: %q is not a follower of topic %q", protocol.ErrInvalidArgument, follower, rl.name)
	}
	if !rl.sh.inContact() {
		return service.FetchAnswer{}, rl.notLeader("")
	}
	l, err := rl.handle()
	if err != nil {
		return service.FetchAnswer{}, err
	}
	epochs, err := l.Epochs()
	if err != nil {
		return service.FetchAnswer{}, err
	}
	info, err := l.Info()
	if err != nil {
		return service.FetchAnswer{}, err
	}
	ans, expand, version, err := rl.recordFetch(follower, epoch, offset, info)
	if err != nil {
		return service.FetchAnswer{}, err
	}
	ans.BatchEpoch, ans.Limit = epochAt(epochs, ans.From)
	ans.Log = l
	if expand != nil {
		rl.alterISR(epoch, version, expand, "caught up", follower)
	}
	return ans, nil
}

// recordFetch records that follower holds rl's offsets before offset,
// fetching under epoch, info the leader's log now, and returns the
// answer's marks, the in-sync set to record if the fetch takes the
// follower back in (nil: none) and the record's version it is decided
// under.
func (rl *replicaLog) recordFetch(follower string, epoch, offset int64, info storage.TopicInfo) (ans service.FetchAnswer, expand []string, version int64, err error) {
	rl.mu.Lock()
	if !rl.leading() {
		leader := rl.meta.Leader
		rl.mu.Unlock()
		return ans, nil, 0, rl.notLeader(leader)
	}
	if epoch != rl.meta.Epoch {
		ours := rl.meta.Epoch
		rl.mu.Unlock()
		return ans, nil, 0, errFenced(rl.name, epoch, ours)
	}
	if offset > info.Next {
		rl.mu.Unlock()
		return ans, nil, 0, fmt.Errorf("%w: topic %q: the follower is at %d, past the leader's end %d: it must truncate first", storage.ErrOffsetOutOfRange, rl.name, offset, info.Next)
	}
	f := rl.fol[follower]
	if f == nil {
		f = &fstate{caughtUp: time.Now()}
		rl.fol[follower] = f
	}
	f.leo, f.fetched, f.gone = offset, time.Now(), false
	if offset >= info.Next {
		f.caughtUp = f.fetched
	}
	// A follower whose log ends before this one's start (retention or a
	// truncation dropped what it lacks) is sent the log from the start,
	// and starts its own there (session.fetch, restartAt).
	from := max(offset, info.Oldest)
	if !rl.meta.InSync(follower) && offset >= rl.hw && !rl.altering {
		expand = append(slices.Clone(rl.meta.ISR), follower)
		rl.altering = true
	}
	calls := rl.advance()
	ans = service.FetchAnswer{HighWater: rl.hw, Epoch: rl.meta.Epoch, From: from}
	version = rl.meta.Version
	rl.mu.Unlock()
	calls.run()
	return ans, expand, version, nil
}

// epochAt returns the epoch of the batches at offset from and how many
// messages from there belong to it (0: all the log holds), so that one
// answer never carries batches of two epochs.
func epochAt(epochs []storage.EpochStart, from int64) (epoch int64, limit int) {
	if len(epochs) > 0 && epochs[0].Start > from {
		limit = int(min(epochs[0].Start-from, 1<<31-1)) // written before any epoch was recorded
	}
	for i, e := range epochs {
		if e.Start > from {
			break
		}
		epoch = e.Epoch
		if i+1 < len(epochs) {
			limit = int(min(epochs[i+1].Start-from, 1<<31-1))
		} else {
			limit = 0
		}
	}
	return epoch, limit
}

// EpochEnd implements service.Followers.
func (a followerAPI) EpochEnd(topic string, epoch int64) (int64, int64, error) {
	l, err := a.m.leaderLog(topic)
	if err != nil {
		return 0, 0, err
	}
	return l.EpochEnd(epoch)
}

// ProducerOwners implements service.Followers.
func (a followerAPI) ProducerOwners(topic string, ids []uint64) (map[uint64]string, error) {
	l, err := a.m.leaderLog(topic)
	if err != nil {
		return nil, err
	}
	return l.ProducerOwners(ids)
}

// leaderLog returns the handle on topic's log when this member leads it,
// else a *service.NotLeaderError naming the leader of its record.
func (m *Manager) leaderLog(topic string) (*storage.Log, error) {
	f := m.find(topic)
	if f.rl == nil {
		return nil, m.notLeader(topic, f.t.Leader)
	}
	return f.rl.leaderLog(f.t)
}

// leaderLog returns the handle on rl's log when this member leads it,
// else a *service.NotLeaderError naming the leader of t, rl's record.
func (rl *replicaLog) leaderLog(t cluster.Topic) (*storage.Log, error) {
	rl.mu.Lock()
	leading := rl.leading()
	rl.mu.Unlock()
	if !leading {
		return nil, rl.notLeader(t.Leader)
	}
	return rl.handle()
}
