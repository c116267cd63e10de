package replica

import (
	"errors"
	"strings"
	"testing"

	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// TestAcksAllCountsInSyncOnly: the leader's high-water mark, and with it
// every acks=all answer, follows the in-sync replicas the Raft record
// names and nothing else. A follower out of the set that holds it all is
// not counted; an in-sync one behind holds the mark back; with the set
// below -min-insync the mark stands still, whoever holds what; and a
// follower counts from the moment the record takes it back in.
func TestAcksAllCountsInSyncOnly(t *testing.T) {
	s := openReplica(t)
	lead(t, s, 1, names("m", 0, 10)...)
	m := New(s, Config{Self: "a", MinInsync: 2})
	rl := &replicaLog{name: "t", sh: m.shared, ready: true, watches: map[*watch]struct{}{},
		meta: cluster.Topic{Name: "t", Leader: "a", Epoch: 1, Replicas: []string{"a", "b", "c"}, ISR: []string{"a", "b"}},
		fol:  map[string]*fstate{"b": {leo: 3}, "c": {leo: 10}}}
	acked := map[int64]bool{}
	for _, end := range []int64{3, 10} {
		rl.waiters = append(rl.waiters, &waiter{end: end, fn: func(err error) {
			if err != nil {
				t.Errorf("the produce ending at %d: %v", end, err)
			}
			acked[end] = true
		}})
	}
	step := func(what string, isr []string, wantHW int64, wantAcked ...int64) {
		t.Helper()
		rl.meta.ISR = isr
		rl.advance().run()
		if rl.hw != wantHW {
			t.Fatalf("%s: high-water mark %d, want %d", what, rl.hw, wantHW)
		}
		for _, end := range []int64{3, 10} {
			want := false
			for _, w := range wantAcked {
				want = want || w == end
			}
			if acked[end] != want {
				t.Fatalf("%s: the produce ending at %d acknowledged: %v, want %v", what, end, acked[end], want)
			}
		}
	}
	step("b in sync at 3, c out of sync at the end", []string{"a", "b"}, 3, 3)
	rl.fol["b"].leo = 7
	step("b at 7", []string{"a", "b"}, 7, 3)
	step("b dropped, the set under -min-insync", []string{"a"}, 7, 3)
	rl.fol["b"].leo = 10
	step("b at the end, still out of the set", []string{"a"}, 7, 3)
	step("c taken back in by the record", []string{"a", "c"}, 10, 3, 10)
}

// TestSetReplicasBelowMinInsync: a replication factor under -min-insync
// is refused before the cluster is asked: every acks=all produce to such
// a topic would be refused.
func TestSetReplicasBelowMinInsync(t *testing.T) {
	m := New(openReplica(t), Config{Self: "a", MinInsync: 2})
	if _, err := (adminAPI{m}).SetReplicas("t", 1); !errors.Is(err, protocol.ErrInvalidArgument) || !strings.Contains(err.Error(), "-min-insync 2") {
		t.Fatalf("1 replica under -min-insync 2: %v, want invalid argument naming the flag", err)
	}
}

// TestLeadChangeOutcomeUnknown: the produces waiting for their replicas
// when the lead changes were written here; the new leader may hold them
// or not. They are answered outcome unknown (code 30), naming the new
// leader, not not leader (27), which tells a client that nothing was
// written and that it may send the batch again: stored twice when the new
// leader holds it. A refusal before anything is written stays not leader.
func TestLeadChangeOutcomeUnknown(t *testing.T) {
	s := openReplica(t)
	lead(t, s, 1, names("m", 0, 10)...)
	m := New(s, Config{Self: "a", MinInsync: 2})
	rl := &replicaLog{name: "t", sh: m.shared, ready: true, watches: map[*watch]struct{}{},
		meta: cluster.Topic{Name: "t", Leader: "a", Epoch: 1, Replicas: []string{"a", "b"}, ISR: []string{"a", "b"}},
		fol:  map[string]*fstate{"b": {leo: 3}}}
	var got error
	rl.waiters = append(rl.waiters, &waiter{end: 10, fn: func(err error) { got = err }})
	rl.mu.Lock()
	rl.halt(m.notLeader("t", "b"))
	if codeOf(got) != protocol.CodeOutcomeUnknown {
		t.Fatalf("a waiting produce answered %v, want outcome unknown", got)
	}
	var ou *service.OutcomeUnknownError
	if !errors.As(got, &ou) || ou.Leader != "b" {
		t.Fatalf("the answer %v does not name the new leader b", got)
	}
	if err := outcomeUnknown(storage.ErrClosed); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("a stop's error became %v", err)
	}
}

// codeOf is the wire code service.Code gives err.
func codeOf(err error) protocol.Code { return service.Code(err) }
