package replica

import (
	"bytes"
	"testing"

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
		if _, err := s.Append("t", b); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, int64(len(b)))
	}
	m := New(s, Config{Self: "a"})
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
		if got := m.lagBytes("t", c.behind); got != c.want {
			t.Errorf("LagBytes %d, behind %v: %q, want %q", c.lagBytes, c.behind, got, c.want)
		}
	}
}
