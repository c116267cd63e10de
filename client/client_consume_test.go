package client_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// --- corruption on the way ----------------------------------------------------

// A produce whose batch is damaged between client and server is refused
// with ErrBadBatch and stores nothing; the connection stays usable.
func TestProduceCorruptedOnTheWay(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	p := startProxy(t, srv.Addr)
	ctx := testCtx(t)
	for _, codec := range []protocol.Codec{protocol.CodecNone, protocol.CodecS2, protocol.CodecZstd} {
		topic := "crc-" + codec.String()
		c := dial(t, p.Addr(), client.WithCompression(codec))
		if _, err := c.Produce(ctx, topic, []byte("first")); err != nil {
			t.Fatal(err)
		}
		p.flipProduce.Store(1)
		_, err := c.Produce(ctx, topic, []byte("hello"), []byte("world"))
		wantServerError(t, err, client.ErrBadBatch, protocol.CodeBadBatch)
		base, err := c.Produce(ctx, topic, []byte("second"))
		if err != nil || base != 1 {
			t.Fatalf("%s: Produce after the refused batch: %d, %v", codec, base, err)
		}
		msgs, err := c.Consume(ctx, topic, 0, 0)
		if err != nil || !slices.Equal(values(msgs), []string{"first", "second"}) {
			t.Fatalf("%s: stored %q, %v", codec, values(msgs), err)
		}
		if st := c.Stats(); st.Reconnects != 0 {
			t.Fatalf("%s: the refused batch cost a reconnect: %+v", codec, st)
		}
	}
}

// The same over a plain connection: a frame built with
// protocol.AppendProduceRequest with one byte flipped in the batch.
func TestProduceRawCorruptFrame(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	nc, err := net.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	batch := protocol.AppendBatch(nil, []byte("hello"), []byte("world"))
	for i, pos := range []int{len(batch) - 1, 21 /* the CRC itself */, protocol.MinBatchHeaderSize} {
		bad := slices.Clone(batch)
		bad[pos] ^= 0x40
		id := uint32(10 + i)
		if _, err := nc.Write(protocol.AppendProduceRequest(nil, id, "raw", protocol.ProduceCreateTopic, bad)); err != nil {
			t.Fatal(err)
		}
		h, payload := readRawFrame(t, nc)
		if h.CorrID != id || h.Code != protocol.CodeBadBatch {
			t.Fatalf("flip at %d: answer %+v, want code %s", pos, h, protocol.CodeBadBatch)
		}
		msg, _ := protocol.ParseErrorResponse(payload)
		err := error(&client.Error{Op: h.Op, Code: h.Code, Message: string(msg)})
		if !errors.Is(err, client.ErrBadBatch) {
			t.Fatalf("%v does not match ErrBadBatch", err)
		}
	}
	// Nothing was stored; the good batch gets offset 0 on the same conn.
	nc.Write(protocol.AppendProduceRequest(nil, 99, "raw", protocol.ProduceCreateTopic, batch))
	h, payload := readRawFrame(t, nc)
	r, err := protocol.ParseProduceResponse(payload)
	if h.Code != protocol.CodeOK || err != nil || r.BaseOffset != 0 || r.Count != 2 {
		t.Fatalf("good batch after bad ones: %+v %+v %v", h, r, err)
	}
}

// A consume response damaged on the way fails the client's CRC check.
func TestConsumeCorruptedOnTheWay(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	p := startProxy(t, srv.Addr)
	c := dial(t, p.Addr())
	ctx := testCtx(t)
	produceNumbered(t, c, "rc", "m", 10, 5)

	p.flipConsume.Store(1)
	if msgs, err := c.Consume(ctx, "rc", 0, 0); !errors.Is(err, client.ErrCorrupt) {
		t.Fatalf("Consume of a damaged response: %q, %v; want ErrCorrupt", values(msgs), err)
	}
	msgs, err := c.Consume(ctx, "rc", 0, 0)
	if err != nil || len(msgs) != 10 {
		t.Fatalf("Consume after: %q, %v", values(msgs), err)
	}
}

// --- consume ------------------------------------------------------------------

func TestConsumeRanges(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	produceNumbered(t, c, "r", "m", 50, 7) // batches straddle every range below

	rng := func(from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprint("m", i))
		}
		return out
	}
	cases := []struct {
		offset   int64
		limit    int
		from, to int
	}{
		{0, 0, 0, 50},
		{0, -1, 0, 50},
		{0, 10, 0, 10},
		{3, 5, 3, 8},
		{7, 7, 7, 14},
		{6, 1, 6, 7},
		{45, 10, 45, 50},
		{49, 1, 49, 50},
		{50, 10, 50, 50},
		{50, 0, 50, 50},
		{-1, 0, 49, 50},
		{-1, 5, 49, 50},
		{-10, 3, 40, 43},
		{-10, 0, 40, 50},
		{-50, 2, 0, 2},
		{-100, 2, 0, 2},
	}
	for _, tc := range cases {
		msgs, next, err := c.ConsumeInto(ctx, nil, "r", tc.offset, tc.limit)
		if err != nil {
			t.Fatalf("offset %d limit %d: %v", tc.offset, tc.limit, err)
		}
		if got, want := values(msgs), rng(tc.from, tc.to); !slices.Equal(got, want) {
			t.Errorf("offset %d limit %d: got %q, want %q", tc.offset, tc.limit, got, want)
			continue
		}
		for i, m := range msgs {
			if m.Offset != int64(tc.from+i) || m.Time.IsZero() {
				t.Errorf("offset %d limit %d: message %d has offset %d time %s", tc.offset, tc.limit, i, m.Offset, m.Time)
			}
		}
		if next != int64(tc.to) {
			t.Errorf("offset %d limit %d: next %d, want %d", tc.offset, tc.limit, next, tc.to)
		}
	}
	_, err := c.Consume(ctx, "r", 51, 1)
	wantServerError(t, err, client.ErrOffsetOutOfRange, protocol.CodeOffsetOutOfRange)
}

// A limit whose messages do not fit in one response still gets all of
// them: Consume returns exactly [offset, offset+limit) of what exists.
func TestConsumeLimitBeyondOneResponse(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	const n, size = 12, 512 << 10 // 6 MiB, more than one 4 MiB response
	for i := range n {
		v := bytes.Repeat([]byte{byte('a' + i)}, size)
		if _, err := c.Produce(ctx, "big", v); err != nil {
			t.Fatal(err)
		}
	}
	msgs, next, err := c.ConsumeInto(ctx, nil, "big", 0, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != n || next != n {
		t.Fatalf("Consume(0, %d) of %d messages of %d KiB returned %d messages, next %d; want all %d", n, n, size>>10, len(msgs), next, n)
	}
	for i, m := range msgs {
		if m.Offset != int64(i) || len(m.Value) != size || m.Value[0] != byte('a'+i) {
			t.Fatalf("message %d: offset %d, %d bytes", i, m.Offset, len(m.Value))
		}
	}
}

func TestConsumeIntoReuse(t *testing.T) {
	// Not parallel: AllocsPerRun counts every goroutine's allocations.
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	produceNumbered(t, c, "reuse", "m", 1000, 500)

	buf := make([]client.Message, 0, 1000)
	out, next, err := c.ConsumeInto(ctx, buf, "reuse", 0, 10)
	if err != nil || len(out) != 10 || next != 10 {
		t.Fatalf("first ConsumeInto: %d messages, next %d, %v", len(out), next, err)
	}
	if &out[0] != &buf[:1][0] {
		t.Fatal("ConsumeInto did not fill the buffer it was given")
	}
	// Appends after what dst holds.
	out, next, err = c.ConsumeInto(ctx, out, "reuse", next, 5)
	if err != nil || len(out) != 15 || next != 15 || string(out[14].Value) != "m14" || string(out[0].Value) != "m0" {
		t.Fatalf("appending ConsumeInto: %q, next %d, %v", values(out), next, err)
	}
	// Reset and go on from next until the end.
	total := 15
	for next < 1000 {
		out, next, err = c.ConsumeInto(ctx, out[:0], "reuse", next, 300)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range out {
			if want := fmt.Sprint("m", total+i); string(m.Value) != want {
				t.Fatalf("message %d: %q, want %q", total+i, m.Value, want)
			}
		}
		total += len(out)
	}
	if total != 1000 || &out[0] != &buf[:1][0] {
		t.Fatalf("read %d messages; buffer reused: %v", total, &out[0] == &buf[:1][0])
	}

	// Steady state: the allocations of a call do not grow with its messages.
	allocs := func(limit int) float64 {
		return testing.AllocsPerRun(20, func() {
			out, _, err = c.ConsumeInto(ctx, out[:0], "reuse", 0, limit)
			if err != nil || len(out) != limit {
				t.Fatalf("ConsumeInto %d: %d, %v", limit, len(out), err)
			}
		})
	}
	few, many := allocs(10), allocs(1000)
	t.Logf("ConsumeInto allocations: %.1f for 10 messages, %.1f for 1000", few, many)
	if many-few > 3 {
		t.Fatalf("ConsumeInto allocates per message: %.1f for 10 messages, %.1f for 1000", few, many)
	}
}

// mixedMessages returns n messages of mixed sizes, 0 bytes to 1 MiB and
// mostly small, compressible and each different, slicing one shared pool.
func mixedMessages(n int, seed uint64) [][]byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	pool := make([]byte, 3<<20)
	for i := range pool {
		pool[i] = 'a' + byte(r.IntN(16)) // 4 bits of entropy a byte: compressible
	}
	msgs := make([][]byte, n)
	for i := range msgs {
		var size int
		switch x := r.IntN(1000); {
		case i == 0:
			size = 0
		case i == 1 || i == n/2:
			size = 1 << 20
		case i%25000 == 7:
			size = 64<<10 + r.IntN(1<<20-64<<10)
		case x < 50:
			size = 0
		case x < 700:
			size = 1 + r.IntN(64)
		case x < 990:
			size = 64 + r.IntN(960)
		default:
			size = 1024 + r.IntN(7*1024)
		}
		off := r.IntN(len(pool) - size - 8)
		m := pool[off : off+size : off+size]
		if size >= 8 { // make it unique
			m = slices.Clone(m)
			binary.LittleEndian.PutUint64(m, uint64(i))
		}
		msgs[i] = m
	}
	return msgs
}

// Produce then consume 100,000 messages of mixed sizes with each codec:
// byte-identical, in order, at consecutive offsets.
func TestProduceConsumeMixedSizes(t *testing.T) {
	t.Parallel()
	const n = 100_000
	msgs := mixedMessages(n, 1)
	var raw int64
	for _, m := range msgs {
		raw += int64(len(m))
	}
	srv := brokertest.Start(t, 1)
	stored := map[client.Compression]int64{}
	for _, codec := range []client.Compression{client.CompressionNone, client.CompressionS2, client.CompressionZstd} {
		t.Run(codec.String(), func(t *testing.T) {
			c := dial(t, srv.Addr, client.WithCompression(codec))
			// 27 MB through the race detector: more than testCtx's 30 s on
			// a loaded machine.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			topic := "mixed-" + codec.String()
			for i := 0; i < n; {
				j, bytes := i, 0
				for j < n && j-i < 1000 && bytes < 4<<20 {
					bytes += len(msgs[j])
					j++
				}
				base, err := c.Produce(ctx, topic, msgs[i:j]...)
				if err != nil || base != int64(i) {
					t.Fatalf("Produce [%d, %d): base %d, %v", i, j, base, err)
				}
				i = j
			}
			var buf []client.Message
			next := int64(0)
			for next < n {
				var err error
				from := next
				buf, next, err = c.ConsumeInto(ctx, buf[:0], topic, next, 0)
				if err != nil {
					t.Fatalf("ConsumeInto at %d: %v", from, err)
				}
				if len(buf) == 0 {
					t.Fatalf("ConsumeInto at %d: no messages", from)
				}
				for k, m := range buf {
					off := from + int64(k)
					if m.Offset != off {
						t.Fatalf("message %d has offset %d", off, m.Offset)
					}
					if !bytes.Equal(m.Value, msgs[off]) {
						t.Fatalf("message %d: %d bytes differ from the %d produced", off, len(m.Value), len(msgs[off]))
					}
				}
			}
			info, err := c.TopicInfo(ctx, topic)
			if err != nil || info.Next != n {
				t.Fatalf("TopicInfo: %+v, %v", info, err)
			}
			stored[codec] = info.Bytes
			if st := c.Stats(); st.MessagesAcked != n || st.MessagesReceived != n {
				t.Fatalf("Stats: %+v", st)
			}
		})
	}
	t.Logf("%d messages, %d bytes raw; stored: %v", n, raw, stored)
	for _, codec := range []client.Compression{client.CompressionS2, client.CompressionZstd} {
		if stored[codec] != 0 && stored[codec] >= stored[client.CompressionNone] {
			t.Errorf("%s batches take %d bytes on the server, uncompressed %d: not compressed", codec, stored[codec], stored[client.CompressionNone])
		}
	}
}
