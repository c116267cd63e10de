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
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/broker/peer"
	"github.com/haraqa/haraqa/broker/service"
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
	// LeaderBalance: a topic's first replica that has been in sync this
	// long while this member leads takes the lead back (handOver;
	// -leader-balance; 0: never).
	LeaderBalance time.Duration
	// FetchWait and FetchBytes shape a follower's fetches.
	FetchWait  time.Duration
	FetchBytes int32
	// Dial returns a connection (package peer) to the binary port at
	// addr (a member ID), with the server's token and TLS: the
	// follower's connection to its leader. It gives up when ctx ends (the follower stops following
	// that leader), and should not retry: the follower's loop does.
	Dial func(ctx context.Context, addr string) (*peer.Conn, error)
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

	mu     sync.Mutex
	synced bool                     // the metadata was reconciled after a Sync: until then nothing is served
	swept  bool                     // the copies of topics moved away while this member was down were deleted
	meta   map[string]cluster.Topic // every topic of the cluster, as last reconciled
	topics map[string]*rtopic       // those this member holds
	// sessions: by leader, the sessions that copy the topics this
	// member follows from it (session.go); sessWG waits for their loops.
	sessions map[string][]*session
	sessWG   sync.WaitGroup
	closed   bool
	// bootLead: the epochs of the replicated topics the cluster had this
	// member lead when it started, which it leads again only under a new
	// one (relead); releading: those it is asking for one.
	bootLead  map[string]int64
	releading map[string]bool
	// stepping: the replicated topics whose in-sync set this member is
	// leaving since it started (stepBack): it restarted after a crash, or
	// recovery found part of its copy unreadable. It leads none of them
	// until that is recorded. repairing: the topics whose copy had a range
	// unreadable on every volume at the start, until it is back in sync.
	stepping  map[string]bool
	repairing map[string]bool

	// draining: the member is stopping (Drain): produces are refused, and
	// those appended meanwhile wait for the followers whatever their acks.
	draining atomic.Bool

	poke chan struct{}
	done chan struct{}
	wg   sync.WaitGroup

	stats stats
}

var (
	_ service.Replicas      = (*Manager)(nil)
	_ service.ReplicaGroups = (*Manager)(nil)
	_ service.Followers     = (*Manager)(nil)
	_ service.ClusterAdmin  = (*Manager)(nil)
	_ service.ClusterView   = (*Manager)(nil)
)

// Replication returns m as each of the service's audiences asks it
// (service.Config.Replication).
func (m *Manager) Replication() service.Replication {
	return service.Replication{Replicas: m, Groups: m, Followers: m, Admin: m, View: m}
}

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
		bootLead: map[string]int64{}, releading: map[string]bool{},
		stepping: map[string]bool{}, repairing: map[string]bool{},
		topics: map[string]*rtopic{}, sessions: map[string][]*session{},
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
	m.mu.Unlock()
	topics := m.held()
	m.wg.Wait()
	for _, rt := range topics {
		rt.stop(m, storage.ErrClosed)
	}
	m.closeSessions()
}

func (m *Manager) run() {
	tick := time.NewTicker(min(m.cfg.LagTime, m.cfg.AckTimeout) / 4)
	defer tick.Stop()
	// Until the member has caught up with the Raft group it cannot tell
	// a replicated topic from another, nor whether it leads one: a
	// restarted leader must not take writes the new leader never sees.
	for {
		ctx, cancel := m.untilClosed(time.Second)
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
			m.handOver(time.Now()) // a move's target may be in sync now
		case <-tick.C:
			m.reconcile()
			m.checkLag()
			m.handOver(time.Now())
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
		m.noteBoot(meta)
		// Copies a move took from this member while it was down.
		m.swept = true
		for _, name := range m.store.ListTopics("") {
			if t, ok := meta[name]; ok && !t.IsReplica(m.cfg.Self) {
				m.dropCopy(name, true)
			}
		}
	}
	m.mu.Lock()
	for name := range m.repairing {
		// Repaired: cut at its hole (session.setup), caught up and taken
		// back into the in-sync set after it stepped back.
		if t, ok := meta[name]; !ok || (t.InSync(m.cfg.Self) && !m.stepping[name] && !m.damaged(name)) {
			delete(m.repairing, name)
		}
	}
	m.mu.Unlock()
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
	if t.Leader == m.cfg.Self && m.mustRelead(rt.name, t) {
		rt.mu.Unlock()
		return
	}
	rt.started = true
	rt.handing, rt.preferredSince = false, time.Time{}
	rt.halt(&service.NotLeaderError{Topic: rt.name, Leader: t.Leader, LeaderHTTP: m.httpOf(t.Leader)})
	if !m.store.HasTopic(rt.name) {
		if err := m.store.CreateTopic(rt.name); err != nil && !errors.Is(err, storage.ErrTopicExists) {
			m.log.Error("replica: creating a replicated topic", "topic", rt.name, "err", err)
			return
		}
	}
	switch t.Leader {
	case m.cfg.Self:
		l, err := m.store.Log(rt.name)
		var info storage.TopicInfo
		if err == nil {
			info, err = l.Info()
		}
		if err == nil {
			err = l.SetEpoch(t.Epoch, info.Next)
		}
		if err != nil && !m.copyFailed(rt.name) {
			m.log.Error("replica: taking the lead", "topic", rt.name, "epoch", t.Epoch, "err", err)
			return
		}
		// A copy that turned read-only may fail to record the epoch; it
		// takes no batch under it, and hands the lead on (handOver).
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

// mustRelead reports whether this member must not lead topic t under its
// epoch: the cluster had it lead under that epoch when it started. Its
// log may then end before what its followers copied (batches in its page
// cache, not yet fsynced, lost with its machine), and batches it took at
// the same offsets under the same epoch would contradict theirs: a
// follower that fetched from past them would keep its own. It asks for
// the lead under a new epoch instead (relead), as Kafka's controller
// elects every leader under a new one; its followers then cut their logs
// back to its end of the old epoch before they copy on (KIP-101). Until
// then it takes no batch (writable: not ready).
func (m *Manager) mustRelead(topic string, t cluster.Topic) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stepping[topic] {
		return true // not until this member is out of the in-sync set (stepBack)
	}
	epoch, ok := m.bootLead[topic]
	if !ok {
		return false
	}
	if epoch != t.Epoch {
		delete(m.bootLead, topic)
		return false
	}
	if !m.releading[topic] && !m.closed {
		m.releading[topic] = true
		m.wg.Add(1)
		go m.relead(topic, t)
	}
	return true
}

// noteBoot, at the first reconcile after the start, notes what this
// member may not do with the replicated topics it holds a copy of (meta:
// the metadata then). If the store's last stop was not clean (a crash, a
// kill -9, a power loss), or recovery found a range of a copy corrupted on
// every volume, that copy may lack batches the in-sync replicas hold and
// acknowledged: it leaves the in-sync set of each such topic (stepBack,
// KIP-966; where it is the last of the set, the set goes to the replica
// that stepped back holding the most), and leads none of them before. A
// damaged copy is cut before its first unreadable offset and copied again
// from the leader (session.setup). The topics it led under an epoch it
// still holds after that are led again only under a new epoch (relead).
func (m *Manager) noteBoot(meta map[string]cluster.Topic) {
	clean := m.store.CleanStart()
	var step []cluster.LogEnd
	m.mu.Lock()
	for name, t := range meta {
		// A copy created since the start holds nothing lost.
		if len(t.Replicas) < 2 || !t.IsReplica(m.cfg.Self) || !m.store.HasTopic(name) {
			continue
		}
		l, err := m.store.Log(name)
		if err != nil {
			continue
		}
		_, damaged, err := l.FirstUnreadable()
		if err != nil {
			continue
		}
		if damaged {
			m.repairing[name] = true
		}
		if (!clean || damaged) && t.InSync(m.cfg.Self) {
			end, err := m.logEnd(name)
			if err != nil {
				m.log.Error("replica: reading a copy's end after a restart", "topic", name, "err", err)
				continue
			}
			m.stepping[name] = true
			step = append(step, end)
		}
		if t.Leader == m.cfg.Self {
			m.bootLead[name] = t.Epoch
		}
	}
	if len(step) > 0 && !m.closed {
		slices.SortFunc(step, func(a, b cluster.LogEnd) int { return strings.Compare(a.Topic, b.Topic) })
		m.wg.Add(1)
		go m.stepBack(step, clean)
	}
	m.mu.Unlock()
}

// logEnd returns where this replica's log of topic ends: the last epoch
// it holds batches of (0: none recorded) and its next offset.
func (m *Manager) logEnd(topic string) (cluster.LogEnd, error) {
	l, err := m.store.Log(topic)
	if err != nil {
		return cluster.LogEnd{}, err
	}
	info, err := l.Info()
	if err != nil {
		return cluster.LogEnd{}, err
	}
	epochs, err := l.Epochs()
	if err != nil {
		return cluster.LogEnd{}, err
	}
	end := cluster.LogEnd{Topic: topic, End: info.Next}
	if len(epochs) > 0 {
		end.Epoch = epochs[len(epochs)-1].Epoch
	}
	return end, nil
}

// stepBack takes this member out of the in-sync sets of topics, its
// logs' ends (cluster.Node.StepBack), trying again until that is
// recorded or the manager closes, then lets it lead them again (once
// back in the in-sync set, or when it is the replica that the last
// member stepping back found holding the most).
func (m *Manager) stepBack(topics []cluster.LogEnd, clean bool) {
	defer m.wg.Done()
	m.log.Warn("replica: leaving the in-sync sets of the replicated topics whose copy here may lack acknowledged batches, until it has caught up",
		"clean_stop", clean, "topics", len(topics))
	pause := 50 * time.Millisecond
	for {
		ctx, cancel := m.untilClosed(createTimeout)
		err := m.node.Load().StepBack(ctx, topics)
		cancel()
		if err == nil {
			break
		}
		m.log.Warn("replica: leaving the in-sync sets after a restart", "err", err)
		select {
		case <-m.done:
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
	m.mu.Lock()
	for _, e := range topics {
		delete(m.stepping, e.Topic)
	}
	m.mu.Unlock()
	m.Poke()
}

// damaged reports whether this member's copy of topic has a range
// unreadable on every volume (storage.Log.FirstUnreadable).
func (m *Manager) damaged(topic string) bool {
	l, err := m.store.Log(topic)
	if err != nil {
		return false
	}
	_, bad, err := l.FirstUnreadable()
	return err == nil && bad
}

// untilClosed returns a context that ends after d, or once the manager
// is closed.
func (m *Manager) untilClosed(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	go func() {
		select {
		case <-m.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// relead asks the Raft group for topic t's lead under its next epoch,
// then has the manager apply the outcome (a failure is asked again on the
// next reconcile).
func (m *Manager) relead(topic string, t cluster.Topic) {
	defer m.wg.Done()
	ctx, cancel := m.untilClosed(createTimeout)
	defer cancel()
	isr := append([]string{m.cfg.Self}, slices.DeleteFunc(slices.Clone(t.ISR), func(id string) bool { return id == m.cfg.Self })...)
	var err error
	if n := m.node.Load(); n == nil {
		err = errStarting
	} else {
		err = n.SetLeader(ctx, topic, t.Epoch, t.Version, m.cfg.Self, isr)
	}
	m.mu.Lock()
	delete(m.releading, topic)
	m.mu.Unlock()
	switch {
	case err == nil:
		m.log.Info("replica: leading again after a restart, under a new epoch", "topic", topic, "was", t.Epoch)
	case errors.Is(err, cluster.ErrStaleEpoch):
		// The topic moved on meanwhile (a failover): the next reconcile
		// applies that.
	default:
		m.log.Warn("replica: asking to lead again after a restart, under a new epoch", "topic", topic, "epoch", t.Epoch, "err", err)
	}
	m.Poke()
}

// applyStart drops what replica rt holds before start, the topic's start
// in the Raft group (an admin truncation on its leader), once for each
// start. A replica that holds less keeps an empty log at its end, and its
// next fetch starts it again at the leader's start (restartAt).
func (m *Manager) applyStart(rt *rtopic, start int64) {
	rt.mu.Lock()
	done := rt.startDone
	rt.mu.Unlock()
	if start <= done {
		return
	}
	l, err := m.store.Log(rt.name)
	if err != nil {
		return // not created here yet: the next reconcile
	}
	info, err := l.Info()
	if err != nil {
		return
	}
	if info.Oldest < min(start, info.Next) {
		if err := l.Truncate(start); err != nil {
			m.log.Error("replica: truncating to the topic's start", "topic", rt.name, "start", start, "err", err)
			return
		}
		m.log.Info("replica: truncated to the topic's start", "topic", rt.name, "start", start, "was", info.Oldest)
	}
	rt.mu.Lock()
	rt.startDone = max(rt.startDone, start)
	rt.mu.Unlock()
}

// Truncatable implements service.ClusterAdmin.
func (m *Manager) Truncatable(topic string) (int64, bool, error) {
	if !m.Replicated(topic) {
		return 0, false, nil
	}
	if err := m.writable(topic); err != nil {
		return 0, true, err
	}
	hw, _, err := m.Readable(topic)
	return hw, true, err
}

// Truncate implements service.ClusterAdmin.
func (m *Manager) Truncate(topic string, before int64) error {
	t, rt, ok := m.lookup(topic)
	if !ok {
		return fmt.Errorf("%w: %q", storage.ErrTopicNotFound, topic)
	}
	if err := m.writable(topic); err != nil {
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
		return m.truncateHere(topic, t.Start) // recorded before: done here too
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
	return m.truncateHere(topic, start)
}

// truncateHere truncates this replica's log of topic before offset.
func (m *Manager) truncateHere(topic string, before int64) error {
	l, err := m.store.Log(topic)
	if err != nil {
		return err
	}
	return l.Truncate(before)
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

// Ready implements service.ClusterView.
func (m *Manager) Ready() error {
	if !m.isSynced() {
		return errors.New("joining its cluster: not in step with the Raft group yet")
	}
	m.mu.Lock()
	var behind []string
	for _, t := range m.meta {
		if t.Leader != "" && t.IsReplica(m.cfg.Self) && !t.InSync(m.cfg.Self) {
			behind = append(behind, t.Name)
		}
	}
	m.mu.Unlock()
	failed := 0
	for _, name := range behind {
		if m.copyFailed(name) {
			failed++
		}
	}
	switch {
	case failed > 0:
		return fmt.Errorf("%d replicated topics' copies here turned read-only after a failed write or fsync: restart the server once its disk is sound", failed)
	case len(behind) > 0:
		return fmt.Errorf("catching up: not in the in-sync set of %d replicated topics", len(behind))
	}
	return nil
}

// GroupStats implements service.ClusterView.
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

// info returns the offsets and size of topic's log here: for a caller
// that asks nothing else of the log.
func (m *Manager) info(topic string) (storage.TopicInfo, error) {
	l, err := m.store.Log(topic)
	if err != nil {
		return storage.TopicInfo{}, err
	}
	return l.Info()
}
