package replica

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/haraqa/haraqa/broker/peer"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// This file: a follower's fetch session with one leader. Every topic a
// member follows from a leader (up to protocol.MaxReplicaWaitTopics a
// session; more open another) is copied over one connection: the
// session's loop waits on all of them at once (replica wait, op 24),
// which the leader answers as soon as any has something, then fetches
// those holding batches (replica fetch, op 17, no wait), several at a
// time, pipelined on the same connection, and starts over. A leader
// answers a connection's requests in order, so the loop never has a
// request parked while another is due: a fetch parked at an idle topic's
// end cannot hold back a busy one, as it would if each topic's fetch
// parked on a shared connection. The connection's closing drops the
// follower from the in-sync sets of all its topics at once, as a
// connection per topic did; a topic that leaves while the others stay is
// named with the leave flag in the next wait, to the same effect.

// Pauses before a topic, or the session's connection, is tried again
// after an error: doubled on each failure up to the most.
const (
	minRetryPause = 20 * time.Millisecond
	maxRetryPause = time.Second
)

// fetchParallel bounds the fetches a session has in flight: each may
// carry up to Config.FetchBytes of batches, into a buffer of its own.
const fetchParallel = 8

// maxFetchRounds bounds the fetches of one topic between two waits:
// the others wait meanwhile.
const maxFetchRounds = 4

// session copies the topics this member follows from one leader.
type session struct {
	m      *Manager
	leader string
	ctx    context.Context // ends when the manager closes
	cancel context.CancelFunc
	wake   chan struct{} // the topics changed
	done   chan struct{} // closed when run returned

	mu      sync.Mutex
	gen     int64              // counts the changes of topics and left
	waiting bool               // a wait is in flight: a change cuts it (cut)
	topics  map[string]*ftopic // by name
	left    map[string]bool    // topics the leader is to hear leave with the next wait
	closing bool               // run is ending: no topic joins
	c       *peer.Conn         // run's; here so that Close can reach it

	bufs [fetchParallel][]byte // run's: the fetches' buffers
}

// ftopic is a topic a session copies.
type ftopic struct {
	rl    *replicaLog
	epoch int64
	ctx   context.Context // ends when the topic is no longer followed so

	// busy is held while the session works on the topic; leave takes it
	// to know the session is done with it.
	busy sync.Mutex
	gone bool // left the session; busy held

	// The rest is the session loop's, under busy.
	ready   bool      // repaired and truncated since the last error
	retryAt time.Time // when a topic not ready is set up again
	pause   time.Duration
	hw      int64           // the leader's high-water mark as last heard
	asked   map[uint64]bool // producers whose owners the leader was asked for (bindOwners)
}

// join adds rl, followed at epoch until ctx ends, to a session
// with leader, starting one if none has room. It returns nil once the
// manager is closed.
func (m *Manager) join(ctx context.Context, leader string, rl *replicaLog, epoch int64) (*session, *ftopic) {
	ft := &ftopic{rl: rl, epoch: epoch, ctx: ctx, pause: minRetryPause}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, nil
	}
	for _, s := range m.sessions[leader] {
		s.mu.Lock()
		if !s.closing && len(s.topics) < protocol.MaxReplicaWaitTopics {
			s.topics[rl.name] = ft
			delete(s.left, rl.name) // followed on: nothing to tell
			cut := s.changedLocked()
			s.mu.Unlock()
			s.poke()
			cut()
			return s, ft
		}
		s.mu.Unlock()
	}
	s := &session{m: m, leader: leader, wake: make(chan struct{}, 1), done: make(chan struct{}),
		topics: map[string]*ftopic{rl.name: ft}, left: map[string]bool{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	m.sessions[leader] = append(m.sessions[leader], s)
	m.sessWG.Go(s.run)
	return s, ft
}

// leave takes ft out of the session once the session is done with it;
// the leader hears it with the next wait, or from the connection's
// closing.
func (s *session) leave(ft *ftopic) {
	ft.busy.Lock()
	ft.gone = true
	ft.busy.Unlock()
	s.mu.Lock()
	cut := func() {}
	if s.topics[ft.rl.name] == ft {
		delete(s.topics, ft.rl.name)
		s.left[ft.rl.name] = true
		cut = s.changedLocked()
	}
	s.mu.Unlock()
	s.poke()
	cut()
}

// changedLocked records a change of the session's topics and returns
// what cuts the wait in flight, if any, so that the change is sent
// without waiting up to FetchWait: a ping behind the wait, which the
// leader answers at once when a request follows it (protocol op 24). s.mu
// is held; the caller runs the function returned once it is released.
func (s *session) changedLocked() func() {
	s.gen++
	c := s.c
	if !s.waiting || c == nil {
		return func() {}
	}
	s.waiting = false // one ping a wait
	return func() {
		go func() {
			ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
			defer cancel()
			_ = c.Ping(ctx)
		}()
	}
}

func (s *session) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// sleep waits d, or until the topics change or the session ends.
func (s *session) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.wake:
	case <-s.ctx.Done():
	}
}

// snapshot returns the session's topics and those to tell the leader
// left, or ends the session (ok false) when it has no topic left: its
// connection's closing tells the leader of them all.
func (s *session) snapshot() (topics []*ftopic, left []string, gen int64, ok bool) {
	m := s.m
	m.mu.Lock()
	s.mu.Lock()
	defer m.mu.Unlock()
	defer s.mu.Unlock()
	if len(s.topics) == 0 || s.ctx.Err() != nil {
		s.closing = true
		for i, o := range m.sessions[s.leader] {
			if o == s {
				m.sessions[s.leader] = append(m.sessions[s.leader][:i:i], m.sessions[s.leader][i+1:]...)
				break
			}
		}
		if len(m.sessions[s.leader]) == 0 {
			delete(m.sessions, s.leader)
		}
		return nil, nil, 0, false
	}
	for _, ft := range s.topics {
		topics = append(topics, ft)
	}
	for name := range s.left {
		if len(left)+len(topics) >= protocol.MaxReplicaWaitTopics {
			break // the rest with the next wait
		}
		left = append(left, name)
		delete(s.left, name)
	}
	return topics, left, s.gen, true
}

// setClient sets the session's connection, closing the one before.
func (s *session) setClient(c *peer.Conn) {
	s.mu.Lock()
	old := s.c
	s.c = c
	s.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

// run is the session's loop: connect, set up the topics that need it,
// wait on all, fetch the ready ones; until no topic is left.
func (s *session) run() {
	defer close(s.done)
	defer s.setClient(nil)
	defer s.cancel()
	m := s.m
	pause := minRetryPause
	var c *peer.Conn
	for {
		topics, left, gen, ok := s.snapshot()
		if !ok {
			return
		}
		if c == nil {
			var err error
			if c, err = m.cfg.Dial(s.ctx, s.leader); err != nil {
				m.log.Debug("replica: connecting to the leader", "leader", s.leader, "err", err)
				s.sleep(pause)
				pause = min(2*pause, maxRetryPause)
				continue
			}
			s.setClient(c)
			for _, ft := range topics {
				ft.busy.Lock()
				ft.ready = false // set up again on the new connection
				ft.busy.Unlock()
			}
		}
		err := s.round(c, topics, left, gen)
		if s.ctx.Err() != nil {
			continue // snapshot ends it
		}
		if err != nil {
			// The connection broke, or the leader refused the wait: a
			// new connection, after a pause. The old one's closing drops
			// this member from the in-sync sets of its topics there.
			m.log.Debug("replica: following", "leader", s.leader, "topics", len(topics), "err", err)
			c = nil
			s.setClient(nil)
			s.mu.Lock()
			for _, name := range left {
				s.left[name] = true // the new connection knows none of the topics; harmless to repeat
			}
			s.mu.Unlock()
			s.sleep(pause)
			pause = min(2*pause, maxRetryPause)
			continue
		}
		pause = minRetryPause
	}
}

// round sets up the topics due, waits on those set up and fetches the
// ready ones. It returns an error when the connection is no longer
// usable.
func (s *session) round(c *peer.Conn, topics []*ftopic, left []string, gen int64) error {
	m := s.m
	wait, waiting, due, err := s.prepare(c, topics)
	if err != nil {
		return err
	}
	for _, name := range left {
		wait = append(wait, protocol.ReplicaWaitTopic{Epoch: 1, Flags: protocol.ReplicaWaitLeave, Topic: []byte(name)})
	}
	maxWait := m.cfg.FetchWait
	if !due.IsZero() {
		maxWait = max(0, min(maxWait, time.Until(due)))
	}
	if len(wait) == 0 {
		s.sleep(maxWait)
		return nil
	}
	if len(waiting) == 0 {
		maxWait = 0 // only topics that left: nothing to wait for
	}
	maxWait = s.beginWait(gen, maxWait)
	defer s.endWait()
	if len(waiting) == 1 && len(left) == 0 {
		// One topic: its fetch parks at its end, which holds back no
		// other, and a batch costs one round trip rather than two (the
		// wait's, then the fetch's).
		return s.fetch(c, waiting[0], protocol.ReplicaWaitReady{Fetch: true, HighWater: wait[0].HighWater}, &s.bufs[0], maxWait)
	}
	ready, err := c.ReplicaWait(s.ctx, peer.ReplicaWait{Follower: m.cfg.Self, Wait: maxWait, Topics: wait})
	if err != nil {
		return err
	}
	return s.fetchReady(c, ready, waiting)
}

// prepare sets up the topics due and returns the wait's entries for
// those ready (waiting, in the same order) and when the earliest set-up
// still to come is due (zero if none). It returns an error when the
// connection is no longer usable.
func (s *session) prepare(c *peer.Conn, topics []*ftopic) (wait []protocol.ReplicaWaitTopic, waiting []*ftopic, due time.Time, err error) {
	now := time.Now()
	for _, ft := range topics {
		ft.busy.Lock()
		if !ft.gone && !ft.ready && !now.Before(ft.retryAt) {
			if err := s.setup(c, ft); err != nil {
				s.failed(ft, err)
				if isConnErr(err) {
					ft.busy.Unlock()
					return nil, nil, time.Time{}, err
				}
			}
		}
		switch {
		case ft.gone:
		case !ft.ready:
			if due.IsZero() || ft.retryAt.Before(due) {
				due = ft.retryAt
			}
		default:
			info, err := ft.rl.info()
			if err != nil {
				s.failed(ft, err)
				break
			}
			wait = append(wait, protocol.ReplicaWaitTopic{Epoch: ft.epoch, Offset: info.Next, HighWater: ft.hw, Topic: []byte(ft.rl.name)})
			waiting = append(waiting, ft)
		}
		ft.busy.Unlock()
	}
	return wait, waiting, due, nil
}

// beginWait marks a wait of up to maxWait in flight, so that a change of
// the topics cuts it (changedLocked), and returns how long it may last:
// not at all when the topics changed since the snapshot of gen.
func (s *session) beginWait(gen int64, maxWait time.Duration) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != gen {
		maxWait = 0 // the topics changed since the snapshot: round again soon
	}
	s.waiting = maxWait > 0
	return maxWait
}

// endWait marks the wait over: a change no longer cuts it.
func (s *session) endWait() {
	s.mu.Lock()
	s.waiting = false
	s.mu.Unlock()
}

// fetchReady fetches the topics a wait answered ready, waiting indexed
// by their entries, fetchParallel at a time, each stripe into a buffer
// of its own; a topic whose mark alone moved takes it. It returns an
// error when the connection is no longer usable.
func (s *session) fetchReady(c *peer.Conn, ready []protocol.ReplicaWaitReady, waiting []*ftopic) error {
	var wg sync.WaitGroup
	var connErr error
	var mu sync.Mutex
	for k := range fetchParallel {
		if k >= len(ready) {
			break
		}
		wg.Go(func() {
			for j := k; j < len(ready); j += fetchParallel {
				r := ready[j]
				if int(r.Index) >= len(waiting) {
					continue // a leave entry: nothing to fetch
				}
				if err := s.fetch(c, waiting[r.Index], r, &s.bufs[k], 0); err != nil {
					mu.Lock()
					connErr = err
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return connErr
}

// setup readies ft for fetching: a copy that turned read-only stays out
// (and the leader hears it leave), a range unreadable on every volume is
// cut, and the log is cut back to where the leader's log of its last
// epoch ends. ft.busy is held.
func (s *session) setup(c *peer.Conn, ft *ftopic) error {
	l, err := ft.rl.handle()
	if err != nil {
		return err
	}
	if err := l.ReadOnly(); err != nil {
		return err
	}
	if err := ft.rl.repair(l); err != nil {
		return err
	}
	if err := ft.rl.truncate(ft.ctx, c, l); err != nil {
		return err
	}
	ft.ready = true
	ft.asked = map[uint64]bool{}
	return nil
}

// failed takes ft out of the waits until a pause has passed; it is set
// up again then. A copy that turned read-only fetches no more: the
// leader hears it leave, and drops it from the in-sync set at once, not
// after the lag time, which acks=all would wait for. ft.busy is held.
func (s *session) failed(ft *ftopic, err error) {
	ft.ready = false
	ft.retryAt = time.Now().Add(ft.pause)
	ft.pause = min(2*ft.pause, maxRetryPause)
	if ft.gone || ft.ctx.Err() != nil {
		return
	}
	if errors.Is(err, storage.ErrReadOnly) {
		s.mu.Lock()
		if s.topics[ft.rl.name] == ft {
			s.left[ft.rl.name] = true
		}
		s.mu.Unlock()
	}
	s.m.log.Debug("replica: following", "topic", ft.rl.name, "leader", s.leader, "epoch", ft.epoch, "err", err)
}

// fetch serves a ready topic: fetches and stores its batches (r.Fetch),
// the first fetch parked at the log's end for up to wait (a session of
// one topic), or takes the leader's new high-water mark. It returns an error only
// when the connection is no longer usable; a topic's own error takes it
// out of the waits (failed).
func (s *session) fetch(c *peer.Conn, ft *ftopic, r protocol.ReplicaWaitReady, buf *[]byte, wait time.Duration) error {
	m := s.m
	ft.busy.Lock()
	defer ft.busy.Unlock()
	if ft.gone || !ft.ready {
		return nil
	}
	name := ft.rl.name
	l, err := ft.rl.handle()
	if err != nil {
		s.failed(ft, err)
		return nil
	}
	info, err := l.Info()
	if err != nil {
		s.failed(ft, err)
		return nil
	}
	hw, next := r.HighWater, info.Next
	// A fetch whose answer shows the leader holding more is followed by
	// another at once, up to maxFetchRounds: a busy topic then costs a
	// round trip a fetch, as a fetch parked at its end did, rather than
	// two (the wait's and the fetch's). Its offset tells the leader what
	// the last one stored, as the wait would.
	for round := 0; r.Fetch && round < maxFetchRounds; round++ {
		f, err := c.ReplicaFetch(ft.ctx, peer.ReplicaFetch{Topic: name, Follower: m.cfg.Self, Epoch: ft.epoch,
			Offset: next, MaxBytes: m.cfg.FetchBytes, Wait: wait, Buf: buf})
		wait = 0
		if err == nil && len(f.Batches) > 0 {
			next, err = ft.rl.storeFetched(ft.ctx, c, l, f, ft.asked)
			m.stats.fetchedBytes.Add(int64(len(f.Batches)))
		}
		// An answer larger than FetchBytes (its first batch was) leaves a
		// buffer not worth keeping.
		if cap(*buf) > int(m.cfg.FetchBytes)+1<<20 {
			*buf = nil
		}
		if err != nil {
			s.failed(ft, err)
			if isConnErr(err) && ft.ctx.Err() == nil {
				return err
			}
			return nil
		}
		hw = f.HighWater
		ft.rl.raiseTo(hw, next)
		if len(f.Batches) == 0 || f.NextOffset <= next {
			break
		}
	}
	ft.hw, ft.pause = hw, minRetryPause
	ft.rl.raiseTo(hw, next)
	return nil
}

// isConnErr reports whether err leaves a peer connection unusable.
func isConnErr(err error) bool {
	return errors.Is(err, peer.ErrConnection) || errors.Is(err, peer.ErrClosed)
}

// closeSessions ends every session once its topics have left (Close),
// and waits for their loops.
func (m *Manager) closeSessions() {
	m.mu.Lock()
	var all []*session
	for _, ss := range m.sessions {
		all = append(all, ss...)
	}
	m.mu.Unlock()
	for _, s := range all {
		s.cancel()
	}
	m.sessWG.Wait()
}
