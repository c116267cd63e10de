package client_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// --- helpers ----------------------------------------------------------------

// testCtx is a context that ends before the test's own deadline would.
func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// dial connects to addr and closes the client when the test ends.
// ioTimeout bounds every wait of these tests.
const ioTimeout = 10 * time.Second

// until polls cond every millisecond until it holds (true) or ioTimeout
// passes (false).
func until(cond func() bool) bool {
	deadline := time.Now().Add(ioTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// waitFor fails the test unless cond holds within ioTimeout.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !until(cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func dial(t testing.TB, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.Dial(testCtx(t), addr, opts...)
	if err != nil {
		t.Fatalf("Dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// freeAddr returns a loopback address nothing listens on right now.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// values turns messages into their values as strings.
func values(msgs []client.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Value)
	}
	return out
}

// produceNumbered produces n messages "<prefix><i>" in batches of batch.
func produceNumbered(t testing.TB, c *client.Client, topic, prefix string, n, batch int) {
	t.Helper()
	ctx := testCtx(t)
	for i := 0; i < n; i += batch {
		var msgs [][]byte
		for j := i; j < min(i+batch, n); j++ {
			msgs = append(msgs, fmt.Appendf(nil, "%s%d", prefix, j))
		}
		if _, err := c.Produce(ctx, topic, msgs...); err != nil {
			t.Fatalf("Produce %s [%d, %d): %v", topic, i, i+len(msgs), err)
		}
	}
}

// wantServerError checks err is the server's answer with code, matching
// the sentinel want.
func wantServerError(t testing.TB, err error, want error, code protocol.Code) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error %v, want %v", err, want)
	}
	var ce *client.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T) is not a *client.Error", err, err)
	}
	if ce.Code != code {
		t.Fatalf("error code %s, want %s (%v)", ce.Code, code, err)
	}
}

// proxy forwards whole frames between clients and a server, and can
// corrupt or swallow them on the way, or go down and come back up on the
// same address (Go's listeners rebind at once) in front of a new server.
type proxy struct {
	addr string

	flipProduce atomic.Int32 // produce requests whose batch to corrupt
	flipConsume atomic.Int32 // consume responses whose batches to corrupt
	drop        atomic.Bool  // swallow requests: they are never answered
	cutProduce  atomic.Int32 // produce responses to swallow, cutting the connection instead
	dropped     atomic.Int64 // requests swallowed

	consumes        atomic.Int64 // consume requests forwarded
	consumeWaitMs   atomic.Int64 // the last one's max wait
	consumeMaxBytes atomic.Int64 // the last one's max bytes

	mu     sync.Mutex
	ln     net.Listener
	target string
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	p := &proxy{addr: "127.0.0.1:0"}
	if err := p.Up(target); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Down()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) Addr() string { return p.addr }

// Up listens (again) on the proxy's address and forwards to target.
func (p *proxy) Up(target string) error {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.addr, p.ln, p.target = ln.Addr().String(), ln, target
	p.mu.Unlock()
	p.wg.Add(1)
	go p.accept(ln)
	return nil
}

// Down closes the listener and every connection: dials are refused.
func (p *proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		cc, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target, up := p.target, p.ln == ln
		p.mu.Unlock()
		sc, err := net.Dial("tcp", target)
		if err != nil || !up {
			cc.Close()
			if sc != nil {
				sc.Close()
			}
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, cc, sc)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(sc, cc, true)
		go p.pipe(cc, sc, false)
	}
}

// take consumes one unit of n if there is one.
func take(n *atomic.Int32) bool {
	for {
		v := n.Load()
		if v <= 0 {
			return false
		}
		if n.CompareAndSwap(v, v-1) {
			return true
		}
	}
}

func (p *proxy) pipe(dst, src net.Conn, requests bool) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	var l [protocol.FrameLengthSize]byte
	for {
		if _, err := io.ReadFull(src, l[:]); err != nil {
			return
		}
		frame := make([]byte, protocol.FrameLengthSize+int(binary.LittleEndian.Uint32(l[:])))
		copy(frame, l[:])
		if _, err := io.ReadFull(src, frame[protocol.FrameLengthSize:]); err != nil {
			return
		}
		op := protocol.Op(frame[5])
		if requests {
			if p.drop.Load() {
				p.dropped.Add(1)
				continue
			}
			// The last byte is in the batch body, which the CRC covers.
			if op == protocol.OpProduce && take(&p.flipProduce) {
				frame[len(frame)-1] ^= 0x01
			}
			if op == protocol.OpConsume {
				if req, err := protocol.ParseConsumeRequest(frame[protocol.HeaderSize:]); err == nil {
					p.consumeWaitMs.Store(int64(req.MaxWaitMs))
					p.consumeMaxBytes.Store(int64(req.MaxBytes))
				}
				p.consumes.Add(1)
			}
		} else {
			code := protocol.Code(binary.LittleEndian.Uint16(frame[6:]))
			hasBatch := len(frame) > protocol.ConsumeResponseHeaderSize+protocol.MinBatchHeaderSize
			if op == protocol.OpConsume && code == protocol.CodeOK && hasBatch && take(&p.flipConsume) {
				frame[len(frame)-1] ^= 0x01
			}
			if op == protocol.OpProduce && take(&p.cutProduce) {
				return // the server stored it; the client never hears so
			}
		}
		if _, err := dst.Write(frame); err != nil {
			return
		}
	}
}

// readRawFrame reads one response frame from a plain connection.
func readRawFrame(t testing.TB, c net.Conn) (protocol.ResponseHeader, []byte) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var l [protocol.FrameLengthSize]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		t.Fatal(err)
	}
	f := make([]byte, protocol.FrameLengthSize+int(binary.LittleEndian.Uint32(l[:])))
	copy(f, l[:])
	if _, err := io.ReadFull(c, f[protocol.FrameLengthSize:]); err != nil {
		t.Fatal(err)
	}
	h, p, err := protocol.ParseResponseHeader(f)
	if err != nil {
		t.Fatal(err)
	}
	return h, p
}

// --- connection -------------------------------------------------------------

func TestDialClosedPort(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	start := time.Now()
	c, err := client.Dial(testCtx(t), addr, client.WithRetries(1, 10*time.Millisecond), client.WithDialTimeout(time.Second))
	if err == nil {
		c.Close()
		t.Fatal("Dial of a closed port succeeded")
	}
	if !errors.Is(err, client.ErrConnection) {
		t.Fatalf("Dial: %v, want ErrConnection", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Dial took %s to fail", d)
	}

	// A cancelled context fails at once, whatever the retries.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if c, err := client.Dial(ctx, addr); err == nil {
		c.Close()
		t.Fatal("Dial with a cancelled context succeeded")
	}
}

func TestPingAndClose(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	ctx := testCtx(t)
	c, err := client.Dial(ctx, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := c.Ping(ctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Ping after Close: %v, want ErrClosed", err)
	}
	if _, err := c.Produce(ctx, "t", []byte("x")); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Produce after Close: %v, want ErrClosed", err)
	}
	if _, err := c.Consume(ctx, "t", 0, 1); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Consume after Close: %v, want ErrClosed", err)
	}
}

// --- admin ------------------------------------------------------------------

func TestCreateDeleteTopic(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)

	if err := c.CreateTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	err := c.CreateTopic(ctx, "orders")
	wantServerError(t, err, client.ErrTopicExists, protocol.CodeTopicExists)
	var ce *client.Error
	errors.As(err, &ce)
	if ce.Op != protocol.OpCreateTopic || ce.Message == "" || !strings.Contains(err.Error(), ce.Message) {
		t.Fatalf("error %+v: want op create topic and a message in %q", ce, err.Error())
	}
	if errors.Is(err, client.ErrTopicNotFound) {
		t.Fatalf("%v matches ErrTopicNotFound too", err)
	}

	produceNumbered(t, c, "orders", "m", 3, 3)
	if err := c.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	wantServerError(t, c.DeleteTopic(ctx, "orders"), client.ErrTopicNotFound, protocol.CodeTopicNotFound)
	_, err = c.TopicInfo(ctx, "orders")
	wantServerError(t, err, client.ErrTopicNotFound, protocol.CodeTopicNotFound)
	_, err = c.Consume(ctx, "orders", 0, 1)
	wantServerError(t, err, client.ErrTopicNotFound, protocol.CodeTopicNotFound)

	// Recreated, the topic starts empty.
	if err := c.CreateTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	info, err := c.TopicInfo(ctx, "orders")
	if err != nil || info.Next != 0 || info.Oldest != 0 {
		t.Fatalf("recreated topic: %+v, %v", info, err)
	}
}

func TestListTopics(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)

	if got, err := c.ListTopics(ctx, ""); err != nil || len(got) != 0 {
		t.Fatalf("ListTopics on an empty server: %q, %v", got, err)
	}
	for _, name := range []string{"orders.us", "payments", "orders.eu", "orders-x", "orders.eu.archive"} {
		if err := c.CreateTopic(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		prefix, regex string
		want          []string
	}{
		{"", "", []string{"orders-x", "orders.eu", "orders.eu.archive", "orders.us", "payments"}},
		{"orders.", "", []string{"orders.eu", "orders.eu.archive", "orders.us"}},
		{"orders.eu", "", []string{"orders.eu", "orders.eu.archive"}},
		{"pay", "", []string{"payments"}},
		{"zzz", "", nil},
		{"orders", `\.us$`, []string{"orders.us"}},
		{"", `^orders\.[a-z]+$`, []string{"orders.eu", "orders.us"}},
		{"", `archive|pay`, []string{"orders.eu.archive", "payments"}},
		{"payments", `x`, nil},
	}
	for _, tc := range cases {
		var got []string
		var err error
		if tc.regex == "" {
			got, err = c.ListTopics(ctx, tc.prefix)
		} else {
			got, err = c.ListTopicsRegex(ctx, tc.prefix, tc.regex)
		}
		if err != nil {
			t.Fatalf("prefix %q regex %q: %v", tc.prefix, tc.regex, err)
		}
		if len(got) != 0 || len(tc.want) != 0 {
			if !slices.Equal(got, tc.want) {
				t.Errorf("prefix %q regex %q: got %q, want %q", tc.prefix, tc.regex, got, tc.want)
			}
		}
	}

	// A bad regex is the server's invalid-argument answer; the connection
	// stays usable.
	_, err := c.ListTopicsRegex(ctx, "", "(")
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != protocol.CodeInvalidArgument || ce.Op != protocol.OpListTopics {
		t.Fatalf("bad regex: %v, want a *client.Error with code invalid argument", err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("Ping after a bad regex: %v", err)
	}
}

func TestTopicInfo(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)

	if err := c.CreateTopic(ctx, "info"); err != nil {
		t.Fatal(err)
	}
	info, err := c.TopicInfo(ctx, "info")
	if err != nil || info.Oldest != 0 || info.Next != 0 {
		t.Fatalf("empty topic: %+v, %v", info, err)
	}
	produceNumbered(t, c, "info", "m", 25, 10)
	info, err = c.TopicInfo(ctx, "info")
	if err != nil {
		t.Fatal(err)
	}
	if info.Oldest != 0 || info.Next != 25 || info.Bytes <= 0 || info.Segments < 1 {
		t.Fatalf("after 25 messages: %+v", info)
	}
	// The server's own view agrees.
	si, err := srv.Store.Info("info")
	if err != nil {
		t.Fatal(err)
	}
	if si.Next != info.Next || si.Oldest != info.Oldest {
		t.Fatalf("client says %+v, store says %+v", info, si)
	}
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1, func(so *storage.Options, _ *broker.Config) { so.Entries = 10 })
	c := dial(t, srv.Addr)
	ctx := testCtx(t)

	produceNumbered(t, c, "tr", "m", 100, 10)
	oldest, err := c.Truncate(ctx, "tr", 35)
	if err != nil {
		t.Fatal(err)
	}
	if oldest <= 0 || oldest > 35 {
		t.Fatalf("Truncate before 35: oldest %d, want in (0, 35]", oldest)
	}
	info, err := c.TopicInfo(ctx, "tr")
	if err != nil || info.Oldest != oldest || info.Next != 100 {
		t.Fatalf("TopicInfo after truncate: %+v, %v (oldest %d)", info, err, oldest)
	}
	if oldest > 0 {
		_, err = c.Consume(ctx, "tr", oldest-1, 1)
		wantServerError(t, err, client.ErrOffsetOutOfRange, protocol.CodeOffsetOutOfRange)
	}
	msgs, err := c.Consume(ctx, "tr", oldest, 2)
	if err != nil || len(msgs) != 2 || msgs[0].Offset != oldest || string(msgs[0].Value) != fmt.Sprint("m", oldest) {
		t.Fatalf("Consume at the new oldest %d: %v, %v", oldest, values(msgs), err)
	}
	// Far back is raised to the oldest.
	msgs, err = c.Consume(ctx, "tr", -1000, 1)
	if err != nil || len(msgs) != 1 || msgs[0].Offset != oldest {
		t.Fatalf("Consume -1000: %+v, %v", msgs, err)
	}
	// Truncating to before the oldest keeps everything.
	if o, err := c.Truncate(ctx, "tr", 0); err != nil || o != oldest {
		t.Fatalf("Truncate before 0: %d, %v; want %d", o, err, oldest)
	}
	_, err = c.Truncate(ctx, "tr", 101)
	wantServerError(t, err, client.ErrOffsetOutOfRange, protocol.CodeOffsetOutOfRange)
	_, err = c.Truncate(ctx, "missing", 1)
	wantServerError(t, err, client.ErrTopicNotFound, protocol.CodeTopicNotFound)
}

func TestTruncateTime(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	now.Store(t0.UnixNano())
	srv := brokertest.Start(t, 1, func(so *storage.Options, _ *broker.Config) {
		so.Entries = 10
		so.Now = func() time.Time { return time.Unix(0, now.Load()) }
	})
	c := dial(t, srv.Addr)
	ctx := testCtx(t)

	produceNumbered(t, c, "tt", "old", 30, 10)
	t1 := t0.Add(time.Hour)
	now.Store(t1.UnixNano())
	produceNumbered(t, c, "tt", "new", 30, 10)

	// Message.Time is the server's append time.
	msgs, err := c.Consume(ctx, "tt", 0, 0)
	if err != nil || len(msgs) != 60 {
		t.Fatalf("Consume: %d messages, %v", len(msgs), err)
	}
	for _, m := range msgs {
		want := t0
		if m.Offset >= 30 {
			want = t1
		}
		if !m.Time.Equal(want) {
			t.Fatalf("message %d: time %s, want %s", m.Offset, m.Time, want)
		}
	}

	oldest, err := c.TruncateTime(ctx, "tt", t0.Add(30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if oldest <= 0 || oldest > 30 {
		t.Fatalf("TruncateTime between the two runs: oldest %d, want in (0, 30]", oldest)
	}
	msgs, err = c.Consume(ctx, "tt", 30, 1)
	if err != nil || len(msgs) != 1 || string(msgs[0].Value) != "new0" {
		t.Fatalf("the newer messages are kept: %v, %v", values(msgs), err)
	}
	// A time before everything drops nothing more.
	if o, err := c.TruncateTime(ctx, "tt", t0.Add(-time.Hour)); err != nil || o != oldest {
		t.Fatalf("TruncateTime before everything: %d, %v; want %d", o, err, oldest)
	}
}

// --- produce ----------------------------------------------------------------

func TestProduceOffsetsAndStats(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)

	base, err := c.Produce(ctx, "p", []byte("a"), []byte("bb"), []byte{})
	if err != nil || base != 0 {
		t.Fatalf("first Produce: %d, %v", base, err)
	}
	base, err = c.Produce(ctx, "p", []byte("ccc"))
	if err != nil || base != 3 {
		t.Fatalf("second Produce: %d, %v", base, err)
	}
	msgs, err := c.Consume(ctx, "p", 0, 0)
	if err != nil || !slices.Equal(values(msgs), []string{"a", "bb", "", "ccc"}) {
		t.Fatalf("Consume: %q, %v", values(msgs), err)
	}
	st := c.Stats()
	if st.MessagesSent != 4 || st.MessagesAcked != 4 || st.BytesAcked <= 0 || st.BytesSent != st.BytesAcked ||
		st.MessagesReceived != 4 || st.InFlight != 0 || st.Errors != 0 {
		t.Fatalf("Stats: %+v", st)
	}

	// No messages: refused before any round trip.
	if _, err := c.Produce(ctx, "p"); !errors.Is(err, client.ErrBadBatch) {
		t.Fatalf("Produce of nothing: %v, want ErrBadBatch", err)
	}
	// A batch over the client's bound is refused locally.
	small := dial(t, srv.Addr, client.WithMaxBatchBytes(100))
	if _, err := small.Produce(ctx, "p", make([]byte, 200)); !errors.Is(err, client.ErrFrameTooLarge) {
		t.Fatalf("Produce over max batch bytes: %v, want ErrFrameTooLarge", err)
	}
	if info, _ := c.TopicInfo(ctx, "p"); info.Next != 4 {
		t.Fatalf("refused produces stored something: %+v", info)
	}
	if st := c.Stats(); st.MessagesSent != 4 {
		t.Fatalf("a produce refused before sending counts as sent: %+v", st)
	}
}

func TestProduceAutoCreate(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	ctx := testCtx(t)

	on := dial(t, srv.Addr) // default: on
	if base, err := on.Produce(ctx, "auto", []byte("x")); err != nil || base != 0 {
		t.Fatalf("Produce with auto-create: %d, %v", base, err)
	}

	off := dial(t, srv.Addr, client.WithAutoCreate(false))
	_, err := off.Produce(ctx, "manual", []byte("x"))
	wantServerError(t, err, client.ErrTopicNotFound, protocol.CodeTopicNotFound)
	var ce *client.Error
	if errors.As(err, &ce); ce.Op != protocol.OpProduce {
		t.Fatalf("error op %s, want produce", ce.Op)
	}
	if topics, _ := off.ListTopics(ctx, "manual"); len(topics) != 0 {
		t.Fatalf("topic created without auto-create: %q", topics)
	}
	if st := off.Stats(); st.Errors != 1 || st.MessagesAcked != 0 {
		t.Fatalf("Stats after a refused produce: %+v", st)
	}
	// Once created, the same client produces to it.
	if err := off.CreateTopic(ctx, "manual"); err != nil {
		t.Fatal(err)
	}
	if base, err := off.Produce(ctx, "manual", []byte("x")); err != nil || base != 0 {
		t.Fatalf("Produce to a created topic: %d, %v", base, err)
	}
	// Auto-create does not turn a produce into a topic that exists already.
	if base, err := on.Produce(ctx, "manual", []byte("y")); err != nil || base != 1 {
		t.Fatalf("Produce with auto-create to an existing topic: %d, %v", base, err)
	}
}

func TestInvalidTopic(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)

	for _, name := range []string{"", ".", "..", "a/b", "sp ace", "é", strings.Repeat("a", 256)} {
		_, err := c.Produce(ctx, name, []byte("x"))
		wantServerError(t, err, client.ErrInvalidTopic, protocol.CodeInvalidTopic)
		wantServerError(t, c.CreateTopic(ctx, name), client.ErrInvalidTopic, protocol.CodeInvalidTopic)
		_, err = c.TopicInfo(ctx, name)
		wantServerError(t, err, client.ErrInvalidTopic, protocol.CodeInvalidTopic)
		_, err = c.Consume(ctx, name, 0, 1)
		wantServerError(t, err, client.ErrInvalidTopic, protocol.CodeInvalidTopic)
	}
	// The longest valid name works, and the connection survived.
	long := strings.Repeat("a", 255)
	if _, err := c.Produce(ctx, long, []byte("x")); err != nil {
		t.Fatalf("255-byte topic: %v", err)
	}
	if st := c.Stats(); st.Reconnects != 0 {
		t.Fatalf("invalid topics cost %d reconnects", st.Reconnects)
	}
}

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

// --- follow -------------------------------------------------------------------

// Messages follows a topic while another goroutine produces to it: every
// message in order, no gaps, and the loop ends when ctx is cancelled.
func TestMessagesFollow(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	prod := dial(t, srv.Addr)
	cons := dial(t, srv.Addr)
	ctx := testCtx(t)
	if err := prod.CreateTopic(ctx, "follow"); err != nil {
		t.Fatal(err)
	}
	const n = 3000
	var followed atomic.Int64 // messages the follower has seen
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	produced := make(chan error, 1)
	go func() {
		r := rand.New(rand.NewPCG(2, 3))
		for i := 0; i < n; {
			k := min(1+r.IntN(60), n-i)
			msgs := make([][]byte, k)
			for j := range msgs {
				msgs[j] = fmt.Appendf(nil, "v%d", i+j)
			}
			if _, err := prod.Produce(ctx, "follow", msgs...); err != nil {
				produced <- err
				cancel()
				return
			}
			i += k
			if r.IntN(8) == 0 && i < n {
				// Now and then, let the follower catch up and park, so
				// that the next produce wakes a long poll.
				caughtUp := until(func() bool {
					return followed.Load() == int64(i) && srv.Broker.Stats().ParkedPolls == 1
				})
				if !caughtUp {
					produced <- fmt.Errorf("the follower did not catch up with %d messages and park: at %d", i, followed.Load())
					cancel()
					return
				}
			}
		}
		produced <- nil
	}()

	var got int64
	ended := make(chan struct{})
	var cancelledAt time.Time
	for m, err := range cons.Messages(fctx, "follow", 0) {
		if err != nil {
			t.Fatalf("Messages after %d: %v", got, err)
		}
		if m.Offset != got || string(m.Value) != fmt.Sprint("v", got) {
			t.Fatalf("message %d: offset %d value %q", got, m.Offset, m.Value)
		}
		got++
		followed.Store(got)
		if got == n {
			if err := <-produced; err != nil {
				t.Fatal(err)
			}
			go func() {
				until(func() bool { return srv.Broker.Stats().ParkedPolls > 0 }) // the follower parks in a long poll
				cancelledAt = time.Now()
				cancel()
				close(ended)
			}()
		}
		if got > n {
			t.Fatalf("message past the end: %+v", m)
		}
	}
	if got != n { // the loop ended early: the producer failed
		select {
		case err := <-produced:
			t.Fatalf("followed %d messages, want %d: %v", got, n, err)
		default:
			t.Fatalf("followed %d messages, want %d", got, n)
		}
	}
	<-ended
	if d := time.Since(cancelledAt); d > 3*time.Second {
		t.Fatalf("the loop took %s to end after cancel", d)
	}
}

// Messages from a negative offset starts that far back from the end and
// then follows.
func TestMessagesFromEnd(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	produceNumbered(t, c, "tail", "m", 20, 20)
	other := dial(t, srv.Addr)
	var got []string
	for m, err := range c.Messages(ctx, "tail", -3) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(m.Value))
		if len(got) == 3 {
			produceNumbered(t, other, "tail", "n", 2, 2)
		}
		if len(got) == 5 {
			break
		}
	}
	if want := []string{"m17", "m18", "m19", "n0", "n1"}; !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// An idle follower waits in long polls, not a busy loop: its poll asks the
// server to wait seconds, the server parks it, and a new message costs
// exactly one more poll, parked in turn.
func TestMessagesIdleNoBusyLoop(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	px := startProxy(t, srv.Addr)
	c := dial(t, px.Addr())
	other := dial(t, srv.Addr)
	ctx, cancel := context.WithCancel(testCtx(t))
	if err := c.CreateTopic(ctx, "idle"); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range c.Messages(ctx, "idle", 0) {
			if err != nil {
				t.Error(err)
				return
			}
			got <- string(m.Value)
		}
	}()
	waitFor(t, "the follower to park", func() bool { return srv.Broker.Stats().ParkedPolls == 1 })
	if w := time.Duration(px.consumeWaitMs.Load()) * time.Millisecond; w < time.Second {
		t.Errorf("the follower's poll asks the server to wait %s, not a long poll", w)
	}
	before, polls := srv.Broker.Stats().Requests, px.consumes.Load()
	if _, err := other.Produce(ctx, "idle", []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-got:
		if v != "x" {
			t.Fatalf("followed %q, want x", v)
		}
	case <-time.After(ioTimeout):
		t.Fatal("the parked follower did not get the new message")
	}
	waitFor(t, "the follower to park again", func() bool {
		return px.consumes.Load() > polls && srv.Broker.Stats().ParkedPolls == 1
	})
	if n := px.consumes.Load() - polls; n != 1 {
		t.Errorf("the follower made %d polls for one message, want 1", n)
	}
	if n := srv.Broker.Stats().Requests - before; n != 2 {
		t.Errorf("%d requests reached the server for one produce, want 2: the produce and the follower's next poll", n)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("the follower did not end after cancel")
	}
}

// While a Messages loop waits on an idle topic, the same client's other
// calls are answered at once, not after the long poll.
func TestMessagesDoesNotBlockOtherCalls(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	if err := c.CreateTopic(ctx, "quiet"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range c.Messages(ctx, "quiet", 0) {
		}
	}()
	waitFor(t, "a parked poll", func() bool { return srv.Broker.Stats().ParkedPolls > 0 })
	call := func(name string, f func(ctx context.Context) error) {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		defer ccancel()
		start := time.Now()
		if err := f(cctx); err != nil {
			t.Errorf("%s while the same client follows an idle topic: %v after %s (queued behind the long poll?)",
				name, err, time.Since(start).Round(time.Millisecond))
		}
	}
	call("Ping", c.Ping)
	call("Produce to another topic", func(ctx context.Context) error {
		_, err := c.Produce(ctx, "other", []byte("x"))
		return err
	})
	cancel()
	<-done
}

// A call whose context has already ended fails alone: the connection, and
// the other requests pipelined on it, are not torn down for it.
func TestExpiredContextKeepsConnection(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	expired, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	if err := c.Ping(expired); err == nil {
		t.Fatal("Ping with an expired context succeeded")
	}
	if _, err := c.Produce(expired, "t", []byte("x")); err == nil {
		t.Fatal("Produce with an expired context succeeded")
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Reconnects != 0 {
		t.Fatalf("calls with an expired context broke the shared connection: %d reconnects", st.Reconnects)
	}
}

// --- close --------------------------------------------------------------------

func TestCloseEndsMessages(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c, err := client.Dial(testCtx(t), srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	produceNumbered(t, c, "cl", "m", 3, 3)
	var (
		got     int
		lastErr error
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range c.Messages(context.Background(), "cl", 0) {
			if err != nil {
				lastErr = err
				continue
			}
			got++
			_ = m
		}
	}()
	waitFor(t, "a parked poll", func() bool { return srv.Broker.Stats().ParkedPolls > 0 })
	c.Close()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("Close did not end the Messages loop")
	}
	if got != 3 || !errors.Is(lastErr, client.ErrClosed) {
		t.Fatalf("loop saw %d messages and ended with %v; want 3 and ErrClosed", got, lastErr)
	}
}

// Close unblocks calls waiting for an answer that will never come.
func TestCloseUnblocksPendingCalls(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	p := startProxy(t, srv.Addr)
	c, err := client.Dial(testCtx(t), p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	p.drop.Store(true) // requests vanish: calls wait for their timeout
	ctx := context.Background()
	calls := map[string]func() error{
		"Produce":   func() error { _, err := c.Produce(ctx, "t", []byte("x")); return err },
		"Consume":   func() error { _, err := c.Consume(ctx, "t", 0, 1); return err },
		"TopicInfo": func() error { _, err := c.TopicInfo(ctx, "t"); return err },
		"Ping":      func() error { return c.Ping(ctx) },
	}
	errs := make(chan error, len(calls))
	for name, call := range calls {
		go func() {
			err := call()
			errs <- fmt.Errorf("%s: %w", name, err)
		}()
	}
	waitFor(t, "every call to be sent and swallowed", func() bool { return p.dropped.Load() >= int64(len(calls)) })
	if st := c.Stats(); st.InFlight != 1 {
		t.Errorf("InFlight %d while a produce waits, want 1", st.InFlight)
	}
	c.Close()
	timeout := time.After(3 * time.Second)
	for range calls {
		select {
		case err := <-errs:
			if !errors.Is(err, client.ErrClosed) {
				t.Errorf("%v, want ErrClosed", err)
			}
		case <-timeout:
			t.Fatal("Close left calls waiting")
		}
	}
}

// A call with a deadline ends when it passes, and the client goes on.
func TestRequestTimeout(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	p := startProxy(t, srv.Addr)
	c := dial(t, p.Addr(), client.WithRequestTimeout(200*time.Millisecond))
	p.drop.Store(true)
	start := time.Now()
	err := c.Ping(context.Background())
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("Ping with nothing answering: %v after %s", err, time.Since(start))
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Logf("Ping timeout error: %v", err)
	}
	p.drop.Store(false)
	if err := c.Ping(testCtx(t)); err != nil {
		t.Fatalf("Ping once answers come again: %v", err)
	}
}

// --- restart --------------------------------------------------------------------

// After the server restarts on the same address, the same client
// reconnects: a follower on it sees every message, no gap, no duplicate.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	srv := brokertest.Start(t, 1, func(_ *storage.Options, bc *broker.Config) { bc.Addr = addr })
	testRestart(t, srv, addr, func() *brokertest.Server {
		srv2, err := srv.Restart()
		if err != nil {
			t.Fatalf("restart on the same address with clients connected: %v", err)
		}
		t.Cleanup(func() { srv2.Close() })
		if srv2.Addr != addr {
			t.Fatalf("restarted on %s, want %s", srv2.Addr, addr)
		}
		return srv2
	})
}

// The same restart with the server on a new port behind a proxy that keeps
// the client's address: the client's side of a restart, whatever the
// server's listener does.
func TestServerRestartBehindProxy(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	p := startProxy(t, srv.Addr)
	testRestart(t, srv, p.Addr(), func() *brokertest.Server {
		p.Down()
		srv2, err := srv.Restart()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv2.Close() })
		if err := p.Up(srv2.Addr); err != nil {
			t.Fatal(err)
		}
		return srv2
	})
}

func testRestart(t *testing.T, srv *brokertest.Server, addr string, restart func() *brokertest.Server) {
	c := dial(t, addr, client.WithRetries(10, 20*time.Millisecond))
	follower := dial(t, addr, client.WithRetries(10, 20*time.Millisecond))
	ctx := testCtx(t)
	produceNumbered(t, c, "rs", "m", 100, 10)

	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	followed := make(chan []string, 1)
	go func() {
		var got []string
		for m, err := range follower.Messages(fctx, "rs", 0) {
			if err != nil {
				t.Logf("follower: %v (yielded, the loop goes on)", err)
				continue
			}
			if m.Offset != int64(len(got)) {
				t.Errorf("follower: offset %d after %d messages", m.Offset, len(got))
			}
			got = append(got, string(m.Value))
			if len(got) == 200 {
				break
			}
		}
		followed <- got
	}()
	waitFor(t, "a parked poll", func() bool { return srv.Broker.Stats().ParkedPolls > 0 })

	restart()

	info, err := c.TopicInfo(ctx, "rs")
	if err != nil || info.Next != 100 {
		t.Fatalf("TopicInfo after restart: %+v, %v", info, err)
	}
	for i := 100; i < 200; i += 10 {
		var msgs [][]byte
		for j := i; j < i+10; j++ {
			msgs = append(msgs, fmt.Appendf(nil, "m%d", j))
		}
		base, err := c.Produce(ctx, "rs", msgs...)
		if err != nil || base != int64(i) {
			t.Fatalf("Produce after restart: %d, %v", base, err)
		}
	}
	msgs, err := c.Consume(ctx, "rs", 0, 0)
	if err != nil || len(msgs) != 200 {
		t.Fatalf("Consume after restart: %d messages, %v", len(msgs), err)
	}
	if st := c.Stats(); st.Reconnects < 1 {
		t.Fatalf("Stats after a restart: %+v, want Reconnects > 0", st)
	}
	select {
	case got := <-followed:
		for i, v := range got {
			if v != fmt.Sprint("m", i) {
				t.Fatalf("follower message %d: %q", i, v)
			}
		}
		if len(got) != 200 {
			t.Fatalf("follower saw %d messages, want 200", len(got))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the follower did not see the messages produced after the restart")
	}
	if st := follower.Stats(); st.Reconnects < 1 {
		t.Fatalf("follower Stats: %+v, want Reconnects > 0", st)
	}
}

// --- concurrency ----------------------------------------------------------------

// Many goroutines share one client: every call answered correctly, each
// produce's batch contiguous, the counters consistent. Run with -race.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	const workers, rounds, batch = 12, 40, 8
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			own := fmt.Sprint("own-", w)
			for r := range rounds {
				msgs := make([][]byte, batch)
				for k := range msgs {
					msgs[k] = fmt.Appendf(nil, "w%d-r%d-k%d", w, r, k)
				}
				base, err := c.Produce(ctx, "shared", msgs...)
				if err != nil {
					t.Error(err)
					return
				}
				got, err := c.Consume(ctx, "shared", base, batch)
				if err != nil || len(got) != batch {
					t.Errorf("Consume of my batch at %d: %d, %v", base, len(got), err)
					return
				}
				for k, m := range got {
					if !bytes.Equal(m.Value, msgs[k]) {
						t.Errorf("at %d: %q, want %q", base+int64(k), m.Value, msgs[k])
						return
					}
				}
				ob, err := c.Produce(ctx, own, msgs[0])
				if err != nil || ob != int64(r) {
					t.Errorf("Produce to %s: %d, %v; want %d", own, ob, err, r)
					return
				}
				switch r % 4 {
				case 0:
					err = c.Ping(ctx)
				case 1:
					var info client.TopicInfo
					info, err = c.TopicInfo(ctx, own)
					if err == nil && info.Next != int64(r+1) {
						err = fmt.Errorf("TopicInfo %s: %+v", own, info)
					}
				case 2:
					var names []string
					names, err = c.ListTopics(ctx, own)
					if err == nil && !slices.Contains(names, own) {
						err = fmt.Errorf("ListTopics %s: %q", own, names)
					}
				case 3:
					_, err = c.Consume(ctx, own, -1, 1)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	all, err := c.Consume(ctx, "shared", 0, 0)
	if err != nil || len(all) != workers*rounds*batch {
		t.Fatalf("shared topic: %d messages, %v", len(all), err)
	}
	st := c.Stats()
	wantMsgs := int64(workers * rounds * (batch + 1))
	if st.MessagesSent != wantMsgs || st.MessagesAcked != wantMsgs || st.InFlight != 0 || st.Errors != 0 || st.Reconnects != 0 {
		t.Fatalf("Stats: %+v; want %d messages sent and acked", st, wantMsgs)
	}
}

// Close racing with calls from many goroutines: every call ends, with its
// answer or ErrClosed.
func TestCloseRacesCalls(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	c, err := client.Dial(testCtx(t), srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				var err error
				switch i % 3 {
				case 0:
					_, err = c.Produce(ctx, "race", fmt.Appendf(nil, "%d-%d", w, i))
				case 1:
					_, err = c.Consume(ctx, "race", 0, 10)
				case 2:
					err = c.Ping(ctx)
				}
				if errors.Is(err, client.ErrClosed) {
					return
				}
				if err != nil && !errors.Is(err, client.ErrTopicNotFound) {
					t.Errorf("worker %d call %d: %v", w, i, err)
					return
				}
			}
		})
	}
	waitFor(t, "calls to be under way", func() bool { return srv.Broker.Stats().Requests >= 8 })
	c.Close()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("calls still running after Close")
	}
}
