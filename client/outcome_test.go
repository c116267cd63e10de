package client_test

import (
	"errors"
	"net"
	"strings"
	"sync"
	"testing"

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
	produce func(corrID uint32) []byte
	batches []protocol.BatchMeta // guarded by mu
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
				f.mu.Lock()
				f.batches = append(f.batches, protocol.BatchMeta{ProducerID: bt.ProducerID, Sequence: bt.Sequence})
				answer := f.produce
				f.mu.Unlock()
				nc.Write(answer(h.CorrID))
			default:
				nc.Write(protocol.AppendErrorResponse(nil, h.Op, h.CorrID, protocol.CodeUnknownOp, "unknown op"))
			}
			return true
		})
	})
	return f
}

func (f *fakeReplica) answer(produce func(corrID uint32) []byte) {
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
			old.answer(func(id uint32) []byte {
				return protocol.AppendErrorResponse(nil, protocol.OpProduce, id, protocol.CodeOutcomeUnknown, next.addr)
			})
			next.answer(func(id uint32) []byte { return protocol.AppendProduceResponse(nil, id, 7, 1) })
			c := dial(t, old.addr+","+next.addr, client.WithIdempotence(idem))
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
