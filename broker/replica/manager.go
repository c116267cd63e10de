// Package replica keeps a cluster member's replicated topics: on the
// topic's leader, each follower's position, the in-sync set's changes and
// the high-water mark that acknowledges produces with acks=all and bounds
// what consumers read; on a follower, the loop that copies the leader's
// log batch for batch, truncating first to where the leader's log of its
// last epoch ends (KIP-101, KIP-279). The cluster's metadata (who leads,
// under which epoch, the in-sync set) is package cluster's Raft group;
// the data never goes through it. docs/replication.md has the design.
//
// Each replicated log this member holds is a replicaLog (replicalog.go),
// which owns that log's state and logic: its storage handle, high-water
// mark, waiting produces and parked consumes, followers' positions and
// in-sync changes (leader.go, lag.go), lead hand-overs (handover.go),
// truncation, the copy of its leader's log (follow.go) and the role its
// Raft record gives it (apply.go). The Manager is their registry: it
// creates and retires them as the record changes (reconcile), runs the
// fetch sessions, one connection per leader (session.go), and answers
// the service's requests (service.Replication) by finding the log a
// request names once and handing it the request. What the logs share
// with it (configuration, store, cluster node, logger, counters) is one
// shared value (shared.go).
package replica

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
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

// Manager is the registry of a member's replicated logs: it creates and
// retires them as the cluster's Raft record changes (reconcile), runs
// the fetch sessions that copy the logs this member follows, one
// connection per leader (session.go), and answers the service's
// requests (Replication) by finding the log a request names once and
// handing it the request.
type Manager struct {
	*shared

	synced atomic.Bool // the metadata was reconciled after a Sync: until then nothing is served

	mu    sync.Mutex
	swept bool                     // the copies of topics moved away while this member was down were deleted
	meta  map[string]cluster.Topic // every topic of the cluster, as last reconciled
	logs  map[string]*replicaLog   // those this member holds
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
}

// The service's audiences (service.Replication), each a view of the
// manager, so that the manager's own methods stay those of the server
// that runs it.
type (
	dataAPI     struct{ m *Manager } // service.Replicas (leader.go)
	groupAPI    struct{ m *Manager } // service.ReplicaGroups (groups.go)
	followerAPI struct{ m *Manager } // service.Followers (leader.go, lag.go, logends.go)
	adminAPI    struct{ m *Manager } // service.ClusterAdmin (admin.go)
	viewAPI     struct{ m *Manager } // service.ClusterView (status.go)
)

var (
	_ service.Replicas      = dataAPI{}
	_ service.ReplicaGroups = groupAPI{}
	_ service.Followers     = followerAPI{}
	_ service.ClusterAdmin  = adminAPI{}
	_ service.ClusterView   = viewAPI{}
)

// Replication returns m as each of the service's audiences asks it
// (service.Config.Replication).
func (m *Manager) Replication() service.Replication {
	return service.Replication{Replicas: dataAPI{m}, Groups: groupAPI{m}, Followers: followerAPI{m}, Admin: adminAPI{m}, View: viewAPI{m}}
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
	sh := &shared{cfg: cfg, store: store, log: cfg.Logger, pokes: make(chan struct{}, 1), done: make(chan struct{})}
	return &Manager{shared: sh, meta: map[string]cluster.Topic{},
		bootLead: map[string]int64{}, releading: map[string]bool{},
		stepping: map[string]bool{}, repairing: map[string]bool{},
		logs: map[string]*replicaLog{}, sessions: map[string][]*session{}}
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
	logs := m.held()
	m.wg.Wait()
	for _, rl := range logs {
		rl.stop(storage.ErrClosed)
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
	m.synced.Store(true)
	m.log.Info("replica: in step with the cluster", "topics", len(m.held()))
	httpRecorded := false
	for {
		select {
		case <-m.done:
			return
		case <-m.pokes:
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

// reconcile brings the logs this member holds in line with the
// cluster's metadata: it retires those no longer here, creates those new
// here, and has each apply its topic's record.
func (m *Manager) reconcile() {
	st := m.node.Load().State()
	meta := make(map[string]cluster.Topic, len(st.Topics))
	for name, t := range st.Topics {
		meta[name] = *t
	}
	gone, mine := m.register(meta)
	for _, rl := range gone {
		t := meta[rl.name]
		rl.stop(m.notLeader(rl.name, t.Leader))
		m.dropCopy(rl.name, t.Name != "")
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
	m.clearRepaired(meta)
	for _, rl := range mine {
		rl.apply(meta[rl.name], m)
	}
}

// register records meta as the cluster's metadata and returns the logs
// this member no longer holds (taken out of the registry) and those it
// holds, created for the topics new here.
func (m *Manager) register(meta map[string]cluster.Topic) (gone, mine []*replicaLog) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.meta = meta
	for name, rl := range m.logs {
		if t, ok := meta[name]; !ok || !t.IsReplica(m.cfg.Self) {
			gone = append(gone, rl)
			delete(m.logs, name)
		}
	}
	for name, t := range meta {
		if !t.IsReplica(m.cfg.Self) {
			continue
		}
		rl := m.logs[name]
		if rl == nil {
			rl = newReplicaLog(m.shared, name)
			m.logs[name] = rl
		}
		rl.record = t
		mine = append(mine, rl)
	}
	return gone, mine
}

// clearRepaired forgets the copies under repair that are repaired: cut
// at their hole (session.setup), caught up and taken back into the
// in-sync set after they stepped back; and those of topics gone.
func (m *Manager) clearRepaired(meta map[string]cluster.Topic) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.repairing {
		t, ok := meta[name]
		if !ok {
			delete(m.repairing, name)
			continue
		}
		if !t.InSync(m.cfg.Self) || m.stepping[name] {
			continue
		}
		if rl := m.logs[name]; rl == nil || !rl.damaged() {
			delete(m.repairing, name)
		}
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

// found is what find found of a topic a request names.
type found struct {
	topic string
	t     cluster.Topic // its Raft record as last reconciled
	known bool          // the cluster knows it
	rl    *replicaLog   // its log here; nil when this member holds none
}

// find returns what the cluster and this member hold of topic: one look
// into the registry.
func (m *Manager) find(topic string) found {
	m.mu.Lock()
	if rl := m.logs[topic]; rl != nil {
		t := rl.record
		m.mu.Unlock()
		return found{topic: topic, t: t, known: true, rl: rl}
	}
	t, ok := m.meta[topic]
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
	return found{topic: topic, t: t, known: ok}
}

// held returns the logs this member holds.
func (m *Manager) held() []*replicaLog {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Values(m.logs))
}

// errUnrecorded answers a change (what) the Raft group did not commit,
// err saying why: an election, most often; retry shortly.
func errUnrecorded(what string, err error) error {
	return &protocol.Error{Code: protocol.CodeShuttingDown, Message: "the cluster cannot record " + what + " now: " + err.Error()}
}

// errStarting answers what needs the cluster before this member joined it.
var errStarting = &protocol.Error{Code: protocol.CodeShuttingDown, Message: "the server is joining its cluster: retry shortly"}

// info returns the offsets and size of topic's log here.
func (m *Manager) info(topic string) (storage.TopicInfo, error) {
	if f := m.find(topic); f.rl != nil {
		return f.rl.info()
	}
	l, err := m.store.Log(topic)
	if err != nil {
		return storage.TopicInfo{}, err
	}
	return l.Info()
}
