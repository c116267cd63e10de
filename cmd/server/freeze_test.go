package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/client/admin"
)

// clusterProcs starts three server processes of bin as one cluster of
// topics on three replicas (-min-insync 2, the other flags their
// defaults) and returns them with their binary addresses.
func clusterProcs(t *testing.T, bin string) ([]*process, []string) {
	t.Helper()
	var addrs, entries []string
	for range 3 {
		tcp, web, clu := freePort(t), freePort(t), freePort(t)
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", tcp))
		entries = append(entries, fmt.Sprintf("127.0.0.1:%d/%d/%d", tcp, web, clu))
	}
	secret := filepath.Join(t.TempDir(), "cluster.token")
	if err := os.WriteFile(secret, []byte("freeze-test-cluster-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var procs []*process
	for i, a := range addrs {
		web, clu, _ := strings.Cut(strings.SplitN(entries[i], "/", 2)[1], "/")
		_, tcp, _ := strings.Cut(a, ":")
		procs = append(procs, startProcess(t, bin, "-listen", "127.0.0.1", "-tcp", tcp, "-http", web, "-cluster-port", clu,
			"-cluster", "-replicas", "3", "-min-insync", "2", "-cluster-token-file", secret, "-peers", strings.Join(entries, ","), t.TempDir()))
	}
	for _, p := range procs {
		p.waitServing()
	}
	return procs, addrs
}

// leaderOf waits until the cluster names a leader of topic with three
// in-sync replicas, and returns it.
func leaderOf(t *testing.T, c *client.Client, topic string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := admin.New(c).ClusterStatus(ctx)
		cancel()
		if err == nil {
			for _, ts := range st.Topics {
				if ts.Name == topic && ts.Leader != "" && len(ts.ISR) == 3 {
					return ts.Leader
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader of %s with three in sync within 30 s: %+v %v", topic, st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestFrozenLeaderProducersMove: the leader of a replicated topic is
// frozen (SIGSTOP) for 8 s while producers run through Clients of the
// three servers. The idempotent producer's acknowledgements stop for no
// longer than about the member timeout, an election and an attempt
// timeout (without the attempt bound: the whole freeze), and every
// message acknowledged is stored once; the producer without idempotence
// gets answers as soon, each an offset or ErrOutcomeUnknown.
func TestFrozenLeaderProducersMove(t *testing.T) {
	if testing.Short() {
		t.Skip("three server processes and an 8 s freeze")
	}
	bin := buildServer(t, t.TempDir())
	procs, addrs := clusterProcs(t, bin)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	idem, err := client.Dial(ctx, strings.Join(addrs, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer idem.Close()
	once, err := client.Dial(ctx, strings.Join(addrs, ","), client.WithIdempotence(false))
	if err != nil {
		t.Fatal(err)
	}
	defer once.Close()
	const topic = "frozen"
	if err := idem.CreateTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	leader, frozen := leaderIndex(t, idem, topic, addrs)

	// Each producer sends one message at a time and notes the longest
	// wait for an answer, and, for the idempotent one, between two
	// acknowledgements.
	type run struct {
		acked             []string
		maxGap, maxAnswer time.Duration
		unknown           int
		err               error
	}
	stop := make(chan struct{})
	produce := func(c *client.Client, name string, r *run) {
		last := time.Now()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			msg := fmt.Sprintf("%s%05d", name, i)
			start := time.Now()
			_, err := c.Produce(ctx, topic, []byte(msg))
			now := time.Now()
			r.maxAnswer = max(r.maxAnswer, now.Sub(start))
			switch {
			case err == nil:
				r.acked = append(r.acked, msg)
				r.maxGap = max(r.maxGap, now.Sub(last))
				last = now
			case errors.Is(err, client.ErrOutcomeUnknown):
				r.unknown++
			default:
				r.err = fmt.Errorf("produce %s: %w", msg, err)
				return
			}
		}
	}
	var wg sync.WaitGroup
	var ri, ro run
	wg.Go(func() { produce(idem, "i", &ri) })
	wg.Go(func() { produce(once, "o", &ro) })

	freezeFor8s(t, procs[frozen], leader)
	close(stop)
	wg.Wait()
	t.Logf("idempotent: %d acked, longest without an acknowledgement %v, longest answer %v", len(ri.acked), ri.maxGap, ri.maxAnswer)
	t.Logf("without idempotence: %d acked, %d outcome unknown, longest answer %v", len(ro.acked), ro.unknown, ro.maxAnswer)
	if ri.err != nil || ro.err != nil {
		t.Fatalf("producers failed: %v; %v", ri.err, ro.err)
	}
	// The default member timeout (1.5 s) and an election (about 1 s),
	// the attempt timeout (1 s) and slack for a loaded machine: well
	// short of the 8 s freeze.
	const bound = 5 * time.Second
	if ri.maxGap > bound || ro.maxAnswer > bound {
		t.Fatalf("a frozen leader held produces %v (idempotent, between acknowledgements) and %v (without idempotence, one answer); want at most %v",
			ri.maxGap, ro.maxAnswer, bound)
	}

	// Every acknowledged message of the idempotent producer is stored
	// once.
	seen := map[string]int{}
	var next int64
	for {
		msgs, err := idem.Consume(ctx, topic, next, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			seen[string(m.Value)]++
			next = m.Offset + 1
		}
	}
	for _, m := range ri.acked {
		if seen[m] != 1 {
			t.Errorf("acknowledged %s stored %d times", m, seen[m])
		}
	}
}

// TestFrozenLeaderProducerMoves: the leader of a replicated topic is
// frozen (SIGSTOP) for 8 s while an idempotent client.Producer (four
// batches in flight, a short linger) sends through a Client of the three
// servers. Its batches in flight on the frozen leader are sent again to
// the new one once the others name it, so acknowledgements stop for no
// longer than about the member timeout, an election and an attempt
// timeout (without the attempt bound: the whole freeze); every message
// acknowledged is stored once, at the offset acknowledged, and offsets
// follow Send order.
func TestFrozenLeaderProducerMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("three server processes and an 8 s freeze")
	}
	bin := buildServer(t, t.TempDir())
	procs, addrs := clusterProcs(t, bin)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, strings.Join(addrs, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const topic = "frozen-producer"
	if err := c.CreateTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	leader, frozen := leaderIndex(t, c, topic, addrs)
	p := c.NewProducer(topic, client.WithMaxInFlight(4), client.WithLinger(2*time.Millisecond))

	// One goroutine sends a message about every millisecond, another
	// waits for their futures in Send order and notes the longest time
	// between two acknowledgements.
	type sent struct {
		msg string
		f   *client.Future
	}
	futures := make(chan sent, 1<<16)
	stop := make(chan struct{})
	var sendErr error
	var sending, waiting sync.WaitGroup
	sending.Go(func() {
		defer close(futures)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			msg := fmt.Sprintf("p%06d", i)
			f, err := p.Send(ctx, []byte(msg))
			if err != nil {
				sendErr = fmt.Errorf("send %s: %w", msg, err)
				return
			}
			futures <- sent{msg, f}
		}
	})
	acked := map[string]int64{}
	var order []string
	var maxGap time.Duration
	var ackErr error
	waiting.Go(func() {
		last := time.Now()
		for s := range futures {
			off, err := s.f.Wait(ctx)
			if err != nil {
				ackErr = fmt.Errorf("message %s: %w", s.msg, err)
				return
			}
			now := time.Now()
			maxGap = max(maxGap, now.Sub(last))
			last = now
			acked[s.msg] = off
			order = append(order, s.msg)
		}
	})

	freezeFor8s(t, procs[frozen], leader)
	close(stop)
	sending.Wait()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	waiting.Wait()
	t.Logf("producer: %d acked, longest without an acknowledgement %v", len(order), maxGap)
	if sendErr != nil || ackErr != nil {
		t.Fatalf("producer failed: %v; %v", sendErr, ackErr)
	}
	// As TestFrozenLeaderProducersMove: the member timeout, an election,
	// the attempt timeout and slack for a loaded machine.
	const bound = 5 * time.Second
	if maxGap > bound {
		t.Fatalf("a frozen leader held the producer's acknowledgements %v; want at most %v", maxGap, bound)
	}

	// Offsets follow Send order, and every acknowledged message is
	// stored once, at its offset.
	for i := 1; i < len(order); i++ {
		if a, b := acked[order[i-1]], acked[order[i]]; b <= a {
			t.Fatalf("%s acknowledged at %d, after %s at %d: offsets do not follow Send order", order[i], b, order[i-1], a)
		}
	}
	seen := map[string][]int64{}
	var next int64
	for {
		msgs, err := c.Consume(ctx, topic, next, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			seen[string(m.Value)] = append(seen[string(m.Value)], m.Offset)
			next = m.Offset + 1
		}
	}
	for _, m := range order {
		if got := seen[m]; len(got) != 1 || got[0] != acked[m] {
			t.Errorf("acknowledged %s at %d, stored at %v", m, acked[m], got)
		}
	}
}

// leaderIndex returns topic's leader as c's servers see it, and its index
// in addrs.
func leaderIndex(t *testing.T, c *client.Client, topic string, addrs []string) (string, int) {
	t.Helper()
	leader := leaderOf(t, c, topic)
	i := slices.Index(addrs, leader)
	if i < 0 {
		t.Fatalf("leader %s is none of %v", leader, addrs)
	}
	return leader, i
}

// freezeFor8s lets the producers run for a second, freezes p, the leader,
// with SIGSTOP for 8 s, then lets them run 2 s more after SIGCONT.
func freezeFor8s(t *testing.T, p *process, leader string) {
	t.Helper()
	time.Sleep(time.Second) // steady producing first
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Logf("froze %s, the leader", leader)
	time.Sleep(8 * time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
}
