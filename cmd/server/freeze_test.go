package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
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
	var procs []*process
	for i, a := range addrs {
		web, clu, _ := strings.Cut(strings.SplitN(entries[i], "/", 2)[1], "/")
		_, tcp, _ := strings.Cut(a, ":")
		procs = append(procs, startProcess(t, bin, "-listen", "127.0.0.1", "-tcp", tcp, "-http", web, "-cluster-port", clu,
			"-cluster", "-replicas", "3", "-min-insync", "2", "-peers", strings.Join(entries, ","), t.TempDir()))
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
		b, err := c.ClusterStatus(ctx)
		cancel()
		var st struct {
			Topics []struct {
				Name   string   `json:"name"`
				Leader string   `json:"leader"`
				ISR    []string `json:"isr"`
			} `json:"topics"`
		}
		if err == nil && json.Unmarshal(b, &st) == nil {
			for _, ts := range st.Topics {
				if ts.Name == topic && ts.Leader != "" && len(ts.ISR) == 3 {
					return ts.Leader
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader of %s with three in sync within 30 s: %s %v", topic, b, err)
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
	leader := leaderOf(t, idem, topic)
	frozen := -1
	for i, a := range addrs {
		if a == leader {
			frozen = i
		}
	}
	if frozen < 0 {
		t.Fatalf("leader %s is none of %v", leader, addrs)
	}

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

	time.Sleep(time.Second) // steady producing first
	if err := procs[frozen].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Logf("froze %s, the leader", leader)
	time.Sleep(8 * time.Second)
	if err := procs[frozen].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
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
