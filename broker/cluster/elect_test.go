package cluster

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

// TestByLogEnd: candidates are ordered by last epoch, then offset,
// furthest first; equal ends keep the in-sync set's order, and members
// that did not answer come after those that did, in that order.
func TestByLogEnd(t *testing.T) {
	for _, tc := range []struct {
		what  string
		cands []string
		ends  map[string]LogEnd
		want  []string
	}{
		{"the longer offset", []string{"a", "b"},
			map[string]LogEnd{"a": {Epoch: 3, End: 10}, "b": {Epoch: 3, End: 12}}, []string{"b", "a"}},
		{"the later epoch before the longer offset", []string{"a", "b", "c"},
			map[string]LogEnd{"a": {Epoch: 2, End: 50}, "b": {Epoch: 3, End: 12}, "c": {Epoch: 3, End: 11}}, []string{"b", "c", "a"}},
		{"a tie keeps the order", []string{"a", "b", "c"},
			map[string]LogEnd{"a": {Epoch: 3, End: 10}, "b": {Epoch: 3, End: 12}, "c": {Epoch: 3, End: 12}}, []string{"b", "c", "a"}},
		{"all tied", []string{"c", "a", "b"},
			map[string]LogEnd{"a": {Epoch: 1, End: 5}, "b": {Epoch: 1, End: 5}, "c": {Epoch: 1, End: 5}}, []string{"c", "a", "b"}},
		{"unanswered after the answers", []string{"a", "b", "c"},
			map[string]LogEnd{"c": {Epoch: 0, End: 0}}, []string{"c", "a", "b"}},
		{"unanswered keep their order", []string{"a", "b", "c", "d"},
			map[string]LogEnd{"b": {Epoch: 1, End: 1}, "d": {Epoch: 1, End: 2}}, []string{"d", "b", "a", "c"}},
		{"none answered", []string{"b", "a"}, nil, []string{"b", "a"}},
	} {
		cands := slices.Clone(tc.cands)
		if got := byLogEnd(cands, tc.ends); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.what, got, tc.want)
		}
		if !slices.Equal(cands, tc.cands) {
			t.Errorf("%s: the candidates were reordered in place: %v", tc.what, cands)
		}
	}
}

// TestClusterElectsTheLongestLog: when a topic's leader dies, the
// controller elects the live in-sync member whose log ends furthest, as
// the members answer (Config.LogEnds), not the first of the set; a member
// that does not answer is passed over.
func TestClusterElectsTheLongestLog(t *testing.T) {
	var mu sync.Mutex
	var ends map[string]LogEnd // member -> its end of "orders"; missing: an error
	asked := map[string]int{}
	tc := startCluster(t, 4, func(tc *testCluster) {
		tc.logEnds = func(ctx context.Context, member string, topics []string) (map[string]LogEnd, error) {
			mu.Lock()
			defer mu.Unlock()
			asked[member]++
			e, ok := ends[member]
			if !ok {
				return nil, errors.New("no answer")
			}
			out := map[string]LogEnd{}
			for _, t := range topics {
				out[t] = e
			}
			return out, nil
		}
	})
	ctx := ctx15(t)
	top, err := tc.any().CreateTopic(ctx, "orders", 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(top.ISR) != 4 {
		t.Fatalf("in-sync set %v", top.ISR)
	}
	// The set after the leader: first a member that does not answer, then
	// one that holds less than the last.
	silent, less, most := top.ISR[1], top.ISR[2], top.ISR[3]
	mu.Lock()
	ends = map[string]LogEnd{less: {Epoch: 1, End: 10}, most: {Epoch: 1, End: 12}}
	mu.Unlock()
	tc.kill(tc.index(top.Leader))
	tc.eventually("orders has a new leader", func(nd *Node) bool {
		t, _ := nd.Topic("orders")
		return t.Leader != "" && t.Leader != top.Leader
	})
	moved, _ := tc.any().Topic("orders")
	if want := []string{most, silent, less}; moved.Leader != most || !slices.Equal(moved.ISR, want) || moved.Epoch != 2 {
		t.Fatalf("after the leader died: leader %s, in-sync set %v, epoch %d; want %s, %v, 2", moved.Leader, moved.ISR, moved.Epoch, most, want)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range []string{silent, less, most} {
		if asked[id] == 0 {
			t.Errorf("%s was not asked", id)
		}
	}
	if asked[top.Leader] != 0 {
		t.Errorf("the dead leader was asked %d times", asked[top.Leader])
	}
}
