package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// producerLeaders starts a leader, which answers every produce with
// offset 0 until freeze makes it stop answering (for good, or for delay
// with slow), and another server, hidden (topic info: not found), that
// answers its batches and names lead the topic's leader.
func producerLeaders(t *testing.T, lead func(leader, other *fakeReplica) string) (leader, other *fakeReplica, freeze func(slow time.Duration)) {
	t.Helper()
	thawed := make(chan struct{})
	t.Cleanup(func() { close(thawed) })
	leader, other = startFakeReplica(t, false), startFakeReplica(t, true)
	ok := func(id uint32, _ bool) []byte { return protocol.AppendProduceResponse(nil, id, 0, 1) }
	leader.answer(ok)
	other.answer(func(id uint32, probe bool) []byte {
		if !probe {
			return ok(id, probe)
		}
		if l := lead(leader, other); l != other.addr {
			return protocol.AppendErrorResponse(nil, protocol.OpProduce, id, protocol.CodeNotLeader, l)
		}
		return protocol.AppendErrorResponse(nil, protocol.OpProduce, id, protocol.CodeOffsetMismatch, "it leads")
	})
	return leader, other, func(slow time.Duration) {
		leader.answer(func(id uint32, probe bool) []byte {
			if slow == 0 {
				<-thawed
				return nil
			}
			time.Sleep(slow)
			return ok(id, probe)
		})
	}
}

// TestProducerAttemptTimeoutLeaderMoved: a Producer whose leader stops
// answering, once the other servers name another leader, abandons its
// batches in flight there: an idempotent one sends them to the new
// leader in sequence order, under the same producer id and sequences,
// and every Future is answered; without idempotence their Futures fail
// with ErrOutcomeUnknown, those not sent yet go to the new leader, and
// nothing is sent twice.
func TestProducerAttemptTimeoutLeaderMoved(t *testing.T) {
	for _, idem := range []bool{true, false} {
		t.Run(map[bool]string{true: "idempotent", false: "not idempotent"}[idem], func(t *testing.T) {
			frozen, next, freeze := producerLeaders(t, func(_, other *fakeReplica) string { return other.addr })
			c := dial(t, frozen.addr+","+next.addr, client.WithIdempotence(idem), client.WithAttemptTimeout(100*time.Millisecond))
			ctx := testCtx(t)
			p := c.NewProducer("t", client.WithBatchSize(1), client.WithLinger(0), client.WithMaxInFlight(4))
			defer p.Close()
			f, err := p.Send(ctx, []byte("first"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Wait(ctx); err != nil {
				t.Fatalf("first message, before the freeze: %v", err)
			}
			freeze(0)
			start := time.Now()
			var futures []*client.Future
			for i := range 6 {
				f, err := p.Send(ctx, []byte{byte('a' + i)})
				if err != nil {
					t.Fatal(err)
				}
				futures = append(futures, f)
			}
			waitFor(t, "four batches in flight on the frozen leader", func() bool { return len(frozen.sent()) == 5 })
			var unknown int
			for i, f := range futures {
				_, err := f.Wait(ctx)
				switch {
				case errors.Is(err, client.ErrOutcomeUnknown) && !idem:
					unknown++
				case err != nil:
					t.Fatalf("message %d: %v", i, err)
				}
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("a frozen leader held the producer %v", d)
			}
			inFlight, moved := frozen.sent()[1:], next.sent()
			if !idem {
				if unknown != 4 || len(moved) != 2 {
					t.Fatalf("without idempotence: %d outcome unknown and %d batches to the new leader; want 4 and 2", unknown, len(moved))
				}
				return
			}
			if len(moved) != 6 {
				t.Fatalf("the new leader got %d batches, want 6: %+v", len(moved), moved)
			}
			for i, m := range moved {
				if m.ProducerID != moved[0].ProducerID || m.ProducerID == 0 || m.Sequence != moved[0].Sequence+uint64(i) {
					t.Fatalf("the new leader got %+v: want one producer id and sequences in order", moved)
				}
				if i < len(inFlight) && m != inFlight[i] {
					t.Fatalf("sent %+v to the frozen leader, then %+v to the new one: want the same producer id and sequences first", inFlight, moved)
				}
			}
		})
	}
}

// TestProducerAttemptTimeoutSlowLeaderKept: a Producer whose leader
// answers late while the other servers still name it waits for its
// answers: nothing is abandoned or sent elsewhere.
func TestProducerAttemptTimeoutSlowLeaderKept(t *testing.T) {
	for _, idem := range []bool{true, false} {
		t.Run(map[bool]string{true: "idempotent", false: "not idempotent"}[idem], func(t *testing.T) {
			slow, other, freeze := producerLeaders(t, func(leader, _ *fakeReplica) string { return leader.addr })
			c := dial(t, slow.addr+","+other.addr, client.WithIdempotence(idem), client.WithAttemptTimeout(100*time.Millisecond))
			ctx := testCtx(t)
			p := c.NewProducer("t", client.WithBatchSize(1), client.WithLinger(0), client.WithMaxInFlight(4))
			defer p.Close()
			f, err := p.Send(ctx, []byte("first"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			freeze(600 * time.Millisecond)
			var futures []*client.Future
			for i := range 4 {
				f, err := p.Send(ctx, []byte{byte('a' + i)})
				if err != nil {
					t.Fatal(err)
				}
				futures = append(futures, f)
			}
			for i, f := range futures {
				if _, err := f.Wait(ctx); err != nil {
					t.Fatalf("message %d to a slow leader: %v", i, err)
				}
			}
			if n := len(slow.sent()); n != 5 {
				t.Fatalf("the slow leader got %d batches, want 5", n)
			}
			if len(other.sent()) != 0 || other.asked() == 0 {
				t.Fatalf("the other server got %d batches and %d questions; want none and some", len(other.sent()), other.asked())
			}
		})
	}
}

// TestProducerOutcomeUnknownFollows: a batch its leader answers outcome
// unknown (code 30, naming the new leader) goes to the new leader under
// the same producer id and sequence (idempotent), or fails with
// ErrOutcomeUnknown and is not sent again (without idempotence).
func TestProducerOutcomeUnknownFollows(t *testing.T) {
	for _, idem := range []bool{true, false} {
		t.Run(map[bool]string{true: "idempotent", false: "not idempotent"}[idem], func(t *testing.T) {
			old, next, _ := producerLeaders(t, func(_, other *fakeReplica) string { return other.addr })
			old.answer(func(id uint32, _ bool) []byte {
				return protocol.AppendErrorResponse(nil, protocol.OpProduce, id, protocol.CodeOutcomeUnknown, next.addr)
			})
			c := dial(t, old.addr+","+next.addr, client.WithIdempotence(idem), client.WithAttemptTimeout(0))
			ctx := testCtx(t)
			p := c.NewProducer("t", client.WithLinger(0))
			defer p.Close()
			f, err := p.Send(ctx, []byte("m"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.Wait(ctx)
			if !idem {
				if !errors.Is(err, client.ErrOutcomeUnknown) || len(next.sent()) != 0 {
					t.Fatalf("without idempotence: %v, and %d batches to the new leader; want ErrOutcomeUnknown and none", err, len(next.sent()))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a, b := old.sent(), next.sent(); len(a) != 1 || len(b) != 1 || a[0] != b[0] {
				t.Fatalf("sent %+v to the old leader, then %+v to the new one: want the same producer id and sequence once each", a, b)
			}
		})
	}
}
