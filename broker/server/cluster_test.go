package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/peer"
	"github.com/haraqa/haraqa/broker/server"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// testCluster is n server processes' worth of servers in one test: each
// with its own volume, binary, HTTP and cluster ports on 127.0.0.1.
type testCluster struct {
	t       *testing.T
	cfgs    []server.Config
	servers []*server.Server
	addrs   []string
	// wrap, if set, wraps server i's cluster port listener.
	wrap func(i int, l net.Listener) net.Listener
}

// fixedPort returns a loopback port below the kernel's ephemeral range
// (32768 on) that was free a moment ago: the servers of a cluster are
// named by their binary addresses, which all must know before any
// starts, and a port outside the ephemeral range is not taken meanwhile
// by another test's outgoing connection.
func fixedPort(t *testing.T) int {
	t.Helper()
	for range 1000 {
		p := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no free port in 20000-31999")
	return 0
}

// startTestCluster starts n servers as one cluster, each configuration
// passed through setup (if given) before any starts.
// testSecret is the test clusters' members' secret (-cluster-token-file).
const testSecret = "test-cluster-secret-0123456789abcdef"

func startTestCluster(t *testing.T, n, replicas, minInsync int, setup ...func(i int, cfg *server.Config)) *testCluster {
	t.Helper()
	tc := newTestCluster(t, n, replicas, minInsync, setup...)
	tc.startAll()
	return tc
}

// noDetection is a setup of startTestCluster under which only the members
// themselves change a topic's leader or in-sync set: a member timeout and
// a lag time of a minute keep the controller and the leaders' lag checks
// from acting within a test.
func noDetection(_ int, cfg *server.Config) {
	cfg.Cluster.MemberTimeout = time.Minute
	cfg.Cluster.LagTime = time.Minute
}

// newTestCluster is startTestCluster without the start (startAll).
func newTestCluster(t *testing.T, n, replicas, minInsync int, setup ...func(i int, cfg *server.Config)) *testCluster {
	t.Helper()
	tc := &testCluster{t: t}
	var entries []string
	var ports []int
	for len(ports) < 3*n {
		// fixedPort may give a port twice, as it frees what it tried.
		if p := fixedPort(t); !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	for i := range n {
		bin, web, clu := ports[3*i], ports[3*i+1], ports[3*i+2]
		tc.addrs = append(tc.addrs, fmt.Sprintf("127.0.0.1:%d", bin))
		entries = append(entries, fmt.Sprintf("127.0.0.1:%d/%d/%d", bin, web, clu))
	}
	peers, err := server.ParsePeers(strings.Join(entries, ","), 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		cfg := server.DefaultConfig(t.TempDir())
		cfg.Broker.Addr = tc.addrs[i]
		cfg.HTTPAddr = strings.TrimPrefix(peers[i].HTTP, "http://")
		cfg.Logger = slog.New(slog.DiscardHandler)
		if testing.Verbose() {
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("server", i)
		}
		cfg.Peers = peers
		cfg.Cluster = &server.ClusterConfig{Addr: peers[i].Raft, Replicas: replicas, MinInsync: minInsync,
			MemberTimeout: 600 * time.Millisecond, LagTime: 2 * time.Second, AckTimeout: 5 * time.Second, Token: testSecret}
		for _, f := range setup {
			f(i, &cfg)
		}
		tc.cfgs = append(tc.cfgs, cfg)
	}
	tc.servers = make([]*server.Server, n)
	return tc
}

// startAll starts every server; they stop at the test's end.
func (tc *testCluster) startAll() {
	tc.t.Helper()
	tc.t.Cleanup(func() {
		for i := range tc.servers {
			tc.stop(i)
		}
	})
	for i := range tc.servers {
		tc.start(i)
	}
}

func (tc *testCluster) start(i int) {
	tc.t.Helper()
	cfg := tc.cfgs[i]
	l, err := listenRetry(cfg.Cluster.Addr)
	if err != nil {
		tc.t.Fatal(err)
	}
	if tc.wrap != nil {
		l = tc.wrap(i, l)
	}
	cfg.Cluster.Listener = l
	srv, err := server.New(cfg)
	if err != nil {
		tc.t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		tc.t.Fatal(err)
	}
	tc.servers[i] = srv
}

// listenRetry listens on addr, retrying while a closed listener's port
// is not free yet.
func listenRetry(addr string) (net.Listener, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := net.Listen("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			return l, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (tc *testCluster) stop(i int) {
	if s := tc.servers[i]; s != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		tc.servers[i] = nil
	}
}

func (tc *testCluster) index(addr string) int {
	for i, a := range tc.addrs {
		if a == addr {
			return i
		}
	}
	tc.t.Fatalf("%s is not a server of the cluster", addr)
	return -1
}

// status is what cluster status (op 19) tells of a topic.
type topicStatus struct {
	Name      string   `json:"name"`
	Replicas  []string `json:"replicas"`
	Leader    string   `json:"leader"`
	Epoch     int64    `json:"epoch"`
	ISR       []string `json:"isr"`
	HighWater int64    `json:"high_water"`
	Next      int64    `json:"next"`
	ReadOnly  bool     `json:"read_only"`
	Target    []string `json:"target"`
}

// waitTopic waits up to 20 s until topic's status on c satisfies ok.
func waitTopic(t *testing.T, c *client.Client, topic string, what string, ok func(topicStatus) bool) topicStatus {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := topicOf(t, c, topic)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within 20 s: %s: %+v", what, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitStatus waits up to 20 s until c's server's cluster status, as
// JSON into a new T, satisfies ok, and returns it.
func waitStatus[T any](t *testing.T, c *client.Client, what string, ok func(T) bool) T {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		b, err := statusJSON(ctx, c)
		cancel()
		var st T
		if err == nil && json.Unmarshal(b, &st) == nil && ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s: %s: %s %v", c.Servers()[0], what, b, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitInStep waits until the server of c has caught up with its cluster.
func waitInStep(t *testing.T, c *client.Client) {
	t.Helper()
	type inStep struct {
		InStep bool `json:"in_step"`
	}
	waitStatus(t, c, "in step with its cluster", func(st inStep) bool { return st.InStep })
}

func topicOf(t *testing.T, c *client.Client, topic string) topicStatus {
	t.Helper()
	for _, ts := range allTopics(t, c) {
		if ts.Name == topic {
			return ts
		}
	}
	return topicStatus{}
}

// producing returns a function that produces n messages to topic
// through c, each acknowledged, numbered on from those in *acked, which
// it appends them to.
func producing(t *testing.T, ctx context.Context, c *client.Client, topic string, acked *[]string) func(n int) {
	return func(n int) {
		t.Helper()
		for range n {
			msg := fmt.Sprintf("m%05d", len(*acked))
			if _, err := c.Produce(ctx, topic, []byte(msg)); err != nil {
				t.Fatalf("produce %s: %v", msg, err)
			}
			*acked = append(*acked, msg)
		}
	}
}

// seedTopic creates topic through c, produces n messages to it,
// acknowledged (appended to *acked), and waits until all three replicas
// hold them in sync; it returns the topic's status then.
func seedTopic(t *testing.T, ctx context.Context, tc *testCluster, c *client.Client, topic string, n int, acked *[]string) topicStatus {
	t.Helper()
	if err := c.CreateTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	producing(t, ctx, c, topic, acked)(n)
	return waitTopic(t, dialOne(t, tc.addrs[0]), topic, fmt.Sprintf("%d messages on three replicas", n), func(st topicStatus) bool {
		return st.Leader != "" && len(st.ISR) == 3 && st.HighWater == int64(n)
	})
}

func dialAll(t *testing.T, addrs []string, opts ...client.Option) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, strings.Join(addrs, ","), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func dialOne(t *testing.T, addr string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.WithRetries(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestClusterReplicatesAndFailsOver: a topic on three servers, produced
// with acks=all through a client of all three, is byte-identical on every
// replica; with its leader stopped, a follower leads and the client goes
// on producing; every acknowledged message is there, once, in order.
func TestClusterReplicatesAndFailsOver(t *testing.T) {
	tc := startTestCluster(t, 3, 3, 2)
	c := dialAll(t, tc.addrs, client.WithIdempotence(true))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic = "orders"
	if err := c.CreateTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	var acked []string
	produce := producing(t, ctx, c, topic, &acked)
	produce(200)
	st := waitTopic(t, dialOne(t, tc.addrs[0]), topic, "200 messages on three replicas", func(st topicStatus) bool {
		return len(st.Replicas) == 3 && st.Leader != "" && len(st.ISR) == 3 && st.HighWater == 200
	})
	// Every replica holds the 200, readable up to the high-water mark.
	for _, a := range tc.addrs {
		checkTopic(t, dialOne(t, a), topic, acked)
	}
	// The leader goes; a follower takes over within seconds.
	old := st.Leader
	t.Logf("servers %v; stopping the leader %s", tc.addrs, old)
	tc.stop(tc.index(old))
	began := time.Now()
	produce(1)
	t.Logf("the first produce after the leader stopped took %v", time.Since(began).Round(time.Millisecond))
	produce(199)
	var live string
	for _, a := range tc.addrs {
		if a != old {
			live = a
		}
	}
	st = waitTopic(t, dialOne(t, live), topic, "a new leader", func(st topicStatus) bool {
		return st.Leader != old && st.Leader != "" && st.Epoch >= 2
	})
	for _, a := range tc.addrs {
		if a != old {
			checkTopic(t, dialOne(t, a), topic, acked)
		}
	}
	// The old leader comes back, catches up and is in sync again.
	tc.start(tc.index(old))
	produce(50)
	deadline := time.Now().Add(20 * time.Second)
	for {
		st = topicOf(t, dialOne(t, live), topic)
		if len(st.ISR) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted server is not back in sync: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	produce(10)
	for _, a := range tc.addrs {
		checkTopic(t, dialOne(t, a), topic, acked)
	}
}

// checkTopic reads topic from one server until it holds want, in order
// and once each, and nothing more.
func checkTopic(t *testing.T, c *client.Client, topic string, want []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []string
	for off := int64(0); len(got) < len(want); {
		msgs, err := c.Consume(ctx, topic, off, len(want))
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("%s: read %d of %d: %v", c.Servers()[0], len(got), len(want), err)
			}
			time.Sleep(20 * time.Millisecond) // not in sync yet, or its high-water mark behind
			continue
		}
		if len(msgs) == 0 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		for _, m := range msgs {
			got = append(got, string(m.Value))
		}
		off += int64(len(msgs))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: message %d is %q, want %q", c.Servers()[0], i, got[i], want[i])
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d messages, want %d", c.Servers()[0], len(got), len(want))
	}
	// Nothing past them: a message stored twice at the end shows here.
	for {
		msgs, err := c.Consume(ctx, topic, int64(len(want)), 1)
		if err == nil {
			if len(msgs) > 0 {
				t.Fatalf("%s: %d more past the %d messages wanted", c.Servers()[0], len(msgs), len(want))
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: past the %d messages wanted: %v", c.Servers()[0], len(want), err)
		}
		time.Sleep(20 * time.Millisecond) // not in sync for the moment
	}
}

// TestClusterNotLeaderOnBothPorts: a write to a follower is refused with
// the leader's address on the binary port and redirected to it on HTTP.
func TestClusterNotLeaderOnBothPorts(t *testing.T) {
	tc := startTestCluster(t, 3, 3, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := dialAll(t, tc.addrs)
	if err := c.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	st := waitTopic(t, dialOne(t, tc.addrs[0]), "t", "a leader", func(st topicStatus) bool { return st.Leader != "" })
	var follower string
	for _, a := range tc.addrs {
		if a != st.Leader {
			follower = a
		}
	}
	waitInStep(t, dialOne(t, follower))
	waitTopic(t, dialOne(t, follower), "t", "the follower knows the leader", func(st topicStatus) bool { return st.Leader != "" })
	_, err := dialOne(t, follower).Produce(ctx, "t", []byte("x"))
	if leader, ok := client.LeaderOf(err); !errors.Is(err, client.ErrNotLeader) || !ok || leader != st.Leader {
		t.Fatalf("produce to a follower: %v, want not leader naming %s", err, st.Leader)
	}
	web := tc.cfgs[tc.index(follower)].HTTPAddr
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+web+"/topics/t", strings.NewReader("x"))
	req.Header.Set("X-Sizes", "1")
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	leaderWeb := tc.cfgs[tc.index(st.Leader)].HTTPAddr
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != "http://"+leaderWeb+"/topics/t" {
		t.Fatalf("HTTP produce to a follower: %d, Location %q, want 307 to the leader %s", resp.StatusCode, resp.Header.Get("Location"), leaderWeb)
	}
	// The leader's metrics: one topic led, in sync, a leader change taken.
	code, body := get(t, "http://"+leaderWeb+"/metrics")
	for _, want := range []string{"haraqa_replica_topics_led 1\n", "haraqa_replica_under_replicated_topics 0\n", "haraqa_replica_insync_min 3\n", "haraqa_replica_leader_changes_total 1\n"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("the leader's /metrics (%d) lacks %q", code, want)
		}
	}
}

// TestClusterProduceCreates: a produce to a topic no server has creates it
// in the cluster, whichever server it reaches first, and is stored on its
// leader.
func TestClusterProduceCreates(t *testing.T) {
	tc := startTestCluster(t, 3, 3, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialAll(t, tc.addrs)
	for i := range 5 {
		topic := fmt.Sprintf("auto-%d", i)
		if _, err := c.Produce(ctx, topic, []byte("x")); err != nil {
			t.Fatalf("produce to a new topic %s: %v", topic, err)
		}
		p := c.NewProducer(topic + "-p")
		f, err := p.Send(ctx, []byte("y"))
		if err == nil {
			_, err = f.Wait(ctx)
		}
		p.Close()
		if err != nil {
			t.Fatalf("a Producer to a new topic %s-p: %v", topic, err)
		}
	}
}

// TestClusterProducerFollowsLeader: an idempotent Producer sending while
// its topic's leader stops moves to the new leader; every message is
// stored once, at the offset its Future gave.
func TestClusterProducerFollowsLeader(t *testing.T) {
	tc := startTestCluster(t, 3, 3, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dialAll(t, tc.addrs, client.WithIdempotence(true))
	if err := c.CreateTopic(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	st := waitTopic(t, dialOne(t, tc.addrs[0]), "p", "a leader", func(st topicStatus) bool { return st.Leader != "" && len(st.ISR) == 3 })
	p := c.NewProducer("p", client.WithLinger(time.Millisecond), client.WithBatchSize(10))
	var futures []*client.Future
	var want []string
	for i := range 600 {
		if i == 300 {
			tc.stop(tc.index(st.Leader))
		}
		msg := fmt.Sprintf("m%04d", i)
		f, err := p.Send(ctx, []byte(msg))
		if err != nil {
			t.Fatalf("send %s: %v", msg, err)
		}
		futures = append(futures, f)
		want = append(want, msg)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i, f := range futures {
		off, err := f.Wait(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if off != int64(i) {
			t.Fatalf("message %d stored at %d", i, off)
		}
	}
	p.Close()
	for _, a := range tc.addrs {
		if a != st.Leader {
			checkTopic(t, dialOne(t, a), "p", want)
		}
	}
}

// TestClusterReplicaFetchFencing: a replica fetch under another leader
// epoch is refused (fenced epoch), one naming a server that is not a
// replica is refused, a follower is not asked to serve fetches, and epoch
// end answers the leader's end of an epoch (KIP-279: the largest epoch
// at most the one asked).
func TestClusterReplicaFetchFencing(t *testing.T) {
	tc := startTestCluster(t, 3, 3, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialAll(t, tc.addrs)
	if err := c.CreateTopic(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Produce(ctx, "f", []byte("a"), []byte("b")); err != nil {
		t.Fatal(err)
	}
	st := waitTopic(t, dialOne(t, tc.addrs[0]), "f", "a leader", func(st topicStatus) bool { return st.Leader != "" && len(st.ISR) == 3 })
	leader := dialPeer(t, st.Leader, testSecret)
	var follower string
	for _, a := range tc.addrs {
		if a != st.Leader {
			follower = a
		}
	}
	_, err := leader.ReplicaFetch(ctx, peer.ReplicaFetch{Topic: "f", Follower: follower, Epoch: st.Epoch + 1, Offset: 0})
	if !isCode(err, protocol.CodeFencedEpoch) {
		t.Fatalf("a fetch under a newer epoch: %v, want fenced epoch", err)
	}
	if _, err = leader.ReplicaFetch(ctx, peer.ReplicaFetch{Topic: "f", Follower: "10.9.9.9:1", Epoch: st.Epoch}); !isCode(err, protocol.CodeInvalidArgument) {
		t.Fatalf("a fetch from a server that is no replica: %v, want invalid argument", err)
	}
	r, err := leader.ReplicaFetch(ctx, peer.ReplicaFetch{Topic: "f", Follower: follower, Epoch: st.Epoch, Offset: 0})
	if err != nil || r.BatchEpoch != 1 || r.NextOffset != 2 || len(r.Batches) == 0 {
		t.Fatalf("a fetch at 0: %+v, %v", r, err)
	}
	// With Buf, an answer that fits is read into it, and one that does
	// not leaves Buf holding the larger buffer it was read into.
	buf := make([]byte, 0, 64<<10)
	for range 2 {
		r2, err := leader.ReplicaFetch(ctx, peer.ReplicaFetch{Topic: "f", Follower: follower, Epoch: st.Epoch, Offset: 0, Buf: &buf})
		if err != nil || !bytes.Equal(r2.Batches, r.Batches) || cap(buf) != 64<<10 {
			t.Fatalf("a fetch into a buffer: %+v, %v; buffer of %d bytes left", r2, err, cap(buf))
		}
		clear(buf[:cap(buf)])
		if !bytes.Equal(r2.Batches, make([]byte, len(r2.Batches))) {
			t.Fatal("the batches were not read into the buffer given")
		}
	}
	small := make([]byte, 0, 8)
	if _, err := leader.ReplicaFetch(ctx, peer.ReplicaFetch{Topic: "f", Follower: follower, Epoch: st.Epoch, Offset: 0, Buf: &small}); err != nil || cap(small) <= 8 {
		t.Fatalf("a fetch into a buffer too small: %v; the buffer left of %d bytes", err, cap(small))
	}
	if _, err := dialPeer(t, follower, testSecret).ReplicaFetch(ctx, peer.ReplicaFetch{Topic: "f", Follower: st.Leader, Epoch: st.Epoch}); !isCode(err, protocol.CodeNotLeader) {
		t.Fatalf("a fetch from a follower: %v, want not leader", err)
	}
	found, end, err := leader.EpochEnd(ctx, "f", 7)
	if err != nil || found != st.Epoch || end != 2 {
		t.Fatalf("epoch end of 7: %d %d %v, want %d 2", found, end, err, st.Epoch)
	}
	found, end, err = leader.EpochEnd(ctx, "f", 0)
	if err != nil || found != -1 || end != 0 {
		t.Fatalf("epoch end of 0: %d %d %v, want -1 0", found, end, err)
	}
}
