package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// checkReadBack consumes topic and checks that each value sits at its
// offset.
func checkReadBack(t testing.TB, c *client.Client, topic string, want map[int64]string) {
	t.Helper()
	ctx := testCtx(t)
	var buf []client.Message
	var next int64
	info, err := c.TopicInfo(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for next < info.Next {
		var err error
		buf, next, err = c.ConsumeInto(ctx, buf[:0], topic, next, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range buf {
			if v, ok := want[m.Offset]; ok {
				if string(m.Value) != v {
					t.Fatalf("offset %d holds %q, acknowledged for %q", m.Offset, m.Value, v)
				}
				found++
			}
		}
	}
	if found != len(want) {
		t.Fatalf("%d of %d acknowledged messages read back", found, len(want))
	}
}

// Offsets follow Send order, whatever the batch size, linger, in-flight
// bound and codec.
func TestProducerOrdering(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	cases := []struct {
		name  string
		codec protocol.Codec
		opts  []client.ProducerOption
	}{
		{"batch1-nolinger", protocol.CodecNone, []client.ProducerOption{client.WithBatchSize(1), client.WithLinger(0)}},
		{"batch100-linger1ms-inflight8", protocol.CodecNone, []client.ProducerOption{client.WithBatchSize(100), client.WithLinger(time.Millisecond), client.WithMaxInFlight(8)}},
		{"batch1000-inflight1", protocol.CodecNone, []client.ProducerOption{client.WithMaxInFlight(1)}},
		{"batch37-s2", protocol.CodecS2, []client.ProducerOption{client.WithBatchSize(37)}},
		{"zstd-small-buffer", protocol.CodecZstd, []client.ProducerOption{client.WithBatchSize(50), client.WithMaxBuffered(120, 1<<20)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, srv.Addr, client.WithCompression(tc.codec))
			ctx := testCtx(t)
			p := c.NewProducer(tc.name, tc.opts...)
			const n = 3000
			fs := make([]*client.Future, n)
			for i := range fs {
				var err error
				if fs[i], err = p.Send(ctx, fmt.Appendf(nil, "m%d", i)); err != nil {
					t.Fatalf("Send %d: %v", i, err)
				}
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			for i, f := range fs {
				select {
				case <-f.Done():
				default:
					t.Fatalf("future %d not done after Close", i)
				}
				off, err := f.Wait(ctx)
				if err != nil || off != int64(i) {
					t.Fatalf("future %d: offset %d, %v", i, off, err)
				}
			}
			msgs, err := c.Consume(ctx, tc.name, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			for i, m := range msgs {
				if string(m.Value) != fmt.Sprint("m", i) {
					t.Fatalf("offset %d: %q", i, m.Value)
				}
			}
			if st := c.Stats(); st.MessagesAcked != n || st.InFlight != 0 {
				t.Fatalf("Stats: %+v", st)
			}
		})
	}
}

// Sends from many goroutines: each goroutine's offsets increase, together
// they cover [0, n) once, and each offset holds its message.
// With no linger, Send callers write batches themselves when nothing waits
// before theirs, and the sender goroutine the others.
func TestProducerConcurrentSends(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	for _, linger := range []time.Duration{500 * time.Microsecond, 0} {
		t.Run(fmt.Sprint("linger", linger), func(t *testing.T) {
			concurrentSends(t, srv.Addr, fmt.Sprint("conc", linger.Microseconds()), client.WithBatchSize(64), client.WithLinger(linger))
		})
	}
}

func concurrentSends(t *testing.T, addr, topic string, opts ...client.ProducerOption) {
	c := dial(t, addr)
	ctx := testCtx(t)
	p := c.NewProducer(topic, opts...)
	const workers, each = 8, 500
	var mu sync.Mutex
	want := map[int64]string{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			fs := make([]*client.Future, each)
			for i := range fs {
				var err error
				if fs[i], err = p.Send(ctx, fmt.Appendf(nil, "w%d-%d", w, i)); err != nil {
					t.Error(err)
					return
				}
			}
			last := int64(-1)
			for i, f := range fs {
				off, err := f.Wait(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if off <= last {
					t.Errorf("worker %d: message %d at offset %d after %d", w, i, off, last)
				}
				last = off
				mu.Lock()
				if _, dup := want[off]; dup {
					t.Errorf("offset %d given twice", off)
				}
				want[off] = fmt.Sprintf("w%d-%d", w, i)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if len(want) != workers*each {
		t.Fatalf("%d offsets for %d messages", len(want), workers*each)
	}
	for off := range int64(workers * each) {
		if _, ok := want[off]; !ok {
			t.Fatalf("offset %d given to no message", off)
		}
	}
	checkReadBack(t, c, topic, want)
}

// TrySend fails at once with ErrBufferFull when the buffer is full, by
// messages or by bytes; Send waits for room or its context.
func TestProducerBufferFull(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)

	// A long linger keeps messages buffered until Flush.
	p := c.NewProducer("full", client.WithLinger(time.Hour), client.WithMaxBuffered(10, 1<<20))
	defer p.Close()
	var fs []*client.Future
	for i := range 10 {
		f, err := p.TrySend(fmt.Appendf(nil, "m%d", i))
		if err != nil {
			t.Fatalf("TrySend %d: %v", i, err)
		}
		fs = append(fs, f)
	}
	if f, err := p.TrySend([]byte("over")); !errors.Is(err, client.ErrBufferFull) || f != nil {
		t.Fatalf("TrySend into a full buffer: %v, %v; want ErrBufferFull", f, err)
	}
	sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := p.Send(sctx, []byte("over")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send into a full buffer: %v, want its context's error", err)
	}

	// A Send waiting for room goes through once a Flush frees it.
	sent := make(chan error, 1)
	var waiting *client.Future
	go func() {
		var err error
		waiting, err = p.Send(ctx, []byte("m10"))
		sent <- err
	}()
	select {
	case err := <-sent:
		t.Fatalf("Send returned with the buffer full: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatalf("waiting Send: %v", err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i, f := range append(fs, waiting) {
		if off, err := f.Wait(ctx); err != nil || off != int64(i) {
			t.Fatalf("future %d: %d, %v", i, off, err)
		}
	}

	// The byte bound: each message counts its length plus a little.
	pb := c.NewProducer("full-bytes", client.WithLinger(time.Hour), client.WithMaxBuffered(1000, 1000))
	defer pb.Close()
	n := 0
	for ; n < 1000; n++ {
		if _, err := pb.TrySend(make([]byte, 200)); err != nil {
			if !errors.Is(err, client.ErrBufferFull) {
				t.Fatal(err)
			}
			break
		}
	}
	if n < 3 || n > 5 {
		t.Fatalf("a 1000-byte buffer took %d messages of 200 bytes", n)
	}
}

// Flush and Close wait for every message sent before them.
func TestProducerFlushAndClose(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)

	p := c.NewProducer("fl", client.WithLinger(time.Hour))
	var fs []*client.Future
	for i := range 5 {
		f, err := p.Send(ctx, fmt.Appendf(nil, "m%d", i))
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	// Send buffers synchronously and the linger is an hour: nothing is on
	// its way, so the info answered after the Sends has nothing either.
	if info, _ := c.TopicInfo(ctx, "fl"); info.Next != 0 {
		t.Fatalf("lingering messages were sent: %+v", info)
	}
	select {
	case <-fs[0].Done():
		t.Fatal("future done before its batch was sent")
	default:
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i, f := range fs {
		select {
		case <-f.Done():
		default:
			t.Fatalf("future %d not done after Flush", i)
		}
	}
	if info, _ := c.TopicInfo(ctx, "fl"); info.Next != 5 {
		t.Fatalf("after Flush: %+v", info)
	}
	// An empty Flush returns at once.
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	fs = fs[:0]
	for i := range 100 {
		f, err := p.Send(ctx, fmt.Appendf(nil, "n%d", i))
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for i, f := range fs {
		select {
		case <-f.Done():
		default:
			t.Fatalf("future %d not done after Close", i)
		}
		if off, err := f.Wait(ctx); err != nil || off != int64(5+i) {
			t.Fatalf("future %d: %d, %v", i, off, err)
		}
	}
	if _, err := p.Send(ctx, []byte("late")); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Send after Close: %v, want ErrClosed", err)
	}
	if _, err := p.TrySend([]byte("late")); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("TrySend after Close: %v, want ErrClosed", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// Flush gives up at its context when the server does not answer, and
// closing the client then fails the waiting futures.
func TestProducerFlushContextAndClientClose(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	px := startProxy(t, srv.Addr)
	c, err := client.Dial(testCtx(t), px.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	p := c.NewProducer("stuck", client.WithLinger(0))
	px.drop.Store(true)
	f, err := p.Send(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := p.Flush(fctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush with no answer: %v, want its context's error", err)
	}
	c.Close()
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	defer wcancel()
	if _, err := f.Wait(wctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("future after the client closed: %v, want a failure, not a hang", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case <-closed:
	case <-time.After(3 * time.Second):
		t.Fatal("Producer.Close hangs after the client closed")
	}
	if _, err := p.Send(ctx, []byte("y")); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
}

// Server errors reach the futures of the batch; the Producer goes on.
func TestProducerServerErrors(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr, client.WithAutoCreate(false), client.WithMaxBatchBytes(1<<10))
	ctx := testCtx(t)
	p := c.NewProducer("later", client.WithLinger(0))
	defer p.Close()
	f, err := p.Send(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Wait(ctx)
	wantServerError(t, err, client.ErrTopicNotFound, protocol.CodeTopicNotFound)

	if _, err := p.Send(ctx, make([]byte, 2<<10)); !errors.Is(err, client.ErrFrameTooLarge) {
		t.Fatalf("Send of a message over the max batch: %v, want ErrFrameTooLarge", err)
	}
	if err := c.CreateTopic(ctx, "later"); err != nil {
		t.Fatal(err)
	}
	f, err = p.Send(ctx, []byte("y"))
	if err != nil {
		t.Fatal(err)
	}
	if off, err := f.Wait(ctx); err != nil || off != 0 {
		t.Fatalf("after the topic exists: %d, %v", off, err)
	}
}

// A server restart during a Producer run: batches in flight may fail (they
// are not resent), but the Producer keeps working after it and every
// acknowledged message reads back at its offset. The server comes back on
// a new port behind a proxy that keeps the client's address (a restart on
// the same port is TestServerRestart's).
func TestProducerServerRestart(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	px := startProxy(t, srv.Addr)
	c := dial(t, px.Addr(), client.WithRetries(10, 20*time.Millisecond))
	ctx := testCtx(t)
	p := c.NewProducer("run", client.WithBatchSize(50), client.WithLinger(time.Millisecond), client.WithMaxInFlight(4))

	type sent struct {
		f     *client.Future
		value string
		after bool // sent after the restart was over
	}
	var (
		all       []sent
		restarted atomic.Bool
		stop      atomic.Bool
	)
	done := make(chan error, 1)
	go func() {
		for i := 0; !stop.Load(); i++ {
			after := restarted.Load()
			v := fmt.Sprint("m", i)
			f, err := p.Send(ctx, []byte(v))
			if err != nil {
				done <- err
				return
			}
			all = append(all, sent{f, v, after})
			if i%100 == 0 {
				runtime.Gosched() // now and then, let the batches go
			}
		}
		done <- nil
	}()

	waitFor(t, "acknowledgements before the restart", func() bool { return c.Stats().MessagesAcked >= 500 })
	px.Down()
	srv2, err := srv.Restart()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv2.Close() })
	if err := px.Up(srv2.Addr); err != nil {
		t.Fatal(err)
	}
	restarted.Store(true)
	ackedBefore := c.Stats().MessagesAcked
	waitFor(t, "acknowledgements after the restart", func() bool { return c.Stats().MessagesAcked >= ackedBefore+500 })
	stop.Store(true)
	if err := <-done; err != nil {
		t.Fatalf("Send: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	want := map[int64]string{}
	var acked, failed, ackedAfter, sentAfter int
	var offsets []int64
	for _, s := range all {
		off, err := s.f.Wait(ctx)
		if s.after {
			sentAfter++
		}
		if err != nil {
			failed++
			if !errors.Is(err, client.ErrConnection) && !errors.Is(err, client.ErrShuttingDown) {
				t.Errorf("%s failed with %v, want a connection or shutting-down error", s.value, err)
			}
			continue
		}
		acked++
		if s.after {
			ackedAfter++
		}
		if _, dup := want[off]; dup {
			t.Fatalf("offset %d acknowledged twice", off)
		}
		want[off] = s.value
		offsets = append(offsets, off)
	}
	t.Logf("%d sent: %d acknowledged, %d failed; %d sent after the restart, %d of them acknowledged", len(all), acked, failed, sentAfter, ackedAfter)
	if sentAfter == 0 || ackedAfter == 0 {
		t.Fatalf("the Producer did not keep working after the restart: %d sent, %d acknowledged", sentAfter, ackedAfter)
	}
	if !slices.IsSorted(offsets) {
		t.Errorf("acknowledged offsets do not follow Send order")
	}
	checkReadBack(t, c, "run", want)
	if st := c.Stats(); st.Reconnects < 1 {
		t.Fatalf("Stats: %+v, want a reconnect", st)
	}
}

// While the server cannot be reached, a Producer's batches cannot have
// reached it either, so (package doc: "The same holds for the batches of
// a Producer") they are retried like a Produce, within WithRetries.
func TestProducerRetriesUnsentBatches(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	px := startProxy(t, srv.Addr)
	c := dial(t, px.Addr(), client.WithRetries(8, 25*time.Millisecond)) // about 6 s in all
	ctx := testCtx(t)
	produceNumbered(t, c, "down", "m", 1, 1)

	px.Down()
	waitFor(t, "the client to see its connection closed", func() bool { return client.MainConnBroken(c) })
	up := time.AfterFunc(300*time.Millisecond, func() { px.Up(srv.Addr) })
	defer up.Stop()

	// The synchronous Produce waits out the outage.
	if base, err := c.Produce(ctx, "down", []byte("sync")); err != nil || base != 1 {
		t.Fatalf("Produce while the server is unreachable for 300ms: %d, %v", base, err)
	}

	px.Down()
	waitFor(t, "the client to see its connection closed", func() bool { return client.MainConnBroken(c) })
	up2 := time.AfterFunc(300*time.Millisecond, func() { px.Up(srv.Addr) })
	defer up2.Stop()
	p := c.NewProducer("down", client.WithLinger(0))
	defer p.Close()
	f, err := p.Send(ctx, []byte("async"))
	if err != nil {
		t.Fatal(err)
	}
	if off, err := f.Wait(ctx); err != nil || off != 2 {
		t.Fatalf("Producer batch while the server is unreachable for 300ms: %d, %v; the synchronous Produce waited it out", off, err)
	}
}

// TestProducerNoLingerGathersWhileBusy: with no linger a message goes out
// at once while an in-flight slot is free, and the messages sent while
// every slot is busy gather into the next batch, which goes out as soon as
// a slot frees; not one batch per message behind the busy slots.
func TestProducerNoLingerGathersWhileBusy(t *testing.T) {
	const later = 99
	var mu sync.Mutex
	var counts []int // messages in each produce, in arrival order
	first := make(chan struct{})
	release := make(chan struct{})
	addr := fakeServer(t, func(i int, nc net.Conn) {
		var next int64
		serveOps(nc, func(h protocol.RequestHeader, payload []byte) bool {
			if h.Op != protocol.OpProduce {
				return true
			}
			req, err := protocol.ParseProduceRequest(payload)
			if err != nil {
				t.Errorf("produce request: %v", err)
				return false
			}
			b, _, err := protocol.ParseBatch(req.Batch)
			if err != nil {
				t.Errorf("batch: %v", err)
				return false
			}
			mu.Lock()
			counts = append(counts, b.Count)
			n := len(counts)
			mu.Unlock()
			if n == 1 {
				close(first)
				<-release // every slot busy until the test says
			}
			nc.Write(protocol.AppendProduceResponse(nil, h.CorrID, next, uint32(b.Count)))
			next += int64(b.Count)
			return true
		})
	})
	c := dial(t, addr, client.WithIdempotence(false))
	p := c.NewProducer("t", client.WithLinger(0), client.WithMaxInFlight(1))
	defer p.Close()
	ctx := testCtx(t)
	f0, err := p.Send(ctx, []byte("first"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-first: // sent at once, with no linger
	case <-ctx.Done():
		t.Fatal("the first message was not sent at once")
	}
	futures := make([]*client.Future, later)
	for i := range futures {
		if futures[i], err = p.Send(ctx, fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	if off, err := f0.Wait(ctx); err != nil || off != 0 {
		t.Fatalf("first message: offset %d, %v; want 0", off, err)
	}
	for i, f := range futures {
		if off, err := f.Wait(ctx); err != nil || off != int64(1+i) {
			t.Fatalf("message %d: offset %d, %v; want %d", i, off, err, 1+i)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(counts, []int{1, later}) {
		t.Fatalf("messages per produce %v, want [1 %d]: the sends made while the slot was busy should go out as one batch", counts, later)
	}
}

// TestProducerNoLingerLoneSendsComplete: with no linger, concurrent
// callers that each send one message and wait for it, with nothing else
// to push the Producer on (no Flush, no later Send), all get their
// answers: a message that gathered while another caller was sending goes
// out once that caller is done.
func TestProducerNoLingerLoneSendsComplete(t *testing.T) {
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	p := c.NewProducer("lone", client.WithLinger(0))
	defer p.Close()
	const workers, each = 8, 300
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				f, err := p.Send(ctx, fmt.Appendf(nil, "w%d-%d", w, i))
				if err == nil {
					_, err = f.Wait(ctx)
				}
				cancel()
				if err != nil {
					t.Errorf("worker %d, message %d: %v (left in the Producer's current batch)", w, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
