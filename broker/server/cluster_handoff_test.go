package server_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/server"
	"github.com/haraqa/haraqa/client"
)

// slowDetection starts three servers whose controller finds a member down
// only after a minute, and whose leaders drop a lagging follower only
// after a minute, so that what changes sooner is the work of something
// else; it creates topic (R=3, -min-insync 2) and produces n messages
// (producing's m00000...) through an idempotent client of all three, once
// all three are in sync. It returns the topic's status then, and the
// messages acknowledged.
func slowDetection(t *testing.T, ctx context.Context, topic string, n int) (*testCluster, *client.Client, topicStatus, []string) {
	t.Helper()
	tc := startTestCluster(t, 3, 3, 2, noDetection)
	c := dialAll(t, tc.addrs, client.WithIdempotence(true))
	if err := c.CreateTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	var acked []string
	producing(t, ctx, c, topic, &acked)(n)
	st := waitTopic(t, dialOne(t, tc.addrs[0]), topic, fmt.Sprintf("%d messages, three in sync", n), func(st topicStatus) bool {
		return len(st.ISR) == 3 && st.HighWater == int64(n)
	})
	return tc, c, st, acked
}

// backInSync starts server i again, waits until the topic's leader has
// all three in sync, produces 10 more messages and checks that every
// server holds every acknowledged message once, in order.
func backInSync(t *testing.T, ctx context.Context, tc *testCluster, c *client.Client, i int, leader, topic string, acked []string) {
	t.Helper()
	tc.start(i)
	waitTopic(t, dialOne(t, leader), topic, "three in sync again", func(s topicStatus) bool {
		return len(s.ISR) == 3
	})
	producing(t, ctx, c, topic, &acked)(10)
	for _, a := range tc.addrs {
		checkTopic(t, dialOne(t, a), topic, acked)
	}
}

// TestClusterHandOffOnShutdown: a member that stops gracefully hands its
// leads to in-sync replicas and leaves the in-sync sets it was in before
// it goes, so that producers go on at once; with a member timeout and a
// lag time longer than the test's waits, only the hand-off can have made
// the changes. A follower that stops leaves the in-sync set too, and
// acks=all goes on with the two left.
func TestClusterHandOffOnShutdown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic = "handed"
	tc, c, st, acked := slowDetection(t, ctx, topic, 100)
	old := st.Leader
	tc.stop(tc.index(old))
	var live []string
	for _, a := range tc.addrs {
		if a != old {
			live = append(live, a)
		}
	}
	st = waitTopic(t, dialOne(t, live[0]), topic, "the lead handed off", func(s topicStatus) bool {
		return s.Leader != "" && s.Leader != old && s.Epoch == st.Epoch+1 && !slices.Contains(s.ISR, old) && len(s.ISR) == 2
	})
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	produce := producing(t, pctx, c, topic, &acked)
	produce(50) // no wait for the stopped leader: it is out of the in-sync set
	pcancel()
	// The old leader back and in sync; then a follower stops, and leaves
	// the in-sync set as it goes.
	tc.start(tc.index(old))
	waitTopic(t, dialOne(t, st.Leader), topic, "three in sync again", func(s topicStatus) bool {
		return len(s.ISR) == 3
	})
	var follower string
	for _, a := range tc.addrs {
		if a != st.Leader {
			follower = a
		}
	}
	tc.stop(tc.index(follower))
	waitTopic(t, dialOne(t, st.Leader), topic, "the follower out of the in-sync set", func(s topicStatus) bool {
		return s.Leader == st.Leader && len(s.ISR) == 2 && !slices.Contains(s.ISR, follower)
	})
	pctx, pcancel = context.WithTimeout(ctx, 10*time.Second)
	produce = producing(t, pctx, c, topic, &acked)
	produce(50) // no wait for the stopped follower
	pcancel()
	backInSync(t, ctx, tc, c, tc.index(follower), st.Leader, topic, acked)
}

// TestClusterFollowerGoneLeavesInSyncSet: a follower that goes without a
// hand-off (as a killed one does) leaves the in-sync set as soon as its
// fetch connection closes: with a member timeout and a lag time of a
// minute, nothing else can take it out within the test's waits, and
// acks=all goes on with the two left. Back, it is taken in again once it
// has caught up.
func TestClusterFollowerGoneLeavesInSyncSet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic = "gone"
	tc, c, st, acked := slowDetection(t, ctx, topic, 50)
	follower := st.ISR[1]
	i := tc.index(follower)
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	if err := tc.servers[i].ShutdownWithoutHandOff(sctx); err != nil {
		t.Fatal(err)
	}
	scancel()
	tc.servers[i] = nil
	waitTopic(t, dialOne(t, st.Leader), topic, "the gone follower out of the in-sync set", func(s topicStatus) bool {
		return s.Leader == st.Leader && len(s.ISR) == 2 && !slices.Contains(s.ISR, follower)
	})
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	produce := producing(t, pctx, c, topic, &acked)
	produce(20)
	pcancel()
	backInSync(t, ctx, tc, c, i, st.Leader, topic, acked)
}

// TestClusterHandOffKeepsAcksLeaderTail: a leader that stops gracefully
// first lets its in-sync followers copy what it appended, so that the
// replica it hands the lead to holds every batch it acknowledged with
// acks=leader. The followers fetch one small batch at a time, so that
// they are far behind when the leader stops: without the drain, the
// batches they had not fetched were gone with the lead.
func TestClusterHandOffKeepsAcksLeaderTail(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic = "tail"
	tc := startTestCluster(t, 3, 3, 2, func(i int, cfg *server.Config) {
		cfg.Cluster.FetchBytes = 1 // one batch a fetch
	})
	c := dialAll(t, tc.addrs, client.WithIdempotence(true), client.WithAcks(client.AcksLeader))
	if err := c.CreateTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	st := waitTopic(t, dialOne(t, tc.addrs[0]), topic, "three in sync", func(s topicStatus) bool {
		return len(s.ISR) == 3
	})
	// A Producer keeps several batches in flight, so that the leader
	// runs ahead of followers that take one batch a fetch.
	p := c.NewProducer(topic, client.WithBatchSize(8), client.WithMaxInFlight(8), client.WithLinger(0))
	defer p.Close()
	pad := strings.Repeat("x", 2000)
	acked := make([]string, 2000)
	futures := make([]*client.Future, len(acked))
	for i := range acked {
		acked[i] = fmt.Sprintf("m%04d-%s", i, pad)
		f, err := p.Send(ctx, []byte(acked[i]))
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		futures[i] = f
	}
	for i, f := range futures {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	old := st.Leader
	tc.stop(tc.index(old))
	for _, a := range tc.addrs {
		if a != old {
			checkTopic(t, dialOne(t, a), topic, acked)
		}
	}
}
