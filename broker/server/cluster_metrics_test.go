package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// metricOf returns the value of the sample of family name for topic in
// a /metrics body, or -1 if there is none.
func metricOf(body, name, topic string) int64 {
	prefix := fmt.Sprintf("%s{topic=%q} ", name, topic)
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// TestClusterCountsReplicationApart: on a topic of three replicas, what
// producers send is counted once, by its leader, as produced; what the
// followers copy is counted as replicated on each follower, and what the
// leader reads for them as replica reads, never as consumed. A consumer's
// read, on any replica, is consumed.
func TestClusterCountsReplicationApart(t *testing.T) {
	tc := startTestCluster(t, 3, 3, 2)
	c := dialAll(t, tc.addrs)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic, n = "counted", 60
	if err := c.CreateTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := c.Produce(ctx, topic, []byte(fmt.Sprintf("m%03d", i))); err != nil {
			t.Fatal(err)
		}
	}
	st := waitTopic(t, dialOne(t, tc.addrs[0]), topic, "every message on three replicas in sync", func(st topicStatus) bool {
		return len(st.ISR) == 3 && st.HighWater == n
	})
	leader := tc.index(st.Leader)
	follower := (leader + 1) % 3
	// A follower serves reads up to the high-water mark it last heard of.
	read, err := dialOne(t, tc.addrs[follower]).Consume(ctx, topic, 0, n)
	if err != nil || len(read) == 0 {
		t.Fatalf("consume on a follower: %d messages, %v", len(read), err)
	}

	type want struct{ produced, replicated, consumed, replicaRead int64 }
	check := func(i int, w want) string {
		code, body := get(t, "http://"+tc.cfgs[i].HTTPAddr+"/metrics")
		if code != http.StatusOK {
			return fmt.Sprintf("/metrics: %d", code)
		}
		got := want{
			metricOf(body, "haraqa_produced_messages_total", topic),
			metricOf(body, "haraqa_replicated_messages_total", topic),
			metricOf(body, "haraqa_consumed_messages_total", topic),
			metricOf(body, "haraqa_replica_read_messages_total", topic),
		}
		// A follower's fetch retried after its answer was read is read
		// again: at least n messages for each follower.
		if got.produced != w.produced || got.replicated != w.replicated || got.consumed != w.consumed ||
			(w.replicaRead == 0) != (got.replicaRead == 0) || got.replicaRead < w.replicaRead {
			return fmt.Sprintf("produced, replicated, consumed, replica read %+v, want %+v", got, w)
		}
		return ""
	}
	// The replicated topic's own series: its leader says it leads, with
	// three replicas in sync and each follower's lag (none, in step);
	// the followers say they follow.
	deadline := time.Now().Add(15 * time.Second)
	for i := range tc.addrs {
		var wants []string
		if i == leader {
			wants = []string{`haraqa_topic_leader{topic="counted"} 1`, `haraqa_topic_replicas{topic="counted"} 3`,
				`haraqa_topic_insync_replicas{topic="counted"} 3`}
			for j, a := range tc.addrs {
				if j != leader {
					wants = append(wants, fmt.Sprintf(`haraqa_topic_replica_lag_messages{replica=%q,topic="counted"} 0`, a),
						fmt.Sprintf(`haraqa_topic_replica_lag_bytes{replica=%q,topic="counted"} 0`, a))
				}
			}
		} else {
			wants = []string{`haraqa_topic_leader{topic="counted"} 0`}
		}
		for {
			_, body := get(t, "http://"+tc.cfgs[i].HTTPAddr+"/metrics")
			missing := ""
			for _, w := range wants {
				if !strings.Contains(body, w+"\n") {
					missing = w
				}
			}
			if missing == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s's /metrics lacks %s", tc.addrs[i], missing)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	for i := range tc.addrs {
		w := want{replicated: n}
		switch i {
		case leader:
			w = want{produced: n, replicaRead: 2 * n}
		case follower:
			w.consumed = int64(len(read))
		}
		// /metrics is served from a snapshot at most 10 s old.
		deadline := time.Now().Add(15 * time.Second)
		for {
			problem := check(i, w)
			if problem == "" {
				break
			}
			if time.Now().After(deadline) {
				role := "follower"
				if i == leader {
					role = "leader"
				}
				t.Fatalf("the %s %s: %s", role, tc.addrs[i], problem)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
