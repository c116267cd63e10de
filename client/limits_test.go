package client_test

import (
	"bytes"
	"errors"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// TestResponseTooLarge: a client reads back what it may produce, whatever
// the server's frame limit; a response over WithMaxResponseBytes fails its
// request with ErrResponseTooLarge naming both sizes and the option, not as
// a broken connection, and the connection goes on serving.
func TestResponseTooLarge(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1, func(_ *storage.Options, bc *broker.Config) { bc.MaxFrameSize = 8 << 20 })
	ctx := testCtx(t)
	msg := bytes.Repeat([]byte("m"), 5<<20)
	producer := dial(t, srv.Addr, client.WithMaxBatchBytes(6<<20))
	if _, err := producer.Produce(ctx, "big", msg); err != nil {
		t.Fatal(err)
	}
	if got, err := producer.Consume(ctx, "big", 0, 1); err != nil || len(got) != 1 || !bytes.Equal(got[0].Value, msg) {
		t.Fatalf("the producer reads back what it wrote: %d messages, %v", len(got), err)
	}

	const limit = 1 << 20
	small := dial(t, srv.Addr, client.WithMaxResponseBytes(limit))
	size := protocol.ConsumeResponseHeaderSize + protocol.BatchHeaderSize + protocol.MessagesSize(msg)
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, client.ErrResponseTooLarge) || errors.Is(err, client.ErrConnection) {
			t.Fatalf("%s over the limit: %v, want ErrResponseTooLarge and not ErrConnection", what, err)
		}
		for _, want := range []string{strconv.Itoa(size), strconv.Itoa(limit), "WithMaxResponseBytes"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%s: %q does not name %s", what, err, want)
			}
		}
	}
	_, err := small.Consume(ctx, "big", 0, 1)
	check("Consume", err)
	r, err := small.NewReader("big", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Next(ctx)
	check("Reader.Next", err)
	if err := small.Ping(ctx); err != nil {
		t.Fatalf("the connection after a skipped response: %v", err)
	}
	if st := small.Stats(); st.Reconnects != 0 {
		t.Fatalf("%d reconnects: the skipped response broke the connection", st.Reconnects)
	}
}

// TestConsumeAsksWhatItCanRead: consume requests ask for no more batch
// bytes than a response within WithMaxResponseBytes holds, so batches that
// each fit are read, a few per response, where asking for the default
// 4 MiB would have drawn a response over the limit.
func TestConsumeAsksWhatItCanRead(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	ctx := testCtx(t)
	const n, limit = 8, 1 << 20
	producer := dial(t, srv.Addr)
	want := make([][]byte, n)
	for i := range want {
		want[i] = bytes.Repeat([]byte{byte('a' + i)}, 200<<10)
		if _, err := producer.Produce(ctx, "wide", want[i]); err != nil { // a batch each
			t.Fatal(err)
		}
	}
	px := startProxy(t, srv.Addr)
	c := dial(t, px.Addr(), client.WithMaxResponseBytes(limit))
	check := func(what string, got []client.Message) {
		t.Helper()
		if len(got) != n {
			t.Fatalf("%s: %d messages, want %d", what, len(got), n)
		}
		for i, m := range got {
			if m.Offset != int64(i) || !bytes.Equal(m.Value, want[i]) {
				t.Fatalf("%s: message %d at offset %d is not the one produced", what, i, m.Offset)
			}
		}
		if asked := px.consumeMaxBytes.Load(); asked <= 0 || asked > limit-protocol.ConsumeResponseHeaderSize {
			t.Fatalf("%s asked for %d batch bytes; a response within %d bytes holds %d", what, asked, limit, limit-protocol.ConsumeResponseHeaderSize)
		}
	}
	got, err := c.Consume(ctx, "wide", 0, n)
	if err != nil {
		t.Fatal(err)
	}
	check("Consume", got)
	r, err := c.NewReader("wide", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got = got[:0]
	for len(got) < n {
		msgs, err := r.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			got = append(got, client.Message{Offset: m.Offset, Value: bytes.Clone(m.Value)})
		}
	}
	check("Reader", got)
}

// TestConnectionLimitError: a client of a server at its connection limit
// gets the server's limit-reached error, naming the limit, instead of a
// bare EOF.
func TestConnectionLimitError(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) { c.MaxConns = 1 })
	ctx := testCtx(t)
	first := dial(t, srv.Addr)
	if err := first.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := client.Dial(ctx, srv.Addr, client.WithRetries(0, 0))
	if err == nil {
		second.Close()
	}
	var ce *client.Error
	if !errors.Is(err, client.ErrLimitReached) || !errors.As(err, &ce) || ce.Code != client.CodeLimitReached || !strings.Contains(ce.Message, "-max-conns") {
		t.Fatalf("dial over the connection limit: %v, want ErrLimitReached naming -max-conns", err)
	}
}

// TestDecodedSizeBounded: a small compressed batch whose body decodes to
// more than WithMaxResponseBytes (a real server stores it: it decodes to
// exactly what it declares) fails its consume with ErrResponseTooLarge
// naming the limit and the option, before anything is decoded; a client
// with a larger limit reads it.
func TestDecodedSizeBounded(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	ctx := testCtx(t)
	msg := make([]byte, 4<<20) // zeros: a few hundred bytes once compressed
	producer := dial(t, srv.Addr, client.WithCompression(client.CompressionZstd))
	if _, err := producer.Produce(ctx, "z", msg); err != nil {
		t.Fatal(err)
	}
	const limit = 1 << 20
	small := dial(t, srv.Addr, client.WithMaxResponseBytes(limit))
	_, err := small.Consume(ctx, "z", 0, 1)
	if !errors.Is(err, client.ErrResponseTooLarge) {
		t.Fatalf("consume of a batch decoding past the limit: %v, want ErrResponseTooLarge", err)
	}
	raw := strconv.Itoa(protocol.MessagesSize(msg))
	for _, want := range []string{raw, strconv.Itoa(limit), "WithMaxResponseBytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%q does not name %s", err, want)
		}
	}
	if got, err := producer.Consume(ctx, "z", 0, 1); err != nil || len(got) != 1 || !bytes.Equal(got[0].Value, msg) {
		t.Fatalf("a client with the default limit: %d messages, %v", len(got), err)
	}
}

// TestDecodeAllocatesDeclared: a batch from a (fake) server that declares
// 256 MiB decoded, in a 50-byte zstd body, fails with ErrResponseTooLarge
// under the default limit without allocating what it declares.
func TestDecodeAllocatesDeclared(t *testing.T) {
	const declared = 256 << 20
	body := protocol.AppendBatchRaw(nil, protocol.CodecZstd, 1, protocol.AppendMessage(nil, []byte("x")))
	bt, _, err := protocol.ParseBatch(body)
	if err != nil {
		t.Fatal(err)
	}
	batch := protocol.AppendBatchBody(nil, protocol.CodecZstd, 1, declared, bt.Body)
	addr := fakeServer(t, func(_ int, nc net.Conn) {
		serveOps(nc, func(h protocol.RequestHeader, _ []byte) bool {
			if h.Op == protocol.OpConsume {
				resp := protocol.AppendConsumeResponseHeader(nil, h.CorrID, 0, 1, len(batch))
				nc.Write(append(resp, batch...))
			}
			return true
		})
	})
	c := dial(t, addr)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = c.Consume(testCtx(t), "t", 0, 1)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, client.ErrResponseTooLarge) || !strings.Contains(err.Error(), strconv.Itoa(declared)) {
		t.Fatalf("consume of a batch declaring %d bytes: %v", declared, err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Fatalf("decoding a %d-byte batch allocated %d MiB", len(batch), grew>>20)
	}
}
