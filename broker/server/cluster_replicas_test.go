package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/server"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/client/admin"
)

// TestClusterSetReplicas: on a cluster whose default is one replica, a
// topic is created on three (op 22), a topic of one grows to three with
// its log copied, and a topic of three shrinks to one: the servers it
// leaves delete their copies, and the one that keeps it holds every
// message. A factor above the members, or while the topic moves, is
// refused.
func TestClusterSetReplicas(t *testing.T) {
	tc := startTestCluster(t, 3, 1, 1)
	c := dialAll(t, tc.addrs)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	status := dialOne(t, tc.addrs[0])

	if err := admin.New(c).SetReplicas(ctx, "three", 3); err != nil {
		t.Fatal(err)
	}
	var three []string
	producing(t, ctx, c, "three", &three)(20)
	waitTopic(t, status, "three", "created on three replicas", func(st topicStatus) bool {
		return len(st.Replicas) == 3 && len(st.ISR) == 3 && st.HighWater == 20
	})

	if err := c.CreateTopic(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	var one []string
	producing(t, ctx, c, "one", &one)(30)
	if st := waitTopic(t, status, "one", "recorded", func(st topicStatus) bool { return st.Name != "" }); len(st.Replicas) != 1 {
		t.Fatalf("the default: %+v, want one replica", st)
	}
	if err := admin.New(c).SetReplicas(ctx, "one", 4); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("4 replicas on 3 servers: %v, want invalid argument", err)
	}
	if err := admin.New(c).SetReplicas(ctx, "one", 3); err != nil {
		t.Fatal(err)
	}
	waitTopic(t, status, "one", "grown to three replicas", func(st topicStatus) bool {
		return len(st.Replicas) == 3 && len(st.ISR) == 3 && len(st.Target) == 0
	})
	for _, a := range tc.addrs {
		checkTopic(t, dialOne(t, a), "one", one)
	}
	producing(t, ctx, c, "one", &one)(5) // acks=all on three now

	if err := admin.New(c).SetReplicas(ctx, "three", 1); err != nil {
		t.Fatal(err)
	}
	st := waitTopic(t, status, "three", "shrunk to one replica", func(st topicStatus) bool {
		return len(st.Replicas) == 1 && len(st.Target) == 0 && st.Leader == st.Replicas[0]
	})
	for _, a := range tc.addrs {
		if a == st.Replicas[0] {
			checkTopic(t, dialOne(t, a), "three", three)
			continue
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			topics, err := dialOne(t, a).ListTopics(ctx, "")
			if err == nil && !slices.Contains(topics, "three") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s keeps its copy of a topic it no longer holds: %v %v", a, topics, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	producing(t, ctx, c, "three", &three)(5)
	checkTopic(t, dialOne(t, st.Replicas[0]), "three", three)

	// The HTTP port: the same service call (PUT ?replicas=).
	web := "http://" + tc.cfgs[0].HTTPAddr + "/topics/web"
	for _, step := range []struct {
		q    string
		code int
	}{{"replicas=2", http.StatusCreated}, {"replicas=0", http.StatusBadRequest}, {"replicas=4", http.StatusBadRequest}} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, web+"?"+step.q, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != step.code {
			t.Fatalf("PUT ?%s: %d, want %d", step.q, resp.StatusCode, step.code)
		}
	}
	waitTopic(t, status, "web", "created on two replicas over HTTP", func(st topicStatus) bool {
		return len(st.Replicas) == 2 && len(st.ISR) == 2
	})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, web+"?replicas=3", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("PUT ?replicas=3 of an existing topic: %d, want 202", resp.StatusCode)
	}
	waitTopic(t, status, "web", "grown to three over HTTP", func(st topicStatus) bool {
		return len(st.Replicas) == 3 && len(st.ISR) == 3 && len(st.Target) == 0
	})
}

// TestClusterLeaderGoesBack: with -leader-balance, a topic's first
// replica that led it, stopped and back in sync, takes the lead back
// while an idempotent client produces; every acknowledged message is on
// every replica once, in order.
func TestClusterLeaderGoesBack(t *testing.T) {
	tc := startTestCluster(t, 3, 3, 2, func(_ int, cfg *server.Config) { cfg.Cluster.LeaderBalance = 500 * time.Millisecond })
	c := dialAll(t, tc.addrs, client.WithIdempotence(true))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.CreateTopic(ctx, "back"); err != nil {
		t.Fatal(err)
	}
	var acked []string
	produce := producing(t, ctx, c, "back", &acked)
	produce(50)
	st := waitTopic(t, dialOne(t, tc.addrs[0]), "back", "in sync", func(st topicStatus) bool { return len(st.ISR) == 3 })
	first := st.Replicas[0]
	if st.Leader != first {
		t.Fatalf("created: %+v, want its first replica leading", st)
	}
	tc.stop(tc.index(first))
	produce(50)
	other := tc.addrs[(tc.index(first)+1)%3]
	waitTopic(t, dialOne(t, other), "back", "another leader", func(st topicStatus) bool { return st.Leader != "" && st.Leader != first })
	tc.start(tc.index(first))
	watch := dialOne(t, other)
	deadline := time.Now().Add(30 * time.Second)
	for topicOf(t, watch, "back").Leader != first {
		if time.Now().After(deadline) {
			t.Fatalf("the lead never went back to %s: %+v", first, topicOf(t, watch, "back"))
		}
		produce(5)
	}
	produce(50)
	waitTopic(t, dialOne(t, other), "back", "in sync again", func(st topicStatus) bool { return len(st.ISR) == 3 && st.Epoch >= 3 })
	for _, a := range tc.addrs {
		checkTopic(t, dialOne(t, a), "back", acked)
	}
}

// TestClusterLeaderGoesBackKeepsAcksLeaderTail: the leader that hands a
// topic back to its first replica drains it first, so that the first
// replica holds every batch acknowledged with acks=leader when it takes
// the lead. The followers fetch one small batch at a time and bursts of
// batches keep them behind for much of the run; the lag time is a minute,
// so that a follower behind stays in the in-sync set.
func TestClusterLeaderGoesBackKeepsAcksLeaderTail(t *testing.T) {
	tc := startTestCluster(t, 3, 3, 2, func(_ int, cfg *server.Config) {
		cfg.Cluster.LeaderBalance = 500 * time.Millisecond
		cfg.Cluster.LagTime = time.Minute
		cfg.Cluster.FetchBytes = 1 // one batch a fetch
	})
	c := dialAll(t, tc.addrs, client.WithIdempotence(true), client.WithAcks(client.AcksLeader))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := c.CreateTopic(ctx, "tailback"); err != nil {
		t.Fatal(err)
	}
	st := waitTopic(t, dialOne(t, tc.addrs[0]), "tailback", "in sync", func(st topicStatus) bool { return len(st.ISR) == 3 })
	first := st.Replicas[0]
	p := c.NewProducer("tailback", client.WithBatchSize(8), client.WithMaxInFlight(8), client.WithLinger(0))
	defer p.Close()
	burst, acked := bursts(t, ctx, p)
	burst(200)
	tc.stop(tc.index(first))
	other := tc.addrs[(tc.index(first)+1)%3]
	waitTopic(t, dialOne(t, other), "tailback", "another leader", func(st topicStatus) bool { return st.Leader != "" && st.Leader != first })
	burst(200)
	tc.start(tc.index(first))
	watch := dialOne(t, other)
	for topicOf(t, watch, "tailback").Leader != first {
		if ctx.Err() != nil {
			t.Fatalf("the lead never went back to %s: %+v", first, topicOf(t, watch, "tailback"))
		}
		burst(800)
		time.Sleep(100 * time.Millisecond) // the followers catch up between bursts
	}
	burst(200)
	for _, a := range tc.addrs {
		checkTopic(t, dialOne(t, a), "tailback", *acked)
	}
}

// TestClusterMoveOffLeaderKeepsAcksLeaderTail: a topic moved off its
// leader (the member removed) is handed to the new leader by the old one,
// drained first, so that the new leader holds every batch acknowledged
// with acks=leader. The followers fetch one small batch at a time and
// bursts of batches keep them behind.
func TestClusterMoveOffLeaderKeepsAcksLeaderTail(t *testing.T) {
	tc := startTestCluster(t, 3, 2, 1, func(_ int, cfg *server.Config) {
		cfg.Cluster.LagTime = time.Minute
		cfg.Cluster.FetchBytes = 1 // one batch a fetch
	})
	c := dialAll(t, tc.addrs, client.WithIdempotence(true), client.WithAcks(client.AcksLeader))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := c.CreateTopic(ctx, "moved"); err != nil {
		t.Fatal(err)
	}
	st := waitTopic(t, dialOne(t, tc.addrs[0]), "moved", "in sync", func(st topicStatus) bool { return len(st.ISR) == 2 })
	leader := st.Leader
	p := c.NewProducer("moved", client.WithBatchSize(8), client.WithMaxInFlight(8), client.WithLinger(0))
	defer p.Close()
	burst, acked := bursts(t, ctx, p)
	burst(200)
	other := tc.addrs[(tc.index(leader)+1)%3]
	waitInStep(t, dialOne(t, other))
	if err := admin.New(dialOneWith(t, other, client.WithToken(testSecret))).RemoveMember(ctx, leader); err != nil {
		t.Fatal(err)
	}
	watch := dialOne(t, other)
	for st := topicOf(t, watch, "moved"); st.Leader == leader || slices.Contains(st.Replicas, leader); st = topicOf(t, watch, "moved") {
		if ctx.Err() != nil {
			t.Fatalf("the topic never moved off %s: %+v", leader, st)
		}
		burst(2000)
		time.Sleep(300 * time.Millisecond) // the followers catch up between bursts
	}
	burst(200)
	st = topicOf(t, watch, "moved")
	for _, a := range st.Replicas {
		checkTopic(t, dialOne(t, a), "moved", *acked)
	}
}

// bursts returns burst, which sends n messages of 506 bytes through p
// ("m00000-000...", numbered on from those before) and waits for each,
// failing the test on an error, and the messages acknowledged so far.
func bursts(t *testing.T, ctx context.Context, p *client.Producer) (burst func(n int), acked *[]string) {
	acked = new([]string)
	msg := func(i int) string { return fmt.Sprintf("m%05d-%0500d", i, 0) }
	return func(n int) {
		t.Helper()
		base := len(*acked)
		futures := make([]*client.Future, n)
		for i := range futures {
			f, err := p.Send(ctx, []byte(msg(base+i)))
			if err != nil {
				t.Fatalf("send %d: %v", base+i, err)
			}
			futures[i] = f
		}
		for i, f := range futures {
			if _, err := f.Wait(ctx); err != nil {
				t.Fatalf("message %d: %v", base+i, err)
			}
			*acked = append(*acked, msg(base+i))
		}
	}, acked
}
