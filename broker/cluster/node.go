package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// Defaults of Config.
const (
	// DefaultHeartbeatTimeout is Raft's heartbeat and election timeout: a
	// follower that hears nothing from the Raft leader this long (up to
	// twice it, at random) starts an election.
	DefaultHeartbeatTimeout = 500 * time.Millisecond
	// DefaultMemberTimeout is how long the Raft leader's heartbeats to a
	// member may fail before the controller takes it as down and moves
	// the leadership of its topics. A killed server refuses connections
	// at once, so this is what a failover waits, after the election when
	// the Raft leader itself died.
	DefaultMemberTimeout = 1500 * time.Millisecond
	// maxRPCTimeout bounds a Raft RPC's I/O (rpcTimeout).
	maxRPCTimeout = 2 * time.Second
	// forwardTimeout bounds a forwarded command, its commit included.
	forwardTimeout = 10 * time.Second
	// applyTimeout bounds the Raft leader's wait to enqueue a command.
	applyTimeout = 5 * time.Second
	// reachTimeout bounds the check that a member about to become a Raft
	// voter answers on its cluster port (layer.reach).
	reachTimeout = time.Second
)

// Config sets a Node up.
type Config struct {
	// Self is this server.
	Self Member
	// Peers are every member of the cluster, Self among them. A node
	// without Raft state in Dir bootstraps the cluster with them as its
	// voters; every member must be given the same list.
	Peers []Member
	// Dir holds the Raft log, its stable store and snapshots.
	Dir string
	// Listener, if set, is the cluster port's listener (else one is
	// opened on Self.Raft).
	Listener net.Listener
	// ServerTLS and ClientTLS, if set, make the cluster port speak TLS.
	ServerTLS, ClientTLS *tls.Config
	// Token is sent on every connection to another member's cluster
	// port; Authorize, if set, accepts a connection's token or not.
	Token     string
	Authorize func(token string) bool
	// Join: this server joins a cluster that exists, as a member added
	// with AddMember, rather than bootstrap one with Peers (-cluster-join).
	Join bool
	// HeartbeatTimeout and MemberTimeout: see their defaults.
	HeartbeatTimeout time.Duration
	MemberTimeout    time.Duration
	// OnChange is called after each command the node applies that
	// changes the members or topics (not a group's offset or lease), in
	// log order, on Raft's apply goroutine: it must not block.
	OnChange func(Command)
	// LogEnds, if set, returns where member's logs of topics end (those
	// it holds): the controller asks it of a topic's live in-sync
	// members, for at most logEndsTimeout, before it elects the leader
	// (preferLongest). Without it the first live member is elected.
	LogEnds func(ctx context.Context, member string, topics []string) (map[string]LogEnd, error)
	Logger  *slog.Logger
}

// Node is one member's part of the cluster's Raft group: the metadata it
// holds, and, on the Raft leader, the controller that moves topic
// leadership off members that went down.
type Node struct {
	cfg   Config
	raft  *raft.Raft
	fsm   *fsm
	layer *layer
	fwd   *forwarder // the forward connections to the Raft leader
	batch *batcher   // the commands this member applies as the Raft leader
	trans *raft.NetworkTransport
	store *raftboltdb.BoltStore
	log   *slog.Logger

	appliedMu sync.Mutex
	applied   uint64        // last index applied to fsm
	appliedCh chan struct{} // closed and replaced on every apply

	groupMu    sync.Mutex
	groupIndex map[string]uint64 // per topic, the last group change this member committed (groups.go)

	ctl       *controller
	started   chan struct{} // closed once raft is set: the cluster port serves forwards from its start
	closeOnce sync.Once
	done      chan struct{}
	wg        sync.WaitGroup
}

// Open starts the node: it opens (or bootstraps) its Raft state in Dir
// and joins the group.
func Open(cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.HeartbeatTimeout <= 0 {
		cfg.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if cfg.MemberTimeout <= 0 {
		cfg.MemberTimeout = DefaultMemberTimeout
	}
	if cfg.Self.ID == "" || cfg.Self.Raft == "" {
		return nil, errors.New("cluster: Self needs an ID and a Raft address")
	}
	if !slices.ContainsFunc(cfg.Peers, func(m Member) bool { return m.ID == cfg.Self.ID }) {
		return nil, fmt.Errorf("cluster: %s is not among the peers", cfg.Self.ID)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	n := &Node{cfg: cfg, log: cfg.Logger, appliedCh: make(chan struct{}), started: make(chan struct{}), done: make(chan struct{})}
	n.fsm = &fsm{st: newState(), onChange: n.changed}

	store, err := raftboltdb.NewBoltStore(filepath.Join(cfg.Dir, "raft.db"))
	if err != nil {
		return nil, fmt.Errorf("cluster: opening the Raft log: %w", err)
	}
	n.store = store
	hlog := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: slogWriter{cfg.Logger}})
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, 2, hlog)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("cluster: opening the snapshots: %w", err)
	}
	l := cfg.Listener
	if l == nil {
		if l, err = net.Listen("tcp", cfg.Self.Raft); err != nil {
			store.Close()
			return nil, fmt.Errorf("cluster: the cluster port: %w", err)
		}
	}
	adv, err := net.ResolveTCPAddr("tcp", cfg.Self.Raft)
	if err != nil {
		l.Close()
		store.Close()
		return nil, fmt.Errorf("cluster: the cluster port's address %q: %w", cfg.Self.Raft, err)
	}
	n.layer = newLayer(l, adv, &cfg, n.serveForward)
	n.fwd = newForwarder(n.layer)
	n.batch = newBatcher(n)
	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: n.layer, MaxPool: 3, Timeout: rpcTimeout(cfg.MemberTimeout), Logger: hlog})

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.Self.ID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.HeartbeatTimeout
	rc.LeaderLeaseTimeout = cfg.HeartbeatTimeout / 2
	rc.Logger = hlog

	n.ctl = newController(n)
	if err := n.bootstrap(rc, snaps); err != nil {
		n.closeTransport()
		return nil, err
	}
	r, err := raft.NewRaft(rc, n.fsm, store, store, snaps, n.trans)
	if err != nil {
		n.closeTransport()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	n.raft = r
	close(n.started)
	go n.batch.run()
	n.ctl.observe()
	n.wg.Go(n.ctl.run)
	return n, nil
}

// bootstrap writes the first configuration, every peer a voter, unless
// the Raft state in Dir has one: every member does the same, and the
// library makes the identical configurations one.
func (n *Node) bootstrap(rc *raft.Config, snaps raft.SnapshotStore) error {
	has, err := raft.HasExistingState(n.store, n.store, snaps)
	if err != nil || has || n.cfg.Join {
		if err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		return nil
	}
	var servers []raft.Server
	for _, p := range n.cfg.Peers {
		servers = append(servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Raft)})
	}
	if err := raft.BootstrapCluster(rc, n.store, n.store, snaps, n.trans, raft.Configuration{Servers: servers}); err != nil {
		return fmt.Errorf("cluster: bootstrap: %w", err)
	}
	return nil
}

func (n *Node) closeTransport() {
	n.fwd.close()
	n.trans.Close()
	n.layer.Close()
	n.store.Close()
}

// Close leaves the group (without removing this member from it) and
// stops the node.
func (n *Node) Close() error {
	var err error
	n.closeOnce.Do(func() {
		close(n.done)
		n.wg.Wait()
		err = n.raft.Shutdown().Error()
		<-n.batch.stopped
		n.fwd.close()
		n.trans.Close()
		n.layer.Close()
		n.layer.wait()
		if e := n.store.Close(); err == nil {
			err = e
		}
	})
	return err
}

// changed is the fsm's onChange: it records the applied index and passes
// the command on.
func (n *Node) changed(index uint64, c Command) {
	n.appliedMu.Lock()
	n.applied = max(n.applied, index)
	close(n.appliedCh)
	n.appliedCh = make(chan struct{})
	n.appliedMu.Unlock()
	if isGroupOp(c.Op) {
		return // where topics live is unchanged
	}
	if n.cfg.OnChange != nil {
		n.cfg.OnChange(c)
	}
	n.ctl.poke()
}

// waitApplied waits until this node has applied index.
func (n *Node) waitApplied(ctx context.Context, index uint64) error {
	for {
		n.appliedMu.Lock()
		ch, applied := n.appliedCh, n.applied
		n.appliedMu.Unlock()
		if applied >= index || n.raft.AppliedIndex() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-n.done:
			return ErrClosed
		}
	}
}

// InContact reports whether this member has heard from the Raft leader
// within d (or is the leader): a member cut off from the group longer
// stops serving its topics, since the others may have moved them.
func (n *Node) InContact(d time.Duration) bool {
	return n.IsLeader() || time.Since(n.raft.LastContact()) < d
}

// rpcTimeout is the I/O deadline of a Raft RPC: two thirds of the member
// timeout, within a second and maxRPCTimeout. A member that froze
// (SIGSTOP, a paused VM) refuses nothing: the Raft leader's heartbeat to
// it fails only at this deadline, and the library reports the failure
// (FailedHeartbeatObservation, which the controller counts from the
// member's last contact) only then. Under the member timeout, the
// controller decides at the member timeout, as for a member that died.
func rpcTimeout(member time.Duration) time.Duration {
	return min(max(member*2/3, time.Second), maxRPCTimeout)
}

// ID returns this member's ID.
func (n *Node) ID() string { return n.cfg.Self.ID }

// IsLeader reports whether this member is the Raft leader.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the Raft leader as far as this member knows.
func (n *Node) Leader() (Member, bool) {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return Member{}, false
	}
	var m Member
	var ok bool
	n.fsm.read(func(s *State) { m, ok = s.Members[string(id)] })
	if !ok {
		m = Member{ID: string(id)}
		for _, p := range n.cfg.Peers {
			if p.ID == string(id) {
				m = p
			}
		}
	}
	return m, true
}

// State returns a copy of the metadata as this member has applied it.
func (n *Node) State() *State {
	var c *State
	n.fsm.read(func(s *State) { c = s.Clone() })
	return c
}

// Topic returns a copy of one topic's metadata.
func (n *Node) Topic(name string) (Topic, bool) {
	var t Topic
	var ok bool
	n.fsm.read(func(s *State) {
		if p := s.Topics[name]; p != nil {
			t, ok = *p.clone(), true
		}
	})
	return t, ok
}

// Member returns a member's addresses.
func (n *Node) Member(id string) (Member, bool) {
	var m Member
	var ok bool
	n.fsm.read(func(s *State) { m, ok = s.Members[id] })
	return m, ok
}

// CreateTopic places a new topic on replicas members by rendezvous
// hashing of its name over the members not leaving (protocol.PlaceN, as the Go client
// places a topic) and records it, led by the first. It returns the
// topic as recorded; a topic recorded before is returned with
// ErrTopicExists. The create is one proposal however often it is tried
// (its answer lost, or the Raft leader lost its office while it
// committed; Node.commit tries again): a try that meets the topic its
// first try recorded succeeds.
func (n *Node) CreateTopic(ctx context.Context, name string, replicas int) (Topic, error) {
	if err := n.waitMembers(ctx); err != nil {
		return Topic{}, err
	}
	var ids []string
	n.fsm.read(func(s *State) {
		for _, id := range s.MemberIDs() {
			if !s.Members[id].Leaving {
				ids = append(ids, id)
			}
		}
	})
	if replicas > len(ids) {
		return Topic{}, fmt.Errorf("%w: %d replicas asked for topic %q, the cluster has %d members", ErrNotEnoughMembers, replicas, name, len(ids))
	}
	var place []string
	for _, i := range protocol.PlaceN(name, ids, replicas) {
		place = append(place, ids[i])
	}
	err := n.Propose(ctx, Command{Op: opCreate, Topic: name, Replicas: place, Proposal: newProposal()})
	t, ok := n.Topic(name)
	if err != nil && !(errors.Is(err, ErrTopicExists) && ok) {
		return Topic{}, err
	}
	return t, err
}

// newProposal returns a random ID for a proposal (Command.Proposal).
func newProposal() string {
	return rand.Text()
}

// Sync returns once this member has applied everything the Raft group
// had committed when it was called: it commits a no-op through the
// leader and waits for it here. A member that restarted knows the
// cluster's metadata only after it.
func (n *Node) Sync(ctx context.Context) error {
	return n.Propose(ctx, Command{Op: opNoop})
}

// DeleteTopic removes a topic from the metadata.
func (n *Node) DeleteTopic(ctx context.Context, name string) error {
	return n.Propose(ctx, Command{Op: opDelete, Topic: name})
}

// SetStart records that every replica of a topic drops what it holds
// before start (an admin truncation), decided by the topic's leader at
// epoch (ErrStaleEpoch once a new leader took over). A lower start than
// the recorded one changes nothing.
func (n *Node) SetStart(ctx context.Context, name string, epoch, start int64) error {
	return n.Propose(ctx, Command{Op: opStart, Topic: name, Epoch: epoch, Offset: start})
}

// SetISR records a topic's new in-sync set, decided by its leader on
// the topic's metadata at epoch and version (ErrStaleEpoch once either
// moved). isr must start with the leader.
func (n *Node) SetISR(ctx context.Context, name string, epoch, version int64, isr []string) error {
	if len(isr) == 0 {
		return fmt.Errorf("%w: an empty in-sync set", ErrBadCommand)
	}
	return n.Propose(ctx, Command{Op: opISR, Topic: name, Epoch: epoch, Version: version, Leader: isr[0], ISR: isr})
}

// SetLeader proposes that leader lead topic name under the next epoch,
// with the in-sync set isr, decided under epoch and version (refused as
// stale if the topic moved on): a planned change, such as a leader
// handing a topic back to its first replica.
func (n *Node) SetLeader(ctx context.Context, name string, epoch, version int64, leader string, isr []string) error {
	if leader == "" || len(isr) == 0 || isr[0] != leader {
		return fmt.Errorf("%w: leader %q is not first of the in-sync set %v", ErrBadCommand, leader, isr)
	}
	return n.Propose(ctx, Command{Op: opLeader, Topic: name, Epoch: epoch, Version: version, Leader: leader, ISR: isr})
}

// FinishMove proposes the end of topic name's move, decided under epoch
// and version: its target becomes its replicas, led by leader heading the
// in-sync set isr (members of the target, in sync). The controller ends a
// move whose leader stays a replica; a leader that does not ends its
// topic's move itself, drained first.
func (n *Node) FinishMove(ctx context.Context, name string, epoch, version int64, leader string, isr []string) error {
	return n.Propose(ctx, Command{Op: opMoved, Topic: name, Epoch: epoch, Version: version, Leader: leader, ISR: isr})
}

// waitMembers waits until the member list is recorded (the first Raft
// leader records it).
func (n *Node) waitMembers(ctx context.Context) error {
	for {
		var k int
		n.fsm.read(func(s *State) { k = len(s.Members) })
		if k > 0 {
			return nil
		}
		n.appliedMu.Lock()
		ch := n.appliedCh
		n.appliedMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%w: the member list is not recorded yet: %w", ErrNoLeader, ctx.Err())
		case <-n.done:
			return ErrClosed
		}
	}
}

// Propose commits a command through the Raft leader: here when this
// member leads, else forwarded to the leader's cluster port. It retries
// while no leader is known, until ctx ends, and returns once this member
// has applied the command too.
func (n *Node) Propose(ctx context.Context, c Command) error {
	index, _, err := n.commit(ctx, c)
	if err != nil {
		return err
	}
	return n.waitApplied(ctx, index)
}

// commit is Propose without the wait for this member's apply: it returns
// once the Raft leader applied the command, with its log index and what
// the leader's apply answered (a group command: the group, JSON).
func (n *Node) commit(ctx context.Context, c Command) (uint64, []byte, error) {
	b := c.encode()
	wait := 20 * time.Millisecond
	for {
		index, res, err := n.propose(ctx, b)
		if err == nil {
			return index, res, nil
		}
		if !errors.Is(err, ErrNoLeader) && !errors.Is(err, ErrNotLeader) {
			return 0, nil, err
		}
		select {
		case <-ctx.Done():
			return 0, nil, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-n.done:
			return 0, nil, ErrClosed
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// propose is one try of commit.
func (n *Node) propose(ctx context.Context, b []byte) (uint64, []byte, error) {
	if n.IsLeader() {
		return n.applyLocal(b)
	}
	addr, id := n.raft.LeaderWithID()
	if id == "" {
		return 0, nil, ErrNoLeader
	}
	timeout := forwardTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	ans, err := n.fwd.do(ctx, string(addr), timeout, b)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: the Raft leader %s: %w", ErrNoLeader, id, err)
	}
	return decodeAnswer(ans)
}

// applyLocal applies a command on this member, the Raft leader, through
// its queue: with the commands that arrive while an entry is in flight,
// in the next entry (batch.go).
func (n *Node) applyLocal(b []byte) (uint64, []byte, error) {
	return n.batch.apply(b)
}

// serveForward commits a command forwarded by another member, but for
// those only the Raft leader's controller makes (localOnly).
func (n *Node) serveForward(b []byte) []byte {
	var c Command
	if err := json.Unmarshal(b, &c); err != nil {
		return encodeAnswer(0, nil, fmt.Errorf("%w: %w", ErrBadCommand, err))
	}
	select {
	case <-n.started:
	default:
		// The cluster port listens before Raft starts (it replays its log
		// first): a member that took this one for the leader before it
		// restarted tries again.
		return encodeAnswer(0, nil, fmt.Errorf("%w: this member is starting", ErrNotLeader))
	}
	if c.Op == opDownQuery {
		return n.answerDown()
	}
	if localOnly(c.Op) {
		n.log.Warn("cluster: a forwarded command refused: only the Raft leader makes it", "op", c.Op)
		return encodeAnswer(0, nil, fmt.Errorf("%w: %q is not a command a member forwards", ErrBadCommand, c.Op))
	}
	if !n.IsLeader() {
		return encodeAnswer(0, nil, ErrNotLeader)
	}
	index, res, err := n.applyLocal(b)
	if errors.Is(err, ErrClosed) {
		// This member stops: the forwarder tries the next leader.
		err = fmt.Errorf("%w: the Raft leader is closing", ErrNotLeader)
	}
	return encodeAnswer(index, res, err)
}

// localOnly reports whether op is a command only the Raft leader's
// controller makes, never one forwarded to it: the member list recorded
// when the cluster forms (members change by join and leave, through
// AddMember and RemoveMember) and the forgetting of a member that left.
func localOnly(op string) bool { return op == opMembers || op == opForget }

// The answer codes of a forwarded command.
var answerErrs = []error{nil, ErrNotLeader, ErrNoLeader, ErrStaleEpoch, ErrTopicExists, ErrTopicNotFound, ErrBadCommand, ErrNotEnoughMembers,
	storage.ErrGroupBusy, storage.ErrCommitConflict, storage.ErrTooManyGroups}

// encodeAnswer encodes a forwarded command's answer: code 0, the log
// index and what the apply answered (res), or the error's code and text.
func encodeAnswer(index uint64, res []byte, err error) []byte {
	if err == nil {
		return append(binary.LittleEndian.AppendUint64([]byte{0}, index), res...)
	}
	code := byte(255)
	for i, e := range answerErrs[1:] {
		if errors.Is(err, e) {
			code = byte(i + 1)
			break
		}
	}
	return append([]byte{code}, err.Error()...)
}

func decodeAnswer(b []byte) (uint64, []byte, error) {
	if len(b) == 0 {
		return 0, nil, fmt.Errorf("%w: an empty answer", ErrNoLeader)
	}
	if b[0] == 0 {
		if len(b) < 9 {
			return 0, nil, fmt.Errorf("%w: a bad answer", ErrNoLeader)
		}
		return binary.LittleEndian.Uint64(b[1:]), b[9:], nil
	}
	msg := string(b[1:])
	if int(b[0]) < len(answerErrs) {
		sentinel := answerErrs[b[0]]
		return 0, nil, fmt.Errorf("%w%s", sentinel, strings.TrimPrefix(msg, sentinel.Error()))
	}
	return 0, nil, errors.New(msg)
}

// slogWriter passes hashicorp/raft's log lines to a slog.Logger.
type slogWriter struct{ l *slog.Logger }

// Its lines go at debug level: with a member down it logs a failed
// heartbeat several times a second; the cluster's own lines (a member
// down or back, a topic moved) say what matters.
func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Debug(string(bytes.TrimSpace(p)))
	return len(p), nil
}

// Status is what `hrqa cluster status` shows: the members, who leads the
// Raft group, and each topic's replicas.
type Status struct {
	Self       string   `json:"self"`
	RaftLeader string   `json:"raft_leader"`
	Members    []Member `json:"members"`
	Topics     []Topic  `json:"topics"`
}

// Status returns this member's view of the cluster.
func (n *Node) Status() Status {
	st := Status{Self: n.cfg.Self.ID}
	if m, ok := n.Leader(); ok {
		st.RaftLeader = m.ID
	}
	n.fsm.read(func(s *State) {
		for _, id := range s.MemberIDs() {
			st.Members = append(st.Members, s.Members[id])
		}
		for _, t := range s.Topics {
			st.Topics = append(st.Topics, *t.clone())
		}
	})
	slices.SortFunc(st.Topics, func(a, b Topic) int { return strings.Compare(a.Name, b.Name) })
	return st
}

// MarshalIndent is Status as indented JSON.
func (st Status) MarshalIndent() ([]byte, error) { return json.MarshalIndent(st, "", "  ") }
