package client_test

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// readAll returns every value of topic, in offset order.
func readAll(t *testing.T, c *client.Client, topic string) []string {
	t.Helper()
	ctx := testCtx(t)
	info, err := c.TopicInfo(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := c.Consume(ctx, topic, 0, int(info.Next))
	if err != nil {
		t.Fatal(err)
	}
	return values(msgs)
}

// A produce whose connection is cut after the server stored it, before
// its answer arrived, is sent again on a new connection and stored once:
// the answer to the resend is the first offset.
func TestProduceIdempotentAfterCut(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	px := startProxy(t, srv.Addr)
	c := dial(t, px.Addr(), client.WithRetries(5, 5*time.Millisecond))
	ctx := testCtx(t)
	var want []string
	for i := range 20 {
		if i%3 == 1 {
			px.cutProduce.Store(1)
		}
		v := fmt.Sprint("m", i)
		off, err := c.Produce(ctx, "idem", []byte(v))
		if err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
		if off != int64(i) {
			t.Fatalf("produce %d: offset %d", i, off)
		}
		want = append(want, v)
	}
	if got := readAll(t, c, "idem"); !slices.Equal(got, want) {
		t.Fatalf("stored %q, want %q", got, want)
	}
	if st := c.Stats(); st.Reconnects < 6 {
		t.Fatalf("%d reconnects, want a cut every third produce", st.Reconnects)
	}

	// Without idempotence, the same cut fails the produce (it may have
	// been stored: it was) and nothing is sent again.
	plain := dial(t, px.Addr(), client.WithIdempotence(false), client.WithRetries(5, 5*time.Millisecond))
	px.cutProduce.Store(1)
	if _, err := plain.Produce(ctx, "idem", []byte("once")); !errors.Is(err, client.ErrConnection) {
		t.Fatalf("plain produce over a cut: %v, want ErrConnection", err)
	}
	if got := readAll(t, c, "idem"); len(got) != 21 || got[20] != "once" {
		t.Fatalf("plain produce stored %d messages, want 21 ending in once", len(got))
	}
}

// Many goroutines produce on one client while the proxy cuts connections
// after the server stored a batch: every message is stored exactly once,
// at the offset its call returned. With 16 goroutines, more than the
// topic's produce slots, calls combine, and the combined batches are cut
// and sent again too.
func TestProduceIdempotentConcurrent(t *testing.T) {
	t.Parallel()
	for _, workers := range []int{4, 16} {
		t.Run(fmt.Sprint(workers, " goroutines"), func(t *testing.T) {
			t.Parallel()
			srv := brokertest.Start(t, 1)
			px := startProxy(t, srv.Addr)
			c := dial(t, px.Addr(), client.WithRetries(20, 5*time.Millisecond))
			ctx := testCtx(t)
			const each = 50
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			var at sync.Map // value -> offset returned
			for w := range workers {
				wg.Go(func() {
					for i := range each {
						if i%10 == 5 {
							px.cutProduce.Store(1)
						}
						v := fmt.Sprintf("w%d-%d", w, i)
						off, err := c.Produce(ctx, "conc", []byte(v))
						if err != nil {
							errs <- err
							return
						}
						at.Store(v, off)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			got := readAll(t, c, "conc")
			if len(got) != workers*each {
				t.Fatalf("%d messages stored, want %d", len(got), workers*each)
			}
			for w := range workers {
				for i := range each {
					v := fmt.Sprintf("w%d-%d", w, i)
					off, _ := at.Load(v)
					if o := off.(int64); got[o] != v {
						t.Fatalf("%s returned offset %d, which holds %q", v, o, got[o])
					}
				}
			}
		})
	}
}

// A Producer whose connection is cut after the server stored batches
// resends them in order: every message is stored exactly once, at the
// offset its Future reports, in Send order.
func TestProducerIdempotentAfterCut(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	px := startProxy(t, srv.Addr)
	c := dial(t, px.Addr(), client.WithRetries(5, 5*time.Millisecond))
	ctx := testCtx(t)
	p := c.NewProducer("pidem", client.WithBatchSize(20), client.WithLinger(time.Millisecond), client.WithMaxInFlight(4))
	const n = 3000
	fs := make([]*client.Future, n)
	for i := range n {
		if i%400 == 100 {
			px.cutProduce.Store(2)
		}
		f, err := p.Send(ctx, []byte(fmt.Sprint("m", i)))
		if err != nil {
			t.Fatal(err)
		}
		fs[i] = f
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for i, f := range fs {
		off, err := f.Wait(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if off != int64(i) {
			t.Fatalf("message %d at offset %d", i, off)
		}
	}
	got := readAll(t, c, "pidem")
	if len(got) != n {
		t.Fatalf("%d messages stored, want %d", len(got), n)
	}
	for i, v := range got {
		if v != fmt.Sprint("m", i) {
			t.Fatalf("offset %d holds %q", i, v)
		}
	}
	if st := c.Stats(); st.Reconnects < 2 {
		t.Fatalf("%d reconnects: the proxy never cut", st.Reconnects)
	}
}

// The same across a server restart: batches in flight when it stops are
// sent again to the new server, which rebuilt its producers from the log.
func TestProducerIdempotentAcrossRestart(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	px := startProxy(t, srv.Addr)
	c := dial(t, px.Addr(), client.WithRetries(50, 10*time.Millisecond))
	ctx := testCtx(t)
	p := c.NewProducer("prst", client.WithBatchSize(10), client.WithLinger(time.Millisecond))
	var fs []*client.Future
	send := func(from, to int) {
		for i := from; i < to; i++ {
			f, err := p.Send(ctx, []byte(fmt.Sprint("m", i)))
			if err != nil {
				t.Fatal(err)
			}
			fs = append(fs, f)
		}
	}
	send(0, 500)
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Swallow the answers of the next batches: they are stored, then the
	// server restarts and the Producer sends them again.
	px.cutProduce.Store(1)
	send(500, 520)
	waitFor(t, "the cut", func() bool { return px.cutProduce.Load() == 0 })
	px.Down()
	srv2, err := srv.Restart()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv2.Close() })
	if err := px.Up(srv2.Addr); err != nil {
		t.Fatal(err)
	}
	send(520, 600)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for i, f := range fs {
		if off, err := f.Wait(ctx); err != nil || off != int64(i) {
			t.Fatalf("message %d: offset %d, %v", i, off, err)
		}
	}
	got := readAll(t, c, "prst")
	if len(got) != 600 {
		t.Fatalf("%d messages stored, want 600", len(got))
	}
	for i, v := range got {
		if v != fmt.Sprint("m", i) {
			t.Fatalf("offset %d holds %q", i, v)
		}
	}
}

// Headers go end to end: ProduceMessages and Producer.SendMessage write
// them, Consume and a Reader return them; messages without headers in the
// same topic have none.
func TestMessageHeaders(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	for _, codec := range []client.Compression{client.CompressionNone, client.CompressionZstd} {
		c := dial(t, srv.Addr, client.WithCompression(codec))
		ctx := testCtx(t)
		topic := fmt.Sprint("hdr", codec)
		hs := []client.Header{{Key: "trace", Value: []byte("t1")}, {Key: "ct", Value: []byte("json")}}
		if _, err := c.ProduceMessages(ctx, topic,
			client.Message{Value: []byte("a"), Headers: hs},
			client.Message{Value: []byte("b")}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Produce(ctx, topic, []byte("c")); err != nil {
			t.Fatal(err)
		}
		p := c.NewProducer(topic)
		if _, err := p.SendMessage(ctx, client.Message{Value: []byte("d"), Headers: hs[:1]}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Send(ctx, []byte("e")); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		msgs, err := c.Consume(ctx, topic, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(values(msgs), []string{"a", "b", "c", "d", "e"}) {
			t.Fatalf("values %q", values(msgs))
		}
		wantHeaders := [][]client.Header{hs, nil, nil, hs[:1], nil}
		for i, m := range msgs {
			if !slices.EqualFunc(m.Headers, wantHeaders[i], func(a, b client.Header) bool {
				return a.Key == b.Key && string(a.Value) == string(b.Value)
			}) {
				t.Fatalf("message %d headers %v, want %v", i, m.Headers, wantHeaders[i])
			}
		}
		r, err := c.NewReader(topic, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.Next(ctx)
		r.Close()
		if err != nil || len(got) == 0 || len(got[0].Headers) != 2 || got[0].Headers[1].Key != "ct" {
			t.Fatalf("reader: %v, %v", got, err)
		}
	}
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	for _, bad := range [][]client.Header{
		{{Key: "", Value: []byte("v")}},
		make([]client.Header, protocol.MaxHeaders+1),
		{{Key: "k", Value: make([]byte, protocol.MaxHeaderValueLen+1)}},
	} {
		if _, err := c.ProduceMessages(ctx, "hdrbad", client.Message{Value: []byte("x"), Headers: bad}); !errors.Is(err, client.ErrInvalidArgument) {
			t.Fatalf("headers over the limits: %v", err)
		}
	}
}

// ProduceExpect appends only at the expected offset: of writers racing
// for the same offset exactly one wins, the others get ErrOffsetMismatch.
func TestProduceExpect(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	if off, err := c.ProduceExpect(ctx, "cas", 0, []byte("first")); err != nil || off != 0 {
		t.Fatalf("expect 0 on a new topic: %d, %v", off, err)
	}
	_, err := c.ProduceExpect(ctx, "cas", 0, []byte("again"))
	wantServerError(t, err, client.ErrOffsetMismatch, client.CodeOffsetMismatch)
	if _, err := c.ProduceExpect(ctx, "missing", 5, []byte("x")); !errors.Is(err, client.ErrTopicNotFound) {
		t.Fatalf("expect 5 on a missing topic: %v", err)
	}
	const writers = 4
	var wins, losses atomic.Int32
	var wg sync.WaitGroup
	for w := range writers {
		cw := dial(t, srv.Addr)
		wg.Go(func() {
			_, err := cw.ProduceExpect(ctx, "cas", 1, []byte(fmt.Sprint("w", w)))
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, client.ErrOffsetMismatch):
				losses.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 || losses.Load() != writers-1 {
		t.Fatalf("%d wins, %d mismatches; want 1 and %d", wins.Load(), losses.Load(), writers-1)
	}
	if got := readAll(t, c, "cas"); len(got) != 2 || got[0] != "first" {
		t.Fatalf("stored %q", got)
	}
}

// A batch whose sequence is below every one the server remembers for its
// producer is refused with code 22, over the wire.
func TestOutOfOrderSequenceCode(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	nc, err := net.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	send := func(seq uint64) protocol.ResponseHeader {
		t.Helper()
		b := protocol.AppendBatchMeta(nil, protocol.BatchMeta{ProducerID: 42, Sequence: seq}, []byte("x"))
		if _, err := nc.Write(protocol.AppendProduceRequest(nil, uint32(seq)+1, "seq", protocol.ProduceCreateTopic, b)); err != nil {
			t.Fatal(err)
		}
		h, _ := readRawFrame(t, nc)
		return h
	}
	for seq := uint64(100); seq < 200; seq++ {
		if h := send(seq); h.Code != protocol.CodeOK {
			t.Fatalf("seq %d: %v", seq, h.Code)
		}
	}
	if h := send(120); h.Code != protocol.CodeOutOfOrderSequence { // the server keeps 136..199
		t.Fatalf("seq 120 after 199: %v, want %v", h.Code, protocol.CodeOutOfOrderSequence)
	}
	if h := send(199); h.Code != protocol.CodeOK {
		t.Fatalf("seq 199 again: %v", h.Code)
	}
}
