package client_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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
	si, err := srv.Log(t, "info").Info()
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
