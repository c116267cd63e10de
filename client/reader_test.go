package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
)

func newReader(t *testing.T, c *client.Client, topic string, from int64) *client.Reader {
	t.Helper()
	r, err := c.NewReader(topic, from)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// readerValue is message i of the Reader tests: sizes vary, so responses
// end mid-batch and span several buffers' worth.
func readerValue(i int) []byte {
	return append(fmt.Appendf(nil, "m%d-", i), bytes.Repeat([]byte{byte('a' + i%26)}, i%3000)...)
}

// A Reader returns every message in order, across responses larger than
// one buffer, with values intact while they are lent.
func TestReaderReadsEverythingInOrder(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	const total = 12000 // about 18 MB: several 4 MiB responses
	for i := 0; i < total; i += 500 {
		msgs := make([][]byte, 500)
		for j := range msgs {
			msgs[j] = readerValue(i + j)
		}
		if _, err := c.Produce(ctx, "r", msgs...); err != nil {
			t.Fatal(err)
		}
	}
	r := newReader(t, c, "r", 0)
	next, calls := 0, 0
	for next < total {
		msgs, err := r.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		calls++
		for _, m := range msgs {
			if m.Offset != int64(next) || !bytes.Equal(m.Value, readerValue(next)) {
				t.Fatalf("message %d: offset %d, value %.20q", next, m.Offset, m.Value)
			}
			next++
		}
		if r.Offset() != int64(next) {
			t.Fatalf("Offset() = %d after %d messages", r.Offset(), next)
		}
	}
	if calls < 4 {
		t.Fatalf("%d responses for about 18 MB, want several", calls)
	}
}

// At the end of the topic Next waits for the next message instead of
// spinning, and a negative offset counts back from the end.
func TestReaderWaitsAtTheEnd(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	produceNumbered(t, c, "w", "m", 5, 5)
	r := newReader(t, c, "w", -1)
	msgs, err := r.Next(ctx)
	if err != nil || len(msgs) != 1 || msgs[0].Offset != 4 {
		t.Fatalf("from -1: %v %v", msgs, err)
	}
	before := c.Stats().Errors
	parked := make(chan bool, 1)
	go func() {
		parked <- until(func() bool { return srv.Broker.Stats().ParkedPolls > 0 }) // Next waits at the end
		_, _ = c.Produce(context.Background(), "w", []byte("late"))
	}()
	msgs, err = r.Next(ctx)
	if err != nil || len(msgs) != 1 || string(msgs[0].Value) != "late" || msgs[0].Offset != 5 {
		t.Fatalf("after the end: %v %v", msgs, err)
	}
	if !<-parked {
		t.Fatal("Next did not wait in a long poll at the end of the topic")
	}
	if c.Stats().Errors != before {
		t.Fatal("waiting at the end counted errors")
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := r.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next at the end with a short context: %v", err)
	}
	// The wait goes on in the next call.
	if _, err := c.Produce(ctx, "w", []byte("later")); err != nil {
		t.Fatal(err)
	}
	if msgs, err := r.Next(ctx); err != nil || len(msgs) != 1 || string(msgs[0].Value) != "later" {
		t.Fatalf("after a canceled wait: %v %v", msgs, err)
	}
}

func TestReaderCompressedBatches(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	ctx := testCtx(t)
	for _, codec := range []client.Compression{client.CompressionS2, client.CompressionZstd} {
		c := dial(t, srv.Addr, client.WithCompression(codec))
		produceNumbered(t, c, "z", codec.String(), 300, 100)
	}
	c := dial(t, srv.Addr)
	r := newReader(t, c, "z", 0)
	var got []string
	for len(got) < 600 {
		msgs, err := r.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			got = append(got, string(m.Value))
		}
	}
	if got[0] != "s20" || got[299] != "s2299" || got[300] != "zstd0" || got[599] != "zstd299" {
		t.Fatalf("compressed messages: %q ... %q", got[0], got[599])
	}
}

func TestReaderErrorsAndClose(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	r := newReader(t, c, "missing", 0)
	if _, err := r.Next(ctx); !errors.Is(err, client.ErrTopicNotFound) {
		t.Fatalf("missing topic: %v", err)
	}
	r.Close()
	if _, err := r.Next(ctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Next after Close: %v", err)
	}

	// Client.Close ends a Reader waiting at the end of a topic.
	produceNumbered(t, c, "e", "m", 1, 1)
	r2 := newReader(t, c, "e", 1)
	done := make(chan error, 1)
	go func() {
		_, err := r2.Next(ctx)
		done <- err
	}()
	waitFor(t, "Next to wait at the end", func() bool { return srv.Broker.Stats().ParkedPolls > 0 })
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, client.ErrClosed) {
			t.Fatalf("Next while the client closes: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Client.Close left a Reader waiting")
	}
}

// A Reader goes on after its connection breaks.
func TestReaderReconnects(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	p := startProxy(t, srv.Addr)
	c := dial(t, p.Addr(), client.WithRetries(5, 20*time.Millisecond))
	ctx := testCtx(t)
	produceNumbered(t, c, "rc", "m", 10, 10)
	r := newReader(t, c, "rc", 0)
	msgs, err := r.Next(ctx)
	if err != nil || len(msgs) != 10 {
		t.Fatalf("first read: %d %v", len(msgs), err)
	}
	p.Down()
	if err := p.Up(srv.Addr); err != nil {
		t.Fatal(err)
	}
	produceNumbered(t, dial(t, srv.Addr), "rc", "n", 3, 3)
	msgs, err = r.Next(ctx)
	if err != nil || len(msgs) != 3 || msgs[0].Offset != 10 {
		t.Fatalf("after the connection broke: %v %v", msgs, err)
	}
}
