package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/peer"
	"github.com/haraqa/haraqa/broker/server"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// This file: a follower copies every topic it follows from a leader over
// one connection (replica wait, op 24).

// allTopics returns every replicated topic's status on c's server.
func allTopics(t *testing.T, c *client.Client) []topicStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := statusJSON(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Topics []topicStatus `json:"topics"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return st.Topics
}

// TestClusterManyTopicsOneConnection: 500 topics of 3 replicas on 3
// servers, with the leaders' -max-conns-per-addr at its default (128).
// When each followed topic took a connection of its own, past 64 topics
// led by one server (both followers share 127.0.0.1) the followers'
// fetches were refused: in-sync sets shrank to 1 and acks=all produces
// failed. Now every in-sync set is full, an acks=all produce to each
// topic succeeds, no connection is refused, and each server holds a
// handful of connections.
func TestClusterManyTopicsOneConnection(t *testing.T) {
	const topics = 500
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tc := startTestCluster(t, 3, 3, 2, noDetection)
	for i := range tc.cfgs {
		if got := tc.cfgs[i].Broker.MaxConnsPerAddr; got != 128 {
			t.Fatalf("server %d: -max-conns-per-addr %d, want the default 128", i, got)
		}
	}
	// A create asks every server for the topic first, each within the
	// locate timeout, on the connection that carries the other 15
	// goroutines' creates, each a Raft commit run in order: with both
	// cores busy the answer waited behind them past the default 2 s, and
	// the live owner was taken as down. No server is down here.
	c := dialAll(t, tc.addrs, client.WithAcks(client.AcksAll), client.WithIdempotence(true), client.WithLocateTimeout(time.Minute),
		client.WithAttemptTimeout(15*time.Second)) // a create (a Raft commit) may take longer than an attempt's second under load
	name := func(i int) string { return fmt.Sprintf("many.%03d", i) }
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, topics)
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < topics; i = int(next.Add(1) - 1) {
				if err := c.CreateTopic(ctx, name(i)); err != nil {
					errs <- fmt.Errorf("create %s: %w", name(i), err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	status := dialOne(t, tc.addrs[0])
	deadline := time.Now().Add(90 * time.Second)
	for {
		full := 0
		for _, ts := range allTopics(t, status) {
			if len(ts.ISR) == 3 {
				full++
			}
		}
		if full == topics {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d topics with 3 in sync within 90 s", full, topics)
		}
		time.Sleep(100 * time.Millisecond)
	}
	next.Store(0)
	failed := make(chan error, topics)
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < topics; i = int(next.Add(1) - 1) {
				if _, err := c.Produce(ctx, name(i), []byte("m")); err != nil {
					failed <- fmt.Errorf("produce to %s: %w", name(i), err)
				}
			}
		})
	}
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Error(err)
	}
	for i, s := range tc.servers {
		st := s.Broker().Stats()
		if st.RefusedConns != 0 || st.Connections > 32 {
			t.Errorf("server %d: %d connections refused, %d open; want none refused and a handful open", i, st.RefusedConns, st.Connections)
		}
	}
}

// TestClusterReplicaWaitIdleDoesNotHoldBusy: on one connection to a
// leader, a replica wait that lists an idle topic and a busy one, both at
// their end, is answered as soon as the busy one takes a batch, however
// long the wait (5 s here), naming only it; the busy topic's fetch on
// the same connection is then answered at once with the batch. The
// followers, whose waits last 5 s too, acknowledge acks=all produces to
// the busy topic well within that while the idle one stays idle.
func TestClusterReplicaWaitIdleDoesNotHoldBusy(t *testing.T) {
	const wait = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tc := startTestCluster(t, 3, 3, 2, noDetection, func(_ int, cfg *server.Config) { cfg.Cluster.FetchWait = wait })
	c := dialAll(t, tc.addrs, client.WithAcks(client.AcksAll))
	// Idle topics enough that one likely shares the busy one's leader.
	names := []string{"busy"}
	for i := range 10 {
		names = append(names, fmt.Sprintf("idle.%d", i))
	}
	for _, topic := range names {
		if err := c.CreateTopic(ctx, topic); err != nil {
			t.Fatal(err)
		}
	}
	st := waitTopic(t, dialOne(t, tc.addrs[0]), "busy", "three in sync", func(s topicStatus) bool { return len(s.ISR) == 3 })
	for i := range 10 {
		start := time.Now()
		if _, err := c.Produce(ctx, "busy", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > wait/2 {
			t.Fatalf("produce %d with acks=all took %v: held behind the idle topic's wait (%v)", i, d, wait)
		}
	}

	// The same, on the wire, as a follower of an idle topic and the busy
	// one, both led by the same server.
	var idle topicStatus
	for _, ts := range allTopics(t, dialOne(t, st.Leader)) {
		if ts.Name != "busy" && ts.Leader == st.Leader {
			idle = ts
		}
	}
	if idle.Name == "" {
		t.Skip("no idle topic shares the busy one's leader")
	}
	follower := st.ISR[slices.IndexFunc(st.ISR, func(id string) bool { return id != st.Leader })]
	lc := dialOneWith(t, st.Leader, client.WithToken(testSecret))
	lp := dialPeer(t, st.Leader, testSecret)
	producer := dialOne(t, st.Leader)
	ends := func(topic string) (int64, int64) {
		ts := topicOf(t, lc, topic)
		return ts.Next, ts.HighWater
	}
	idleNext, idleHW := ends(idle.Name)
	busyNext, busyHW := ends("busy")
	go func() {
		time.Sleep(200 * time.Millisecond)
		_, _ = producer.Produce(ctx, "busy", []byte("wake"))
	}()
	start := time.Now()
	ready, err := lp.ReplicaWait(ctx, peer.ReplicaWait{Follower: follower, Wait: wait, Topics: []protocol.ReplicaWaitTopic{
		{Epoch: idle.Epoch, Offset: idleNext, HighWater: idleHW, Topic: []byte(idle.Name)},
		{Epoch: st.Epoch, Offset: busyNext, HighWater: busyHW, Topic: []byte("busy")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > wait/2 || len(ready) != 1 || ready[0].Index != 1 || !ready[0].Fetch {
		t.Fatalf("after %v: ready %+v, want the busy topic (1) to fetch, long before %v", d, ready, wait)
	}
	start = time.Now()
	r, err := lp.ReplicaFetch(ctx, peer.ReplicaFetch{Topic: "busy", Follower: follower, Epoch: st.Epoch, Offset: busyNext})
	if err != nil || len(r.Batches) == 0 || time.Since(start) > wait/2 {
		t.Fatalf("the busy topic's fetch after %v: %d bytes, %v", time.Since(start), len(r.Batches), err)
	}
}

// TestClusterFollowerGoneLeavesAllInSyncSets: a follower killed without
// a hand-off leaves the in-sync set of every topic it followed from a
// leader over their one connection, at once: with a member timeout and
// a lag time of a minute only the connection's closing can do it.
func TestClusterFollowerGoneLeavesAllInSyncSets(t *testing.T) {
	const topics = 12
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tc := startTestCluster(t, 3, 3, 2, noDetection)
	c := dialAll(t, tc.addrs)
	for i := range topics {
		if err := c.CreateTopic(ctx, fmt.Sprintf("gone.%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	gone := 2
	status := dialOne(t, tc.addrs[0])
	waitStatus(t, status, "every topic three in sync", func(st struct{ Topics []topicStatus }) bool {
		n := 0
		for _, ts := range st.Topics {
			if len(ts.ISR) == 3 {
				n++
			}
		}
		return n == topics
	})
	// One acks=all produce to each: every follower has fetched every
	// topic, so its connection to each leader carries them all.
	for i := range topics {
		if _, err := c.Produce(ctx, fmt.Sprintf("gone.%02d", i), []byte("m")); err != nil {
			t.Fatal(err)
		}
	}
	followed := 0
	for _, ts := range allTopics(t, status) {
		if ts.Leader != tc.addrs[gone] {
			followed++
		}
	}
	if followed < 2 {
		t.Skipf("server %d follows %d topics", gone, followed)
	}
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	if err := tc.servers[gone].ShutdownWithoutHandOff(sctx); err != nil {
		t.Fatal(err)
	}
	scancel()
	tc.servers[gone] = nil
	waitStatus(t, status, "the gone follower out of every in-sync set it was in by a live leader", func(st struct{ Topics []topicStatus }) bool {
		for _, ts := range st.Topics {
			if ts.Leader != tc.addrs[gone] && slices.Contains(ts.ISR, tc.addrs[gone]) {
				return false
			}
		}
		return len(st.Topics) == topics
	})
}
