package replica

import (
	"bytes"
	"slices"
	"testing"

	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// TestLagBytes: a follower more than LagBytes of batches behind the
// leader's end is named, one within it or at the end is not.
func TestLagBytes(t *testing.T) {
	opts := storage.DefaultOptions(t.TempDir())
	s, err := storage.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	for range 10 {
		b := protocol.AppendBatch(nil, bytes.Repeat([]byte("x"), 1000))
		if _, err := lg(t, s, "t").Append(b, storage.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, int64(len(b)))
	}
	m := New(s, Config{Self: "a"})
	rl := newReplicaLog(m.shared, "t")
	for _, c := range []struct {
		lagBytes int64
		behind   map[string]int64
		want     string
	}{
		{3 * sizes[0], map[string]int64{"b": 0}, "b"},          // 10 batches behind, 3 allowed
		{3 * sizes[0], map[string]int64{"b": 7}, ""},           // exactly 3 behind
		{3 * sizes[0], map[string]int64{"b": 6}, "b"},          // 4 behind
		{3 * sizes[0], map[string]int64{"b": 10, "c": 8}, ""},  // at the end, 2 behind
		{100 * sizes[0], map[string]int64{"b": 0}, ""},         // within a large bound
		{sizes[0] - 1, map[string]int64{"b": 9, "c": 10}, "b"}, // one batch over a bound below its size
		{3 * sizes[0], map[string]int64{}, ""},                 // no follower behind
	} {
		m.cfg.LagBytes = c.lagBytes
		if got := rl.lagBytes(c.behind); got != c.want {
			t.Errorf("LagBytes %d, behind %v: %q, want %q", c.lagBytes, c.behind, got, c.want)
		}
	}
}

// TestGoneShrink: a follower whose fetch connection closed leaves the
// in-sync set on its leader at once, but only there, only if it is in
// the set, and never below -min-insync or while another change of the
// set is under way.
func TestGoneShrink(t *testing.T) {
	sh := New(nil, Config{Self: "a"}).shared
	topic := func(leader string, isr ...string) *replicaLog {
		return &replicaLog{name: "t", sh: sh, ready: true, meta: cluster.Topic{Name: "t", Leader: leader, Epoch: 3, Version: 7,
			Replicas: []string{"a", "b", "c"}, ISR: isr}}
	}
	for _, tc := range []struct {
		what      string
		rl        *replicaLog
		follower  string
		minInsync int
		want      []string
	}{
		{"in sync, two left", topic("a", "a", "b", "c"), "b", 2, []string{"a", "c"}},
		{"in sync, one left, -min-insync 1", topic("a", "a", "b"), "b", 1, []string{"a"}},
		{"one left under -min-insync 2", topic("a", "a", "b"), "b", 2, nil},
		{"not in the set", topic("a", "a", "c"), "b", 1, nil},
		{"not the leader here", topic("c", "c", "a", "b"), "b", 1, nil},
		{"the leader itself", topic("a", "a", "b", "c"), "a", 1, nil},
	} {
		if got := tc.rl.goneShrink(tc.follower, tc.minInsync); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.what, got, tc.want)
		}
	}
	rl := topic("a", "a", "b", "c")
	rl.altering = true
	if got := rl.goneShrink("b", 1); got != nil {
		t.Errorf("while another change is under way: %v, want none", got)
	}
	rl = topic("a", "a", "b", "c")
	rl.ready = false
	if got := rl.goneShrink("b", 1); got != nil {
		t.Errorf("before the topic is ready here: %v, want none", got)
	}
}

// TestGoneFollowerRetried: a follower whose fetch connection closed
// while another change of the in-sync set was under way (or whose
// removal failed to commit) is still marked gone, and the lag check
// finds it once the set is free to change; a fetch since clears it.
func TestGoneFollowerRetried(t *testing.T) {
	rl := &replicaLog{name: "t", sh: New(nil, Config{Self: "a"}).shared, ready: true, meta: cluster.Topic{Name: "t", Leader: "a", Epoch: 3, Version: 7,
		Replicas: []string{"a", "b", "c"}, ISR: []string{"a", "b", "c"}},
		fol: map[string]*fstate{"b": {}, "c": {gone: true}}}
	rl.altering = true
	if got := rl.goneFollower(1); got != "" {
		t.Errorf("while another change is under way: %q, want none", got)
	}
	rl.altering = false
	if got := rl.goneFollower(1); got != "c" {
		t.Errorf("once the set may change: %q, want c", got)
	}
	if got := rl.goneFollower(3); got != "" {
		t.Errorf("under -min-insync 3: %q, want none", got)
	}
	rl.fol["c"].gone = false // it fetched again
	if got := rl.goneFollower(1); got != "" {
		t.Errorf("after a fetch: %q, want none", got)
	}
}
