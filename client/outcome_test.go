package client_test

import (
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// fakeReplica is a fake server of a replicated topic: it has the topic
// (topic info answers) unless hidden, and answers a produce with produce;
// it records the producer id and sequence of every batch it is sent.
type fakeReplica struct {
	addr   string
	hidden bool // topic info answers topic not found: searches land elsewhere

	mu      sync.Mutex
	produce func(corrID uint32, probe bool) []byte // probe: a question who leads (an expected offset)
	batches []protocol.BatchMeta                   // guarded by mu; probes left out
	probes  int                                    // guarded by mu
}

func startFakeReplica(t *testing.T, hidden bool) *fakeReplica {
	t.Helper()
	f := &fakeReplica{hidden: hidden}
	f.addr = fakeServer(t, func(_ int, nc net.Conn) {
		serveOps(nc, func(h protocol.RequestHeader, payload []byte) bool {
			switch h.Op {
			case protocol.OpTopicInfo:
				if f.hidden {
					nc.Write(protocol.AppendErrorResponse(nil, h.Op, h.CorrID, protocol.CodeTopicNotFound, "not here"))
				} else {
					nc.Write(protocol.AppendTopicInfoResponse(nil, h.CorrID, protocol.TopicInfoResponse{}))
				}
			case protocol.OpProduce:
				req, err := protocol.ParseProduceRequest(payload)
				if err != nil {
					return false
				}
				bt, _, err := protocol.ParseBatch(req.Batch)
				if err != nil {
					return false
				}
				probe := req.Flags&protocol.ProduceExpectOffset != 0
				f.mu.Lock()
				if probe {
					f.probes++
				} else {
					f.batches = append(f.batches, protocol.BatchMeta{ProducerID: bt.ProducerID, Sequence: bt.Sequence})
				}
				answer := f.produce
				f.mu.Unlock()
				go func() { nc.Write(answer(h.CorrID, probe)) }() // a slow answer holds up no other
			default:
				nc.Write(protocol.AppendErrorResponse(nil, h.Op, h.CorrID, protocol.CodeUnknownOp, "unknown op"))
			}
			return true
		})
	})
	return f
}

func (f *fakeReplica) answer(produce func(corrID uint32, probe bool) []byte) {
	f.mu.Lock()
	f.produce = produce
	f.mu.Unlock()
}

func (f *fakeReplica) sent() []protocol.BatchMeta {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]protocol.BatchMeta(nil), f.batches...)
}

// TestOutcomeUnknownFollowsIdempotent: a produce its leader answers
// outcome unknown (code 30, naming the new leader) is sent to the new
// leader by an idempotent Client of several servers, under the same
// producer id and sequence; without idempotence it fails with
// ErrOutcomeUnknown, saying the batch may have been written, and is not
// sent again.
func TestOutcomeUnknownFollowsIdempotent(t *testing.T) {
	for _, idem := range []bool{true, false} {
		t.Run(map[bool]string{true: "idempotent", false: "not idempotent"}[idem], func(t *testing.T) {
			old, next := startFakeReplica(t, false), startFakeReplica(t, true)
			old.answer(func(id uint32, _ bool) []byte {
				return protocol.AppendErrorResponse(nil, protocol.OpProduce, id, protocol.CodeOutcomeUnknown, next.addr)
			})
			next.answer(func(id uint32, _ bool) []byte { return protocol.AppendProduceResponse(nil, id, 7, 1) })
			c := dial(t, old.addr+","+next.addr, client.WithIdempotence(idem), client.WithAttemptTimeout(0))
			ctx := testCtx(t)
			off, err := c.Produce(ctx, "t", []byte("m"))
			if len(old.sent()) != 1 {
				t.Fatalf("the old leader got %d produces, want 1", len(old.sent()))
			}
			if !idem {
				if !errors.Is(err, client.ErrOutcomeUnknown) {
					t.Fatalf("produce answered outcome unknown: %v, want ErrOutcomeUnknown", err)
				}
				for _, want := range []string{`topic "t"`, "may store it twice", "may or may not be kept", next.addr} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q should say %q", err, want)
					}
				}
				if n := len(next.sent()); n != 0 {
					t.Fatalf("a batch of unknown outcome without idempotence was sent again (%d times)", n)
				}
				if leader, ok := client.LeaderOf(err); !ok || leader != next.addr {
					t.Fatalf("LeaderOf(%v) = %q, %v; want %s", err, leader, ok, next.addr)
				}
				return
			}
			if err != nil || off != 7 {
				t.Fatalf("idempotent produce answered outcome unknown: %d, %v; want 7 from the new leader", off, err)
			}
			first, again := old.sent()[len(old.sent())-1], next.sent()
			if len(again) == 0 || again[0] != first || first.ProducerID == 0 {
				t.Fatalf("sent %+v to the old leader, then %+v to the new one: want the same producer id and sequence", first, again)
			}
		})
	}
}

// TestNotLeaderErrorNamesLeader: a not leader answer reads as the
// leader it names, or as no leader yet and to retry.
func TestNotLeaderErrorNamesLeader(t *testing.T) {
	for _, tc := range []struct {
		e    client.Error
		want string
	}{
		{client.Error{Op: protocol.OpProduce, Code: client.CodeNotLeader, Message: "10.0.0.2:14353"}, "is led by 10.0.0.2:14353"},
		{client.Error{Op: protocol.OpProduce, Code: client.CodeNotLeader}, "none is elected yet; retry shortly"},
		{client.Error{Op: protocol.OpProduce, Code: client.CodeOutcomeUnknown, Message: "10.0.0.2:14353"}, "now led by 10.0.0.2:14353"},
		{client.Error{Op: protocol.OpProduce, Code: client.CodeOutcomeUnknown}, "no leader is elected yet"},
	} {
		if got := tc.e.Error(); !strings.Contains(got, tc.want) {
			t.Errorf("%+v reads %q, want it to say %q", tc.e, got, tc.want)
		}
	}
	if !errors.Is(&client.Error{Code: client.CodeOutcomeUnknown}, client.ErrOutcomeUnknown) {
		t.Error("code 30 does not match ErrOutcomeUnknown")
	}
}

func (f *fakeReplica) asked() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.probes
}

// TestAttemptTimeoutSlowLeaderKept: a produce its leader answers late
// (an acks=all produce waiting for its replicas) while the other servers
// still name that leader is not abandoned nor sent again: it gets the
// leader's answer, idempotent or not.
func TestAttemptTimeoutSlowLeaderKept(t *testing.T) {
	for _, idem := range []bool{true, false} {
		t.Run(map[bool]string{true: "idempotent", false: "not idempotent"}[idem], func(t *testing.T) {
			slow, other := startFakeReplica(t, false), startFakeReplica(t, true)
			slow.answer(func(id uint32, _ bool) []byte {
				time.Sleep(600 * time.Millisecond)
				return protocol.AppendProduceResponse(nil, id, 3, 1)
			})
			other.answer(func(id uint32, probe bool) []byte {
				return protocol.AppendErrorResponse(nil, protocol.OpProduce, id, protocol.CodeNotLeader, slow.addr)
			})
			c := dial(t, slow.addr+","+other.addr, client.WithIdempotence(idem), client.WithAttemptTimeout(100*time.Millisecond))
			off, err := c.Produce(testCtx(t), "t", []byte("m"))
			if err != nil || off != 3 {
				t.Fatalf("produce to a slow leader: %d, %v; want its answer, 3", off, err)
			}
			if n := len(slow.sent()); n != 1 {
				t.Fatalf("the slow leader was sent the batch %d times, want 1", n)
			}
			if len(other.sent()) != 0 || other.asked() == 0 {
				t.Fatalf("the other server was sent %d batches and %d questions; want none and some", len(other.sent()), other.asked())
			}
		})
	}
}

// TestAttemptTimeoutLeaderMoved: a produce its leader does not answer,
// once the other servers name another leader, goes there under the same
// producer id and sequence (idempotent), or fails at once with
// ErrOutcomeUnknown and is not sent again (without idempotence).
func TestAttemptTimeoutLeaderMoved(t *testing.T) {
	for _, idem := range []bool{true, false} {
		t.Run(map[bool]string{true: "idempotent", false: "not idempotent"}[idem], func(t *testing.T) {
			thawed := make(chan struct{})
			t.Cleanup(func() { close(thawed) })
			frozen, next := startFakeReplica(t, false), startFakeReplica(t, true)
			frozen.answer(func(uint32, bool) []byte { <-thawed; return nil })
			next.answer(func(id uint32, probe bool) []byte {
				if probe { // it leads: the offset expected is not its next
					return protocol.AppendErrorResponse(nil, protocol.OpProduce, id, protocol.CodeOffsetMismatch, "mismatch")
				}
				return protocol.AppendProduceResponse(nil, id, 7, 1)
			})
			c := dial(t, frozen.addr+","+next.addr, client.WithIdempotence(idem), client.WithAttemptTimeout(100*time.Millisecond))
			start := time.Now()
			off, err := c.Produce(testCtx(t), "t", []byte("m"))
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("produce to a frozen leader took %v", d)
			}
			if len(frozen.sent()) != 1 {
				t.Fatalf("the frozen leader was sent %d batches, want 1", len(frozen.sent()))
			}
			if !idem {
				if !errors.Is(err, client.ErrOutcomeUnknown) || !strings.Contains(err.Error(), "may store it twice") {
					t.Fatalf("produce to a frozen leader without idempotence: %v, want ErrOutcomeUnknown", err)
				}
				if len(next.sent()) != 0 {
					t.Fatalf("sent again to the new leader without idempotence")
				}
				return
			}
			if err != nil || off != 7 {
				t.Fatalf("idempotent produce to a frozen leader: %d, %v; want 7 from the new one", off, err)
			}
			if a, b := frozen.sent()[0], next.sent(); len(b) != 1 || b[0] != a {
				t.Fatalf("sent %+v to the frozen leader, then %+v to the new one: want the same producer id and sequence once", a, b)
			}
		})
	}
}
