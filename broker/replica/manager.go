// Package replica keeps a cluster member's replicated topics: on the
// topic's leader, each follower's position, the in-sync set's changes and
// the high-water mark that acknowledges produces with acks=all and bounds
// what consumers read; on a follower, the loop that copies the leader's
// log batch for batch, truncating first to where the leader's log of its
// last epoch ends (KIP-101, KIP-279). The cluster's metadata (who leads,
// under which epoch, the in-sync set) is package cluster's Raft group;
// the data never goes through it. docs/replication.md has the design.
package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// Defaults of Config.
const (
	DefaultLagTime    = 5 * time.Second
	DefaultAckTimeout = 10 * time.Second
	DefaultFetchWait  = 500 * time.Millisecond
	DefaultFetchBytes = 4 << 20
)

// Config sets a Manager up.
type Config struct {
	// Self is this server's member ID.
	Self string
	// Replicas is how many servers a new topic lives on (-replicas).
	Replicas int
	// MinInsync is the fewest in-sync replicas a produce with acks=all
	// is taken with, and the high-water mark advances with (-min-insync).
	MinInsync int
	// LagTime: a follower that has not reached the leader's end for this
	// long leaves the in-sync set (-replica-lag-time).
	LagTime time.Duration
	// LagBytes, if over 0: a follower more than this many bytes of
	// batches behind the leader's end leaves the in-sync set too
	// (-replica-lag-bytes; default 0, off: see docs/replication.md).
	LagBytes int64
	// AckTimeout bounds how long a produce with acks=all waits for its
	// replicas (-ack-timeout); then it is answered not enough replicas.
	AckTimeout time.Duration
	// Lease: a member that has not heard from the Raft leader for this
	// long takes and serves nothing of its replicated topics. Shorter
	// than cluster's MemberTimeout, after which the others move them.
	Lease time.Duration
	// FetchWait and FetchBytes shape a follower's fetches.
	FetchWait  time.Duration
	FetchBytes int32
	// Dial returns a client of the binary port at addr (a member ID),
	// with the server's token and TLS: the follower's connection to its
	// leader.
	Dial func(addr string) (*client.Client, error)
	// ParseMember reads a server's -peers entry (host:port/http/cluster)
	// as a member, for ChangeMember.
	ParseMember func(entry string) (cluster.Member, error)
	Logger      *slog.Logger
}

// Manager serves the service's Replication calls for one member.
type Manager struct {
	cfg   Config
	node  atomic.Pointer[cluster.Node] // set by Start; the ports serve before it
	store *storage.Store
	log   *slog.Logger

	mu      sync.Mutex
	synced  bool                      // the metadata was reconciled after a Sync: until then nothing is served
	swept   bool                      // the copies of topics moved away while this member was down were deleted
	meta    map[string]cluster.Topic  // every topic of the cluster, as last reconciled
	topics  map[string]*rtopic        // those this member holds
	clients map[string]*client.Client // by leader and topic followed (follow.go)
	closed  bool

	poke chan struct{}
	done chan struct{}
	wg   sync.WaitGroup

	stats stats
}

var _ service.Replication = (*Manager)(nil)

// New returns a manager over store. Start it once the cluster node runs.
func New(store *storage.Store, cfg Config) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Replicas < 1 {
		cfg.Replicas = 1
	}
	if cfg.MinInsync < 1 {
		cfg.MinInsync = 1
	}
	if cfg.LagTime <= 0 {
		cfg.LagTime = DefaultLagTime
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = DefaultAckTimeout
	}
	if cfg.Lease <= 0 {
		cfg.Lease = cluster.DefaultMemberTimeout / 2
	}
	if cfg.FetchWait <= 0 {
		cfg.FetchWait = DefaultFetchWait
	}
	if cfg.FetchBytes <= 0 {
		cfg.FetchBytes = DefaultFetchBytes
	}
	return &Manager{cfg: cfg, store: store, log: cfg.Logger, meta: map[string]cluster.Topic{},
		topics: map[string]*rtopic{}, clients: map[string]*client.Client{},
		poke: make(chan struct{}, 1), done: make(chan struct{})}
}

// Poke asks for a reconcile with the cluster's metadata: the node's
// OnChange. It never blocks.
func (m *Manager) Poke() {
	select {
	case m.poke <- struct{}{}:
	default:
	}
}

// Start runs the manager with node, the member's part of the cluster.
func (m *Manager) Start(node *cluster.Node) {
	m.node.Store(node)
	m.wg.Go(m.run)
	m.Poke()
}

// Close stops the followers' loops and answers the produces still
// waiting for their replicas with shutting down.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	close(m.done)
	topics := make([]*rtopic, 0, len(m.topics))
	for _, rt := range m.topics {
		topics = append(topics, rt)
	}
	m.mu.Unlock()
	m.wg.Wait()
	for _, rt := range topics {
		rt.stop(m, storage.ErrClosed)
	}
	m.mu.Lock()
	for _, c := range m.clients {
		c.Close()
	}
	m.clients = nil
	m.mu.Unlock()
}

func (m *Manager) run() {
	tick := time.NewTicker(min(m.cfg.LagTime, m.cfg.AckTimeout) / 4)
	defer tick.Stop()
	// Until the member has caught up with the Raft group it cannot tell
	// a replicated topic from another, nor whether it leads one: a
	// restarted leader must not take writes the new leader never sees.
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		go func() {
			select {
			case <-m.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := m.node.Load().Sync(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-m.done:
			return
		default:
		}
	}
	m.reconcile()
	m.mu.Lock()
	m.synced = true
	m.mu.Unlock()
	m.log.Info("replica: in step with the cluster", "topics", len(m.topics))
	httpRecorded := false
	for {
		select {
		case <-m.done:
			return
		case <-m.poke:
			m.reconcile()
		case <-tick.C:
			m.reconcile()
			m.checkLag()
			if !httpRecorded {
				httpRecorded = m.recordHTTP()
			}
		}
	}
}

// recordHTTP records this member's HTTP URL as configured now where the
// Raft group holds another (cluster.Node.RecordHTTP), and reports whether
// that is done.
func (m *Manager) recordHTTP() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := m.node.Load().RecordHTTP(ctx); err != nil {
		m.log.Warn("replica: recording this member's HTTP URL", "err", err)
		return false
	}
	return true
}

// reconcile brings the topics this member holds in line with the
// cluster's metadata.
func (m *Manager) reconcile() {
	st := m.node.Load().State()
	meta := make(map[string]cluster.Topic, len(st.Topics))
	for name, t := range st.Topics {
		meta[name] = *t
	}
	m.mu.Lock()
	m.meta = meta
	var gone []*rtopic
	for name, rt := range m.topics {
		if t, ok := meta[name]; !ok || !t.IsReplica(m.cfg.Self) {
			gone = append(gone, rt)
			delete(m.topics, name)
		}
	}
	var mine []*rtopic
	for name, t := range meta {
		if !t.IsReplica(m.cfg.Self) {
			continue
		}
		rt := m.topics[name]
		if rt == nil {
			rt = &rtopic{name: name, fol: map[string]*fstate{}, watches: map[*watch]struct{}{}}
			m.topics[name] = rt
		}
		mine = append(mine, rt)
	}
	m.mu.Unlock()
	for _, rt := range gone {
		t := meta[rt.name]
		rt.stop(m, &service.NotLeaderError{Topic: rt.name, Leader: t.Leader, LeaderHTTP: m.httpOf(t.Leader)})
		m.dropCopy(rt.name, t.Name != "")
	}
	if !m.swept {
		// Copies a move took from this member while it was down.
		m.swept = true
		for _, name := range m.store.ListTopics("") {
			if t, ok := meta[name]; ok && !t.IsReplica(m.cfg.Self) {
				m.dropCopy(name, true)
			}
		}
	}
	for _, rt := range mine {
		m.apply(rt, meta[rt.name])
	}
}

// dropCopy deletes this member's copy of a replicated topic: the topic
// was deleted from the cluster, or (moved) moved to other members.
func (m *Manager) dropCopy(topic string, moved bool) {
	err := m.store.DeleteTopic(topic)
	if err != nil && !errors.Is(err, storage.ErrTopicNotFound) {
		m.log.Warn("replica: deleting a copy of a topic", "topic", topic, "moved_away", moved, "err", err)
		return
	}
	if err == nil && moved {
		m.log.Info("replica: topic moved to other members, copy deleted", "topic", topic)
	}
}

// apply acts on topic rt's metadata t: a new leader or epoch stops what
// the replica did and starts its new role.
func (m *Manager) apply(rt *rtopic, t cluster.Topic) {
	m.applyStart(rt, t.Start)
	rt.mu.Lock()
	old := rt.meta
	rt.meta = t
	if old.Epoch == t.Epoch && old.Leader == t.Leader && rt.started {
		for id := range rt.fol {
			if !t.IsReplica(id) {
				delete(rt.fol, id) // moved away
			}
		}
		calls := rt.advance(m) // the in-sync set or the replicas may have changed
		rt.mu.Unlock()
		calls.run()
		return
	}
	rt.started = true
	rt.halt(&service.NotLeaderError{Topic: rt.name, Leader: t.Leader, LeaderHTTP: m.httpOf(t.Leader)})
	if !m.store.HasTopic(rt.name) {
		if err := m.store.CreateTopic(rt.name); err != nil && !errors.Is(err, storage.ErrTopicExists) {
			m.log.Error("replica: creating a replicated topic", "topic", rt.name, "err", err)
			return
		}
	}
	switch t.Leader {
	case m.cfg.Self:
		info, err := m.store.Info(rt.name)
		if err == nil {
			err = m.store.SetEpoch(rt.name, t.Epoch, info.Next)
		}
		if err != nil {
			m.log.Error("replica: taking the lead", "topic", rt.name, "epoch", t.Epoch, "err", err)
			return
		}
		rt.mu.Lock()
		if rt.meta.Epoch == t.Epoch && rt.meta.Leader == m.cfg.Self {
			now := time.Now()
			clear(rt.fol)
			for _, id := range t.Replicas {
				if id != m.cfg.Self {
					rt.fol[id] = &fstate{caughtUp: now}
				}
			}
			rt.ready = true
			m.stats.leaderChanges.Add(1)
			m.log.Info("replica: leading", "topic", rt.name, "epoch", t.Epoch, "next", info.Next, "isr", t.ISR)
		}
		calls := rt.advance(m)
		rt.mu.Unlock()
		calls.run()
	case "":
		// No leader: nothing to copy from; reads and writes are refused.
	default:
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		rt.mu.Lock()
		rt.cancel, rt.stopped = cancel, stopped
		rt.mu.Unlock()
		go m.follow(ctx, rt, t.Leader, t.Epoch, stopped)
	}
}

// applyStart drops what replica rt holds before start, the topic's start
// in the Raft group (an admin truncation on its leader), once for each
// start. A replica that holds less keeps an empty log at its end, and its
// next fetch starts it again at the leader's start (followOnce).
func (m *Manager) applyStart(rt *rtopic, start int64) {
	rt.mu.Lock()
	done := rt.startDone
	rt.mu.Unlock()
	if start <= done {
		return
	}
	info, err := m.store.Info(rt.name)
	if err != nil {
		return // not created here yet: the next reconcile
	}
	if info.Oldest < min(start, info.Next) {
		if err := m.store.Truncate(rt.name, start); err != nil {
			m.log.Error("replica: truncating to the topic's start", "topic", rt.name, "start", start, "err", err)
			return
		}
		m.log.Info("replica: truncated to the topic's start", "topic", rt.name, "start", start, "was", info.Oldest)
	}
	rt.mu.Lock()
	rt.startDone = max(rt.startDone, start)
	rt.mu.Unlock()
}

// Truncate implements service.Replication.
func (m *Manager) Truncate(topic string, before int64) error {
	t, rt, ok := m.lookup(topic)
	if !ok {
		return fmt.Errorf("%w: %q", storage.ErrTopicNotFound, topic)
	}
	if err := m.Writable(topic); err != nil {
		return err
	}
	if rt == nil {
		return m.notLeader(topic, "") // taken up here meanwhile: ask again
	}
	rt.mu.Lock()
	epoch, hw := rt.meta.Epoch, rt.hw
	rt.mu.Unlock()
	start := min(before, hw) // every in-sync replica holds it
	if start <= t.Start {
		return m.store.Truncate(topic, t.Start) // recorded before: done here too
	}
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	n := m.node.Load()
	if n == nil {
		return errStarting
	}
	if err := n.SetStart(ctx, topic, epoch, start); err != nil {
		if errors.Is(err, cluster.ErrStaleEpoch) {
			return m.notLeader(topic, "")
		}
		return errUnrecorded("the truncation", err)
	}
	m.Poke()
	return m.store.Truncate(topic, start)
}

// httpOf returns a member's HTTP base URL.
func (m *Manager) httpOf(id string) string {
	n := m.node.Load()
	if id == "" || n == nil {
		return ""
	}
	mb, _ := n.Member(id)
	return mb.HTTP
}

// lookup returns the cluster's metadata of topic, and its replica here.
func (m *Manager) lookup(topic string) (cluster.Topic, *rtopic, bool) {
	m.mu.Lock()
	t, ok := m.meta[topic]
	rt := m.topics[topic]
	m.mu.Unlock()
	if !ok {
		// Recorded in the Raft group but not reconciled here yet: known,
		// with no replica here until the reconcile runs.
		if n := m.node.Load(); n != nil {
			if t, ok = n.Topic(topic); ok {
				m.Poke()
			}
		}
	}
	return t, rt, ok
}

// isSynced reports whether the member has caught up with the cluster.
func (m *Manager) isSynced() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.synced
}

func (m *Manager) notLeader(topic, leader string) error {
	return &service.NotLeaderError{Topic: topic, Leader: leader, LeaderHTTP: m.httpOf(leader)}
}

// inContact reports whether this member may act on its replicated topics.
func (m *Manager) inContact() bool {
	n := m.node.Load()
	return n != nil && n.InContact(m.cfg.Lease)
}

// errUnrecorded answers a change (what) the Raft group did not commit,
// err saying why: an election, most often; retry shortly.
func errUnrecorded(what string, err error) error {
	return &protocol.Error{Code: protocol.CodeShuttingDown, Message: "the cluster cannot record " + what + " now: " + err.Error()}
}

// errStarting answers what needs the cluster before this member joined it.
var errStarting = &protocol.Error{Code: protocol.CodeShuttingDown, Message: "the server is joining its cluster: retry shortly"}

// Replicated implements service.Replication.
func (m *Manager) Replicated(topic string) bool {
	_, _, ok := m.lookup(topic)
	return ok || !m.isSynced() // before, every topic may be: Writable refuses
}

// Writable implements service.Replication.
func (m *Manager) Writable(topic string) error {
	if !m.isSynced() {
		return m.notLeader(topic, "") // not known yet: ask again shortly
	}
	t, rt, ok := m.lookup(topic)
	if !ok {
		return nil
	}
	if rt == nil || t.Leader != m.cfg.Self || !m.inContact() {
		if t.Leader == m.cfg.Self {
			return m.notLeader(topic, "") // cut off from the cluster
		}
		return m.notLeader(topic, t.Leader)
	}
	rt.mu.Lock()
	ready := rt.ready
	rt.mu.Unlock()
	if !ready {
		return m.notLeader(topic, "") // taking the lead: retry shortly
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

// CanAckAll implements service.Replication.
func (m *Manager) CanAckAll(topic string) error {
	t, _, ok := m.lookup(topic)
	if !ok || len(t.ISR) >= m.cfg.MinInsync {
		return nil
	}
	return codedErr{fmt.Errorf("%w: topic %q has %d in-sync replicas, %d needed (-min-insync)", ErrNotEnoughReplicas, topic, len(t.ISR), m.cfg.MinInsync),
		protocol.CodeNotEnoughReplicas}
}

// Appended implements service.Replication.
func (m *Manager) Appended(topic string, end int64, acksAll bool, fn func(error)) {
	_, rt, ok := m.lookup(topic)
	if !ok || rt == nil {
		if acksAll && ok {
			fn(m.notLeader(topic, "")) // no longer a replica here
			return
		}
		fn(nil)
		return
	}
	rt.mu.Lock()
	calls := rt.advance(m)
	switch {
	case !acksAll:
		rt.mu.Unlock()
		calls.run()
		fn(nil)
		return
	case !rt.leading(m.cfg.Self):
		leader := rt.meta.Leader
		rt.mu.Unlock()
		calls.run()
		fn(m.notLeader(topic, leader))
		return
	case rt.hw >= end:
		rt.mu.Unlock()
		calls.run()
		fn(nil)
		return
	}
	rt.waiters = append(rt.waiters, &waiter{end: end, fn: fn, deadline: time.Now().Add(m.cfg.AckTimeout)})
	rt.mu.Unlock()
	calls.run()
}

// Readable implements service.Replication.
func (m *Manager) Readable(topic string) (int64, bool, error) {
	if !m.isSynced() {
		return 0, true, m.notLeader(topic, "")
	}
	t, rt, ok := m.lookup(topic)
	if !ok {
		return 0, false, nil
	}
	if rt == nil || !m.inContact() || !(t.Leader == m.cfg.Self || t.InSync(m.cfg.Self)) {
		return 0, true, m.notLeader(topic, t.Leader)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if t.Leader == m.cfg.Self && !rt.ready {
		return 0, true, m.notLeader(topic, "")
	}
	return rt.hw, true, nil
}

// WatchReadable implements service.Replication.
func (m *Manager) WatchReadable(topic string, offset int64, fn func()) (func() bool, bool) {
	_, rt, ok := m.lookup(topic)
	if !ok || rt == nil {
		return nil, false
	}
	w := &watch{offset: offset, fn: fn}
	rt.mu.Lock()
	if rt.hw > offset {
		rt.mu.Unlock()
		fn()
		return func() bool { return false }, true
	}
	rt.watches[w] = struct{}{}
	rt.mu.Unlock()
	return func() bool {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		if _, ok := rt.watches[w]; ok {
			delete(rt.watches, w)
			return true
		}
		return false
	}, true
}

// errFenced answers a replica request under another epoch.
func errFenced(topic string, theirs, ours int64) error {
	return &protocol.Error{Code: protocol.CodeFencedEpoch,
		Message: fmt.Sprintf("topic %q: the follower follows epoch %d, the leader leads epoch %d", topic, theirs, ours)}
}

// Fetch implements service.Replication.
func (m *Manager) Fetch(topic, follower string, epoch, offset int64) (service.FetchAnswer, error) {
	t, rt, ok := m.lookup(topic)
	if !ok || rt == nil {
		return service.FetchAnswer{}, m.notLeader(topic, t.Leader)
	}
	if !t.IsReplica(follower) || follower == m.cfg.Self {
		return service.FetchAnswer{}, fmt.Errorf("%w: %q is not a follower of topic %q", protocol.ErrInvalidArgument, follower, topic)
	}
	if !m.inContact() {
		return service.FetchAnswer{}, m.notLeader(topic, "")
	}
	epochs, err := m.store.Epochs(topic)
	if err != nil {
		return service.FetchAnswer{}, err
	}
	info, err := m.store.Info(topic)
	if err != nil {
		return service.FetchAnswer{}, err
	}
	rt.mu.Lock()
	if !rt.leading(m.cfg.Self) {
		leader := rt.meta.Leader
		rt.mu.Unlock()
		return service.FetchAnswer{}, m.notLeader(topic, leader)
	}
	if epoch != rt.meta.Epoch {
		ours := rt.meta.Epoch
		rt.mu.Unlock()
		return service.FetchAnswer{}, errFenced(topic, epoch, ours)
	}
	if offset > info.Next {
		rt.mu.Unlock()
		return service.FetchAnswer{}, fmt.Errorf("%w: topic %q: the follower is at %d, past the leader's end %d: it must truncate first", storage.ErrOffsetOutOfRange, topic, offset, info.Next)
	}
	f := rt.fol[follower]
	if f == nil {
		f = &fstate{caughtUp: time.Now()}
		rt.fol[follower] = f
	}
	f.leo, f.fetched = offset, time.Now()
	if offset >= info.Next {
		f.caughtUp = f.fetched
	}
	// A follower whose log ends before this one's start (retention or a
	// truncation dropped what it lacks) is sent the log from the start,
	// and starts its own there (followOnce).
	from := max(offset, info.Oldest)
	var expand []string
	if !rt.meta.InSync(follower) && offset >= rt.hw && !rt.altering {
		expand = append(slices.Clone(rt.meta.ISR), follower)
		rt.altering = true
	}
	calls := rt.advance(m)
	ans := service.FetchAnswer{HighWater: rt.hw, Epoch: rt.meta.Epoch, From: from}
	version := rt.meta.Version
	rt.mu.Unlock()
	calls.run()
	if len(epochs) > 0 && epochs[0].Start > from {
		ans.Limit = int(min(epochs[0].Start-from, 1<<31-1)) // written before any epoch was recorded
	}
	for i, e := range epochs {
		if e.Start > from {
			break
		}
		ans.BatchEpoch = e.Epoch
		if i+1 < len(epochs) {
			ans.Limit = int(min(epochs[i+1].Start-from, 1<<31-1))
		} else {
			ans.Limit = 0
		}
	}
	if expand != nil {
		m.alterISR(rt, epoch, version, expand, "caught up", follower)
	}
	return ans, nil
}

// EpochEnd implements service.Replication.
func (m *Manager) EpochEnd(topic string, epoch int64) (int64, int64, error) {
	t, rt, ok := m.lookup(topic)
	if !ok || rt == nil {
		return 0, 0, m.notLeader(topic, t.Leader)
	}
	rt.mu.Lock()
	leading := rt.leading(m.cfg.Self)
	rt.mu.Unlock()
	if !leading {
		return 0, 0, m.notLeader(topic, t.Leader)
	}
	return m.store.EpochEnd(topic, epoch)
}

// Ready implements service.Replication.
func (m *Manager) Ready() error {
	if !m.isSynced() {
		return errors.New("joining its cluster: not in step with the Raft group yet")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	behind := 0
	for _, t := range m.meta {
		if t.Leader != "" && t.IsReplica(m.cfg.Self) && !t.InSync(m.cfg.Self) {
			behind++
		}
	}
	if behind > 0 {
		return fmt.Errorf("catching up: not in the in-sync set of %d replicated topics", behind)
	}
	return nil
}

// GroupStats implements service.Replication.
func (m *Manager) GroupStats() map[string][]service.GroupOffset {
	m.mu.Lock()
	var led []string
	for name, t := range m.meta {
		if t.Leader == m.cfg.Self {
			led = append(led, name)
		}
	}
	m.mu.Unlock()
	out := map[string][]service.GroupOffset{}
	g := raftGroups{m}
	for _, name := range led {
		if groups, err := g.ListGroups(name); err == nil && len(groups) > 0 {
			out[name] = groups
		}
	}
	return out
}

// ChangeMember implements service.Replication.
func (m *Manager) ChangeMember(action uint8, entry string) error {
	n := m.node.Load()
	if n == nil || !m.isSynced() {
		return errStarting
	}
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	var err error
	switch action {
	case protocol.MemberAdd:
		if m.cfg.ParseMember == nil {
			return fmt.Errorf("%w: this server cannot read a member's addresses", protocol.ErrInvalidArgument)
		}
		var mb cluster.Member
		if mb, err = m.cfg.ParseMember(entry); err != nil {
			return fmt.Errorf("%w: %w", protocol.ErrInvalidArgument, err)
		}
		err = n.AddMember(ctx, mb)
	case protocol.MemberRemove:
		err = n.RemoveMember(ctx, entry)
	default:
		return fmt.Errorf("%w: cluster member action %d", protocol.ErrInvalidArgument, action)
	}
	if errors.Is(err, cluster.ErrBadCommand) || errors.Is(err, cluster.ErrNotEnoughMembers) {
		return fmt.Errorf("%w: %w", protocol.ErrInvalidArgument, err)
	}
	if err == nil {
		m.log.Info("replica: membership changed", "action", action, "entry", entry)
	}
	return err
}

// ProducerOwners implements service.Replication.
func (m *Manager) ProducerOwners(topic string, ids []uint64) (map[uint64]string, error) {
	t, rt, ok := m.lookup(topic)
	if !ok || rt == nil {
		return nil, m.notLeader(topic, t.Leader)
	}
	rt.mu.Lock()
	leading := rt.leading(m.cfg.Self)
	rt.mu.Unlock()
	if !leading {
		return nil, m.notLeader(topic, t.Leader)
	}
	return m.store.ProducerOwners(topic, ids)
}

// Create implements service.Replication.
func (m *Manager) Create(topic string) (bool, error) {
	return m.create(topic, m.cfg.Replicas, " (-replicas)")
}

// SetReplicas implements service.Replication.
func (m *Manager) SetReplicas(topic string, replicas int) (bool, error) {
	if replicas < m.cfg.MinInsync {
		return false, fmt.Errorf("%w: %d replicas for topic %q: fewer than -min-insync %d, which every acks=all produce needs", protocol.ErrInvalidArgument, replicas, topic, m.cfg.MinInsync)
	}
	n := m.node.Load()
	if n == nil {
		return false, errStarting
	}
	if _, _, ok := m.lookup(topic); !ok {
		existed, err := m.create(topic, replicas, "")
		if !existed {
			return true, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	_, err := n.SetReplicas(ctx, topic, replicas)
	switch {
	case errors.Is(err, cluster.ErrNotEnoughMembers), errors.Is(err, cluster.ErrTopicMoving):
		return false, fmt.Errorf("%w: %w", protocol.ErrInvalidArgument, err)
	case errors.Is(err, cluster.ErrTopicNotFound):
		return false, fmt.Errorf("%w: %q", storage.ErrTopicNotFound, topic)
	case err != nil:
		return false, errUnrecorded("the change", err)
	}
	m.Poke()
	return false, nil
}

// create records topic on replicas members (Create, SetReplicas); hint
// follows the error of too few members.
func (m *Manager) create(topic string, replicas int, hint string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	n := m.node.Load()
	if n == nil {
		return false, errStarting
	}
	t, err := n.CreateTopic(ctx, topic, replicas)
	existed := errors.Is(err, cluster.ErrTopicExists)
	switch {
	case existed:
	case errors.Is(err, cluster.ErrNotEnoughMembers):
		return false, fmt.Errorf("%w: %w%s", protocol.ErrInvalidArgument, err, hint)
	case err != nil:
		return false, errUnrecorded("the topic", err)
	}
	if t.Leader != m.cfg.Self {
		return existed, m.notLeader(topic, t.Leader)
	}
	// This member leads it: wait until it can take writes.
	for {
		m.Poke()
		if err := m.Writable(topic); err == nil {
			return existed, nil
		}
		select {
		case <-ctx.Done():
			return existed, m.notLeader(topic, "")
		case <-m.done:
			return existed, storage.ErrClosed
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// createTimeout bounds Create: the Raft commit and taking the lead.
const createTimeout = 10 * time.Second

// Delete implements service.Replication.
func (m *Manager) Delete(topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	n := m.node.Load()
	if n == nil {
		return errStarting
	}
	err := n.DeleteTopic(ctx, topic)
	if errors.Is(err, cluster.ErrTopicNotFound) {
		return fmt.Errorf("%w: %q", storage.ErrTopicNotFound, topic)
	}
	if err == nil {
		m.Poke()
	}
	return err
}

// ReplicaStatus is a replica's position as its leader sees it.
type ReplicaStatus struct {
	ID       string `json:"id"`
	Next     int64  `json:"next"`      // the follower's next offset at its last fetch
	Lag      int64  `json:"lag"`       // messages behind the leader's end
	InSync   bool   `json:"in_sync"`   // in the in-sync set
	CaughtUp string `json:"caught_up"` // how long ago it last reached the leader's end
}

// TopicStatus is a replicated topic as this member sees it.
type TopicStatus struct {
	cluster.Topic
	HighWater int64           `json:"high_water"`
	Next      int64           `json:"next"`               // this replica's next offset
	Followers []ReplicaStatus `json:"followers,omitzero"` // on the leader
}

// Status implements service.Replication: the cluster status of op 19.
func (m *Manager) Status() []byte {
	n := m.node.Load()
	if n == nil {
		return []byte(`{"error":"the server is joining its cluster"}`)
	}
	st := n.Status()
	out := struct {
		Self       string           `json:"self"`
		InStep     bool             `json:"in_step"` // caught up with the Raft group since it started: serving
		RaftLeader string           `json:"raft_leader"`
		Members    []cluster.Member `json:"members"`
		Topics     []TopicStatus    `json:"topics"`
	}{Self: st.Self, InStep: m.isSynced(), RaftLeader: st.RaftLeader, Members: st.Members}
	for _, t := range st.Topics {
		ts := TopicStatus{Topic: t}
		if info, err := m.store.Info(t.Name); err == nil {
			ts.Next = info.Next
		}
		if _, rt, ok := m.lookup(t.Name); ok && rt != nil {
			rt.mu.Lock()
			ts.HighWater = rt.hw
			if rt.leading(m.cfg.Self) {
				for _, id := range t.Replicas {
					if f := rt.fol[id]; f != nil {
						ts.Followers = append(ts.Followers, ReplicaStatus{ID: id, Next: f.leo, Lag: max(0, ts.Next-f.leo),
							InSync: t.InSync(id), CaughtUp: time.Since(f.caughtUp).Round(time.Millisecond).String()})
					}
				}
			}
			rt.mu.Unlock()
		}
		out.Topics = append(out.Topics, ts)
	}
	b, _ := json.Marshal(out)
	return b
}

// checkLag drops from the in-sync sets of the topics this member leads
// the followers that have not caught up for LagTime, and answers the
// produces that waited past AckTimeout.
func (m *Manager) checkLag() {
	m.mu.Lock()
	topics := make([]*rtopic, 0, len(m.topics))
	for _, rt := range m.topics {
		topics = append(topics, rt)
	}
	m.mu.Unlock()
	now := time.Now()
	for _, rt := range topics {
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

// lagBytes returns a follower of behind (ID to its next offset) more than
// LagBytes of batches behind topic's end, "" for none. It reads the
// batches' spans from the index, at most LagBytes+1 bytes' worth each.
// rt.mu is held: the index is the store's.
func (m *Manager) lagBytes(topic string, behind map[string]int64) string {
	if len(behind) == 0 {
		return ""
	}
	info, err := m.store.Info(topic)
	if err != nil {
		return ""
	}
	for id, leo := range behind {
		if leo >= info.Next {
			continue
		}
		r, err := m.store.Peek(topic, leo, 0, m.cfg.LagBytes+1)
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
		ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
		defer cancel()
		go func() {
			select {
			case <-m.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := m.node.Load().SetISR(ctx, rt.name, epoch, version, isr)
		rt.mu.Lock()
		rt.altering = false
		rt.mu.Unlock()
		if err != nil {
			if !errors.Is(err, cluster.ErrStaleEpoch) {
				m.log.Warn("replica: changing the in-sync set", "topic", rt.name, "isr", isr, "err", err)
			}
			return
		}
		m.stats.isrChanges.Add(1)
		m.log.Info("replica: in-sync set changed", "topic", rt.name, "member", who, "why", why, "isr", isr)
		m.Poke()
	})
}

// Stats implements service.Replication.
func (m *Manager) Stats() service.ReplicationStats {
	st := service.ReplicationStats{LeaderChanges: m.stats.leaderChanges.Load(), ISRChanges: m.stats.isrChanges.Load(),
		Truncations: m.stats.truncations.Load(), FetchedBytes: m.stats.fetchedBytes.Load()}
	m.mu.Lock()
	topics := make([]*rtopic, 0, len(m.topics))
	for _, rt := range m.topics {
		topics = append(topics, rt)
	}
	m.mu.Unlock()
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
			info, err := m.store.Info(rt.name)
			for i := range fols {
				from := fols[i].Messages
				fols[i].Messages = max(0, info.Next-from)
				if err == nil && fols[i].Messages > 0 {
					if r, rerr := m.store.Peek(rt.name, from, 0, 1<<62); rerr == nil {
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
