package client_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
)

// produced is one Produce call's messages and the offset it got.
type produced struct {
	msgs [][]byte
	base int64
	err  error
}

// produceAll runs one Produce call per entry of calls, each in its own
// goroutine, and returns once every call has joined topic's gathering
// batch (want messages waiting) or ended; wait waits for them to end.
func produceAll(t *testing.T, ctx context.Context, c *client.Client, topic string, calls []produced, want int) (wait func()) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() { calls[i].base, calls[i].err = c.Produce(ctx, topic, calls[i].msgs...) })
	}
	waitFor(t, fmt.Sprintf("%d messages gathering", want), func() bool { return client.CombineWaiting(c, topic) == want })
	return wg.Wait
}

func newCalls(n int) (calls []produced, total int) {
	calls = make([]produced, n)
	for i := range calls {
		for k := range i%3 + 1 {
			calls[i].msgs = append(calls[i].msgs, fmt.Appendf(nil, "call-%d-msg-%d", i, k))
			total++
		}
	}
	return calls, total
}

// checkStored: every call succeeded, the calls' offsets tile [from,
// from+total) without overlap, and each call's messages are stored at
// its offsets, in order.
func checkStored(t *testing.T, ctx context.Context, c *client.Client, topic string, calls []produced, from int64, total int) {
	t.Helper()
	sorted := append([]produced(nil), calls...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].base < sorted[j].base })
	next := from
	for _, p := range sorted {
		if p.err != nil {
			t.Fatalf("Produce: %v", p.err)
		}
		if p.base != next {
			t.Fatalf("a call's first offset %d, want %d: offsets overlap or leave a gap", p.base, next)
		}
		next += int64(len(p.msgs))
	}
	all, err := c.Consume(ctx, topic, from, total)
	if err != nil || len(all) != total {
		t.Fatalf("Consume %d from %d: %d messages, %v", total, from, len(all), err)
	}
	for _, p := range calls {
		for k, m := range p.msgs {
			if got := all[p.base-from+int64(k)]; string(got.Value) != string(m) {
				t.Fatalf("at %d: %q, want %q", got.Offset, got.Value, m)
			}
		}
	}
}

// Produce calls made while a topic's slots are busy combine into one
// request: one round trip for all of them, each call's messages together
// at its own offsets.
func TestProduceCombines(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	if _, err := c.Produce(ctx, "t", []byte("first")); err != nil {
		t.Fatal(err)
	}
	free := client.HoldProduceSlots(c, "t")
	calls, total := newCalls(20)
	wait := produceAll(t, ctx, c, "t", calls, total)
	before := srv.Broker.Stats().Requests
	free()
	wait()
	if n := srv.Broker.Stats().Requests - before; n != 1 {
		t.Fatalf("%d requests for 20 combined calls, want 1", n)
	}
	checkStored(t, ctx, c, "t", calls, 1, total)
	if !client.CombineIdle(c) {
		t.Fatal("the combiner still holds the topic with nothing in flight")
	}
	if st := c.Stats(); st.InFlight != 0 || st.MessagesAcked != int64(total+1) {
		t.Fatalf("Stats %+v, want %d messages acknowledged, none in flight", st, total+1)
	}
}

// A batch about to pass the client's batch limit goes at once, past the
// slots, and the next call starts another.
func TestProduceCombinedFull(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr, client.WithMaxBatchBytes(400))
	ctx := testCtx(t)
	free := client.HoldProduceSlots(c, "t")
	calls := make([]produced, 12)
	for i := range calls {
		calls[i].msgs = [][]byte{fmt.Appendf(nil, "%064d", i)}
	}
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() { calls[i].base, calls[i].err = c.Produce(ctx, "t", calls[i].msgs...) })
	}
	// A few 64 B messages fill 400 B: the full batches are sent and
	// answered while the slots are still held, and the last one gathers.
	waitFor(t, "the full batches answered", func() bool {
		acked, waiting := c.Stats().MessagesAcked, client.CombineWaiting(c, "t")
		return acked > 0 && waiting > 0 && acked+int64(waiting) == int64(len(calls))
	})
	free()
	wg.Wait()
	checkStored(t, ctx, c, "t", calls, 0, len(calls))
	if !client.CombineIdle(c) {
		t.Fatal("the combiner still holds the topic with nothing in flight")
	}
}

// A call whose context ends while its messages wait returns the context's
// error at once; its messages go with the batch.
func TestProduceCombinedContextEnds(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	free := client.HoldProduceSlots(c, "t")
	short, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.Produce(short, "t", []byte("impatient"))
		done <- err
	}()
	waitFor(t, "the call gathering", func() bool { return client.CombineWaiting(c, "t") == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Produce with its context canceled while waiting: %v, want context.Canceled", err)
	}
	free()
	waitFor(t, "the batch stored", func() bool { return c.Stats().MessagesAcked == 1 })
	got, err := c.Consume(ctx, "t", 0, 1)
	if err != nil || len(got) != 1 || string(got[0].Value) != "impatient" {
		t.Fatalf("Consume: %v, %v", got, err)
	}
}

// A combined batch the server refuses fails every call in it, each with
// the server's error.
func TestProduceCombinedRefused(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr, client.WithAutoCreate(false))
	ctx := testCtx(t)
	free := client.HoldProduceSlots(c, "missing")
	calls, total := newCalls(5)
	wait := produceAll(t, ctx, c, "missing", calls, total)
	free()
	wait()
	for i, p := range calls {
		if !errors.Is(p.err, client.ErrTopicNotFound) {
			t.Fatalf("call %d: %v, want ErrTopicNotFound", i, p.err)
		}
	}
	if !client.CombineIdle(c) {
		t.Fatal("the combiner still holds the topic with nothing in flight")
	}
}

// A compressing Client's calls combine too, into one batch compressed
// whole; so do ProduceMessages calls without headers. Calls with headers
// go alone.
func TestProduceCombinedCompressedAndMessages(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr, client.WithCompression(client.CompressionZstd))
	ctx := testCtx(t)
	free := client.HoldProduceSlots(c, "t")
	calls, total := newCalls(8)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			if i%2 == 0 {
				calls[i].base, calls[i].err = c.Produce(ctx, "t", calls[i].msgs...)
				return
			}
			var ms []client.Message
			for _, m := range calls[i].msgs {
				ms = append(ms, client.Message{Value: m})
			}
			calls[i].base, calls[i].err = c.ProduceMessages(ctx, "t", ms...)
		})
	}
	waitFor(t, "every call gathering", func() bool { return client.CombineWaiting(c, "t") == total })
	// With headers: alone, at once, while the others wait.
	hb, err := c.ProduceMessages(ctx, "t", client.Message{Value: []byte("h"), Headers: []client.Header{{Key: "k", Value: []byte("v")}}})
	if err != nil || hb != 0 {
		t.Fatalf("ProduceMessages with headers while the slots are held: %d, %v; want offset 0 at once", hb, err)
	}
	before := srv.Broker.Stats().Requests
	free()
	wg.Wait()
	if n := srv.Broker.Stats().Requests - before; n != 1 {
		t.Fatalf("%d requests for 8 combined calls, want 1", n)
	}
	checkStored(t, ctx, c, "t", calls, 1, total)
}
