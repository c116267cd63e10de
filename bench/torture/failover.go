package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/client/admin"
)

// The failover phase: three server processes as one cluster, every topic
// on all three (-replicas 3 -min-insync 2), idempotent producers with
// acks=all through clients of all three; the leader of the busiest topic
// killed with kill -9 again and again, a follower twice, and two servers
// at once, each restarted after a random pause. Then every topic is read
// from every server: no acknowledged message may be missing, none may be
// there twice, each producer's messages must be in the order it sent
// them, and the servers' logs must be byte-identical. A consumer group's
// member reads the busiest topic throughout (failover_group.go): it must
// keep its lease, read every offset once, and find its last commit in
// the cluster at the end. It prints
//
//	failover ok acked=N lost=0 dups=0 reordered=0 max_unavailable_ms=M leader_kills=K leader_changes=L group_read=R group_commits=C group_gaps=0 group_rewinds=0
//
// (or "failover FAIL ..." with the same fields).

// foTopics are the phase's topics; the first is the busiest (half the
// producers write it).
var foTopics = []string{"fo-a", "fo-b", "fo-c"}

const (
	foServers = 3
	// foHealthyWait bounds the wait for every topic to have its three
	// replicas in sync before a kill, and at the end.
	foHealthyWait = 60 * time.Second
	// foProgress is how many acknowledgements each kill waits for first,
	// so that every kill finds the producers writing.
	foProgress = 3000
	// foRequest bounds one produce, the failover it may wait through
	// included.
	foRequest = 30 * time.Second
)

// runFailover runs the failover phase: producers and a consumer group on
// a cluster of foServers while the plan's kills run one after another,
// then checks that every acknowledged message is there once, on every
// replica alike.
func runFailover(ctx context.Context, e *env) (string, error) {
	srv, err := newFoCluster(e)
	if err != nil {
		return "start", err
	}
	defer func() {
		for _, f := range srv.servers {
			if f.s != nil && f.s.alive() {
				f.s.kill()
			}
		}
	}()
	all := strings.Join(srv.addrs(), ",")
	admin, err := client.Dial(ctx, all, client.WithDialTimeout(time.Second), client.WithRequestTimeout(10*time.Second))
	if err != nil {
		return "dial", err
	}
	defer admin.Close()
	for _, t := range foTopics {
		if err := retry(ctx, 30*time.Second, func() error { return admin.CreateTopic(ctx, t) }); err != nil && !errors.Is(err, client.ErrTopicExists) {
			return "create topics", err
		}
	}
	ps, err := startFoProducers(ctx, all, e.cfg.producers)
	if err != nil {
		return "producers", err
	}
	defer ps.stopAll()
	group, err := startFoGroup(ctx, all)
	if err != nil {
		return "group", err
	}

	leaderKills, followerKills, doubleKills := max(10, e.cfg.cycles), 2, 1
	plan := foPlan(e, leaderKills)
	kills, err := foKills(ctx, srv, admin, ps, plan)
	if err != nil {
		return ps.partial(kills), err
	}
	ps.finish()
	if err := foHealthy(ctx, srv.servers, foHealthyWait, true); err != nil {
		return ps.partial(kills), fmt.Errorf("at the end: %w", err)
	}
	changes, err := foLeaderChanges(ctx, srv.servers)
	if err != nil {
		return ps.partial(kills), err
	}
	gline, gerr := foGroupEnd(ctx, admin, group)
	r, err := foCheck(ctx, srv.servers, ps)
	line, err := foVerdict(ps, r, errors.Join(err, gerr), fmt.Sprintf("leader_kills=%d leader_changes=%d %s", kills, changes, gline))
	detail := fmt.Sprintf("%d producers, %d kills (%d of the busiest topic's leader, %d of a follower, %d of two servers at once), %s shrunk to %d replicas and grown back among them, %d produces failed and not resent (%s), replicas byte-identical: %v",
		len(ps.p), len(plan)-2, leaderKills, followerKills, doubleKills, foTopics[2], foServers-1, ps.failed.Load(), ps.errSummary(), r.identical)
	fmt.Println(line)
	fmt.Println(foGapsByKill(ps, srv.kills))
	fmt.Println(foLongGaps(ps, srv.kills))
	if err != nil {
		return detail, err
	}
	for _, f := range srv.servers {
		if err := f.s.stop(); err != nil {
			return detail, err
		}
	}
	return detail, nil
}

// foKills runs each step of plan once the cluster is healthy and the
// producers progress, and returns how many killed a leader.
func foKills(ctx context.Context, srv *foCluster, admin *client.Client, ps *foProducers, plan []string) (int, error) {
	kills := 0
	for i, what := range plan {
		if err := foHealthy(ctx, srv.servers, foHealthyWait, false); err != nil {
			return kills, fmt.Errorf("before kill %d (%s): %w", i, what, err)
		}
		if err := ps.progress(ctx, foProgress, foHealthyWait); err != nil {
			return kills, fmt.Errorf("before kill %d (%s): %w", i, what, err)
		}
		leader, err := srv.step(ctx, admin, what)
		if err != nil {
			return kills, fmt.Errorf("step %d (%s): %w", i, what, err)
		}
		if leader {
			kills++
		}
	}
	if err := ps.progress(ctx, foProgress, foHealthyWait); err != nil {
		return kills, fmt.Errorf("after the last kill: %w", err)
	}
	return kills, nil
}

// foVerdict returns the phase's line, with the fields after
// max_unavailable_ms given as rest, and returns it with the error that
// fails the phase: err, or the line itself on a loss, duplicate, reorder
// or an unavailability over 10 s.
func foVerdict(ps *foProducers, r foResult, err error, rest string) (string, error) {
	res := "ok"
	if err != nil || r.lost > 0 || r.dups > 0 || r.reordered > 0 || ps.maxGap() > 10*time.Second {
		res = "FAIL"
	}
	line := fmt.Sprintf("failover %s acked=%d lost=%d dups=%d reordered=%d max_unavailable_ms=%d %s",
		res, ps.acked.Load(), r.lost, r.dups, r.reordered, ps.maxGap().Milliseconds(), rest)
	if err == nil && res != "ok" {
		err = fmt.Errorf("%s", line)
	}
	return line, err
}

// foCluster is the phase's servers and how to start each.
type foCluster struct {
	e       *env
	servers []*foServer
	peers   string    // the -peers list every server is given
	secret  string    // the -cluster-token-file every server is given: the members' secret
	extra   []string  // more flags for every server
	nofile  int       // every server's descriptor limit; 0: inherited
	kills   []foEvent // each kill, when it was made and what it killed
}

// foEvent is a kill of the plan ("leader", "follower", "double"), when it
// was made, and what it was: the victims, whether one led the Raft group,
// the pause before their restart.
type foEvent struct {
	at     time.Time
	what   string
	detail string
}

// foPlan is the order of the kills: leaderKills of the busiest topic's
// leader, with two of a follower and one of two servers at once among
// them.
func foPlan(e *env, leaderKills int) []string {
	plan := make([]string, 0, leaderKills+3)
	for range leaderKills {
		plan = append(plan, "leader")
	}
	for _, k := range []string{"follower", "follower", "double"} {
		plan = slices.Insert(plan, 1+e.rnd.IntN(len(plan)), k)
	}
	// A replication factor change and its way back, kills between them.
	at := 1 + e.rnd.IntN(len(plan)-2)
	plan = slices.Insert(plan, at, "shrink")
	plan = slices.Insert(plan, at+2+e.rnd.IntN(len(plan)-at-2), "grow")
	return plan
}

// step carries out one step of the plan: a kill (kill) or, for "shrink"
// and "grow", the third topic's replication factor, under its producers
// and across the kills between the two changes. It reports whether the
// busiest topic's leader was killed.
func (c *foCluster) step(ctx context.Context, admin *client.Client, what string) (bool, error) {
	n, ok := map[string]int{"shrink": foServers - 1, "grow": foServers}[what]
	if !ok {
		return c.kill(ctx, what)
	}
	if err := foReplicas(ctx, admin, c.servers, foTopics[2], n); err != nil {
		return false, fmt.Errorf("%s to %d replicas: %w", foTopics[2], n, err)
	}
	return false, nil
}

// foReplicas sets topic's replication factor to n (retrying while the
// cluster cannot record it) and waits until the move has ended: n
// replicas, every one in sync.
func foReplicas(ctx context.Context, c *client.Client, srv []*foServer, topic string, n int) error {
	if err := retry(ctx, foHealthyWait, func() error { return admin.New(c).SetReplicas(ctx, topic, n) }); err != nil {
		return err
	}
	deadline := time.Now().Add(foHealthyWait)
	for {
		st, err := foStatusOf(ctx, srv)
		if err == nil {
			for _, t := range st.Topics {
				if t.Name == topic && len(t.Replicas) == n && len(t.Target) == 0 && len(t.ISR) == n && t.Leader != "" {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not moved to %d replicas within %v: %+v %v", n, foHealthyWait, st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill kills what the plan says (a "leader", a "follower" or a "double"),
// waits a random pause and restarts the victims; it reports whether the
// busiest topic's leader was among them.
func (c *foCluster) kill(ctx context.Context, what string) (bool, error) {
	srv, e := c.servers, c.e
	st, err := foStatusOf(ctx, srv)
	if err != nil {
		return false, err
	}
	leader := ""
	for _, t := range st.Topics {
		if t.Name == foTopics[0] {
			leader = t.Leader
		}
	}
	li := slices.IndexFunc(srv, func(f *foServer) bool { return f.addr() == leader })
	if li < 0 {
		return false, fmt.Errorf("%s has no leader: %+v", foTopics[0], st)
	}
	var victims []int
	switch what {
	case "leader":
		victims = []int{li}
	case "follower":
		victims = []int{(li + 1 + e.rnd.IntN(foServers-1)) % foServers}
	case "double":
		// The leader and a follower: the survivor alone is under
		// -min-insync 2, so produces are refused until one is back.
		victims = []int{li, (li + 1 + e.rnd.IntN(foServers-1)) % foServers}
	}
	// Some pauses end before the cluster takes the server as down
	// (-member-timeout, 1.5 s): it comes back as the leader it was.
	pause := 200*time.Millisecond + time.Duration(e.rnd.Int64N(int64(2800*time.Millisecond)))
	names := make([]string, len(victims))
	raftLeader := false
	for k, v := range victims {
		names[k], raftLeader = srv[v].addr(), raftLeader || srv[v].addr() == st.RaftLeader
	}
	c.kills = append(c.kills, foEvent{time.Now(), what, fmt.Sprintf("%s %v, the Raft leader among them: %v, restarted after %v", what, names, raftLeader, pause.Round(time.Millisecond))})
	for _, v := range victims {
		srv[v].s.kill()
	}
	time.Sleep(pause)
	for _, v := range victims {
		if err := c.start(v); err != nil {
			return false, fmt.Errorf("restart: %w", err)
		}
	}
	return what != "follower", nil
}

// foLeaderChanges counts the leader changes of every topic: each bumped
// its epoch from 1.
func foLeaderChanges(ctx context.Context, srv []*foServer) (int64, error) {
	st, err := foStatusOf(ctx, srv)
	var changes int64
	for _, t := range st.Topics {
		changes += t.Epoch - 1
	}
	return changes, err
}

// retry calls fn until it succeeds or wait passes.
func retry(ctx context.Context, wait time.Duration, fn func() error) error {
	deadline := time.Now().Add(wait)
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// foStatusOf asks the live servers in turn for the cluster status.
func foStatusOf(ctx context.Context, srv []*foServer) (admin.ClusterStatus, error) {
	var errs []error
	for _, f := range srv {
		if f.s == nil || !f.s.alive() {
			continue
		}
		c, err := f.s.dial(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		st, err := admin.New(c).ClusterStatus(ctx)
		c.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return st, nil
	}
	return admin.ClusterStatus{}, fmt.Errorf("no server answers cluster status: %w", errors.Join(errs...))
}

// foHealthy waits until every topic has a leader, all its replicas in
// sync and, on every server, the leader's end as its high-water mark.
func foHealthy(ctx context.Context, srv []*foServer, wait time.Duration, end bool) error {
	return clusterHealthy(ctx, srv, len(foTopics), wait, end)
}

// clusterHealthy is foHealthy for a cluster of topics topics.
func clusterHealthy(ctx context.Context, srv []*foServer, topics int, wait time.Duration, end bool) error {
	_, err := healthyAs(ctx, srv, "", topics, wait, end)
	return err
}

// healthyAs waits until every server's cluster status, read with token,
// shows topics topics, each with a leader and all its replicas in sync
// (and, if end, the leader's end as its high-water mark), and every
// server a member; it returns the last status read.
func healthyAs(ctx context.Context, srv []*foServer, token string, topics int, wait time.Duration, end bool) (admin.ClusterStatus, error) {
	deadline := time.Now().Add(wait)
	var last string
	var st admin.ClusterStatus
	for {
		ok := true
		for _, f := range srv {
			if st, last = statusOf(ctx, f, token); last == "" {
				last = checkHealthy(f, st, topics, len(srv), end)
			}
			if last != "" {
				ok = false
				break
			}
		}
		if ok {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("not healthy within %v: %s", wait, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// statusOf reads f's cluster status with token; the string says why it
// could not.
func statusOf(ctx context.Context, f *foServer, token string) (admin.ClusterStatus, string) {
	var st admin.ClusterStatus
	c, err := f.s.dial(ctx, client.WithToken(token))
	if err != nil {
		return st, err.Error()
	}
	st, err = admin.New(c).ClusterStatus(ctx)
	c.Close()
	if err != nil {
		return st, err.Error()
	}
	return st, ""
}

// checkHealthy says what keeps f's status st from healthy ("": nothing).
func checkHealthy(f *foServer, st admin.ClusterStatus, topics, members int, end bool) string {
	if len(st.Topics) != topics || len(st.Members) != members {
		return fmt.Sprintf("%s knows %d topics, %d members", f.addr(), len(st.Topics), len(st.Members))
	}
	for _, t := range st.Topics {
		if t.Leader == "" || len(t.ISR) != len(t.Replicas) || len(t.Target) > 0 {
			return fmt.Sprintf("%s: %s led by %q, in sync %v of %v, moving to %v", f.addr(), t.Name, t.Leader, t.ISR, t.Replicas, t.Target)
		}
		if end && t.HighWater != t.Next {
			return fmt.Sprintf("%s: %s at high-water mark %d of %d", f.addr(), t.Name, t.HighWater, t.Next)
		}
	}
	return ""
}

// foProducer is one client producing batches to one topic, each batch of
// new messages: a batch that fails is not sent again (it may or may not
// be stored; it is not counted as acknowledged).
type foProducer struct {
	id    int
	topic string
	c     *client.Client

	mu     sync.Mutex
	offs   map[int]int64 // sequence -> acknowledged offset
	sent   int           // sequences handed out
	lastOK time.Time
	gap    time.Duration // the longest time between acknowledgements while failing
	gaps   []foGap       // each time of foLongGap or more without one
}

// foGap is a time a producer went without an acknowledgement: from the
// last one before it, for d.
type foGap struct {
	from time.Time
	d    time.Duration
}

// foLongGap is the time without an acknowledgement from which a producer
// notes the gap, for foGapsByKill.
const foLongGap = time.Second

type foProducers struct {
	p      []*foProducer
	stop   atomic.Bool
	acked  atomic.Int64
	failed atomic.Int64
	wg     sync.WaitGroup

	errMu sync.Mutex
	errs  map[string]int // failed produces by error kind
}

// kind is a short name for a failed produce's error.
func kind(err error) string {
	for _, k := range []error{client.ErrNotLeader, client.ErrNotEnoughReplicas, client.ErrConnection, client.ErrShuttingDown, context.DeadlineExceeded} {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	msg := err.Error()
	return msg[:min(len(msg), 80)]
}

// errSummary lists the failed produces by kind, most first.
func (ps *foProducers) errSummary() string {
	ps.errMu.Lock()
	defer ps.errMu.Unlock()
	type kv struct {
		k string
		n int
	}
	var l []kv
	for k, n := range ps.errs {
		l = append(l, kv{k, n})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].n > l[j].n })
	var parts []string
	for _, x := range l {
		parts = append(parts, fmt.Sprintf("%d %q", x.n, x.k))
	}
	return strings.Join(parts, ", ")
}

func startFoProducers(ctx context.Context, addrs string, n int) (*foProducers, error) {
	ps := &foProducers{}
	for i := range max(n, 3) {
		c, err := client.Dial(ctx, addrs, client.WithIdempotence(true), client.WithDialTimeout(time.Second),
			client.WithRequestTimeout(foRequest), client.WithRetries(3, 20*time.Millisecond))
		if err != nil {
			ps.stopAll()
			return nil, err
		}
		topic := foTopics[0]
		if i%2 == 1 {
			topic = foTopics[1+i/2%(len(foTopics)-1)]
		}
		ps.p = append(ps.p, &foProducer{id: i, topic: topic, c: c, offs: map[int]int64{}, lastOK: time.Now()})
	}
	for _, p := range ps.p {
		ps.wg.Go(func() { p.run(ctx, ps) })
	}
	return ps, nil
}

func (p *foProducer) run(ctx context.Context, ps *foProducers) {
	for k := 0; !ps.stop.Load(); k++ {
		n := []int{1, 10, 50, 100}[k%4]
		msgs := make([][]byte, n)
		first := p.sent
		for j := range msgs {
			msgs[j] = payload(p.id, first+j)
		}
		p.sent += n
		rctx, cancel := context.WithTimeout(ctx, foRequest)
		base, err := p.c.Produce(rctx, p.topic, msgs...)
		cancel()
		now := time.Now()
		p.mu.Lock()
		if err == nil {
			p.gap = max(p.gap, now.Sub(p.lastOK))
			if d := now.Sub(p.lastOK); d >= foLongGap {
				p.gaps = append(p.gaps, foGap{p.lastOK, d})
			}
			p.lastOK = now
			for j := range n {
				p.offs[first+j] = base + int64(j)
			}
			p.mu.Unlock()
			ps.acked.Add(int64(n))
			continue
		}
		p.mu.Unlock()
		ps.failed.Add(1)
		ps.errMu.Lock()
		if ps.errs == nil {
			ps.errs = map[string]int{}
		}
		ps.errs[kind(err)]++
		ps.errMu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
}

// maxGap is the longest time any producer went without an
// acknowledgement.
func (ps *foProducers) maxGap() time.Duration {
	var g time.Duration
	for _, p := range ps.p {
		p.mu.Lock()
		g = max(g, p.gap)
		p.mu.Unlock()
	}
	return g
}

func (ps *foProducers) progress(ctx context.Context, n int64, wait time.Duration) error {
	return waitAcked(ctx, &ps.acked, n, wait)
}

// waitAcked waits until acked has grown by n, or fails after wait.
func waitAcked(ctx context.Context, acked *atomic.Int64, n int64, wait time.Duration) error {
	from := acked.Load()
	deadline := time.Now().Add(wait)
	for acked.Load() < from+n {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d messages acknowledged in %v, want %d", acked.Load()-from, wait, n)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func (ps *foProducers) finish() {
	ps.stop.Store(true)
	ps.wg.Wait()
}

func (ps *foProducers) stopAll() {
	ps.finish()
	for _, p := range ps.p {
		p.c.Close()
	}
}

func (ps *foProducers) partial(kills int) string {
	return fmt.Sprintf("%d acknowledged, %d leader kills done", ps.acked.Load(), kills)
}

// foResult is what the check found.
type foResult struct {
	lost, dups, reordered int
	identical             bool
}

// foCheck reads every topic from every server and compares.
func foCheck(ctx context.Context, srv []*foServer, ps *foProducers) (foResult, error) {
	r := foResult{identical: true}
	var problems []string
	for _, topic := range foTopics {
		var ref []string
		for i, f := range srv {
			c, err := f.s.dial(ctx, client.WithRequestTimeout(30*time.Second))
			if err != nil {
				return r, err
			}
			msgs, err := foReadAll(ctx, c, topic)
			c.Close()
			if err != nil {
				return r, fmt.Errorf("%s on %s: %w", topic, f.addr(), err)
			}
			if i == 0 {
				ref = msgs
			} else if !slices.Equal(ref, msgs) {
				r.identical = false
				problems = append(problems, fmt.Sprintf("%s: %s holds %d messages, %s %d, and they differ", topic, srv[0].addr(), len(ref), f.addr(), len(msgs)))
			}
		}
		// Every message once, in each producer's order, at its offset.
		seen := map[[2]int]int64{}
		lastSeq := map[int]int{}
		for off, m := range ref {
			prod, seq, ok := parsePayload([]byte(m))
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: offset %d holds a message that is not the torture's", topic, off))
				continue
			}
			k := [2]int{prod, seq}
			if _, dup := seen[k]; dup {
				r.dups++
				continue
			}
			seen[k] = int64(off)
			if s, ok := lastSeq[prod]; ok && seq < s {
				r.reordered++
			}
			lastSeq[prod] = seq
		}
		for _, p := range ps.p {
			if p.topic != topic {
				continue
			}
			for seq, off := range p.offs {
				got, ok := seen[[2]int{p.id, seq}]
				if !ok || got != off {
					if r.lost < 5 {
						problems = append(problems, fmt.Sprintf("%s: P%d S%d acknowledged at %d, found %v at %d", topic, p.id, seq, off, ok, got))
					}
					r.lost++
				}
			}
		}
	}
	// The logs themselves, byte for byte.
	for _, topic := range foTopics {
		var ref []byte
		for i, f := range srv {
			b, err := foLogBytes(f.vol, topic)
			if err != nil {
				return r, err
			}
			if i == 0 {
				ref = b
			} else if !bytes.Equal(ref, b) {
				r.identical = false
				problems = append(problems, fmt.Sprintf("%s: the logs of %s (%d bytes) and %s (%d bytes) differ", topic, srv[0].addr(), len(ref), f.addr(), len(b)))
			}
		}
	}
	if len(problems) > 0 {
		return r, errors.New(strings.Join(problems, "; "))
	}
	return r, nil
}

// foReadAll reads topic from offset 0 to its end (as the server serves
// it: up to its high-water mark) as strings.
func foReadAll(ctx context.Context, c *client.Client, topic string) ([]string, error) {
	info, err := c.TopicInfo(ctx, topic)
	if err != nil {
		return nil, err
	}
	var out []string
	var msgs []client.Message
	for off := int64(0); off < info.Next; {
		if msgs, _, err = c.ConsumeInto(ctx, msgs[:0], topic, off, 5000); err != nil {
			return nil, fmt.Errorf("consume at %d of %d: %w", off, info.Next, err)
		}
		if len(msgs) == 0 {
			return nil, fmt.Errorf("consume at %d returned nothing, next offset %d", off, info.Next)
		}
		for _, m := range msgs {
			if m.Offset != off {
				return nil, fmt.Errorf("offsets not dense: got %d, want %d", m.Offset, off)
			}
			out = append(out, string(m.Value))
			off++
		}
	}
	return out, nil
}

// foLogBytes concatenates the segment logs of topic on volume vol, in
// offset order: the topic's log as stored, whatever its segment bounds.
func foLogBytes(vol, topic string) ([]byte, error) {
	dir := filepath.Join(vol, "topics", topic)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names) // zero-padded base offsets
	var out []byte
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	return out, nil
}
