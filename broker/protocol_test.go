package broker_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// Raw-frame test driver shared by this package's tests: no client library,
// only protocol's encoders and decoders over a net.Conn.

// ioTimeout bounds every read and write of a test: generous, since the
// machine is shared and the race detector is slow.
const ioTimeout = 10 * time.Second

// rawConn is one test connection that speaks raw frames.
type rawConn struct {
	tb   testing.TB
	conn net.Conn
	corr uint32 // last correlation id handed out
}

// startMaybeTLS starts a server with volumes, TLS on its binary port if
// overTLS, and returns a function dialing raw connections to it.
func startMaybeTLS(tb testing.TB, volumes int, overTLS bool, opts ...brokertest.Option) (*brokertest.Server, func() *rawConn) {
	tb.Helper()
	if !overTLS {
		s := brokertest.Start(tb, volumes, opts...)
		return s, func() *rawConn { return dialRaw(tb, s.Addr) }
	}
	ca := brokertest.NewCA(tb, "test-ca")
	serverTLS := brokertest.ServerTLS(tb, ca.Server(tb))
	s := brokertest.Start(tb, volumes, append(opts, func(_ *storage.Options, c *broker.Config) { c.TLS = serverTLS })...)
	return s, func() *rawConn { return dialRawTLS(tb, s.Addr, &tls.Config{RootCAs: ca.Pool}, 0) }
}

// dialRawTLS is dialRaw over TLS; readBuffer, if not 0, fixes the TCP
// receive buffer.
func dialRawTLS(tb testing.TB, addr string, cfg *tls.Config, readBuffer int) *rawConn {
	tb.Helper()
	nc, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		tb.Fatal(err)
	}
	if readBuffer > 0 {
		nc.(*net.TCPConn).SetReadBuffer(readBuffer)
	}
	if cfg.ServerName == "" {
		cfg.ServerName = "127.0.0.1"
	}
	c := tls.Client(nc, cfg)
	tb.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	if err := c.HandshakeContext(ctx); err != nil {
		tb.Fatal(err)
	}
	return &rawConn{tb: tb, conn: c}
}

func dialRaw(tb testing.TB, addr string) *rawConn {
	tb.Helper()
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return &rawConn{tb: tb, conn: c}
}

// id returns the next correlation id. Ids start high and skip, so that an
// echo of a wrong or zero field does not match by accident.
func (c *rawConn) id() uint32 {
	c.corr += 3
	return 1000 + c.corr
}

func (c *rawConn) write(b []byte) {
	c.tb.Helper()
	c.conn.SetWriteDeadline(time.Now().Add(ioTimeout))
	if _, err := c.conn.Write(b); err != nil {
		c.tb.Fatalf("write: %v", err)
	}
}

// response is one response frame, header parsed.
type response struct {
	protocol.ResponseHeader
	Payload []byte
}

// errMsg is the message of an error response.
func (r response) errMsg() string {
	msg, err := protocol.ParseErrorResponse(r.Payload)
	if err != nil {
		return fmt.Sprintf("<bad error payload: %v>", err)
	}
	return string(msg)
}

// readResponse reads one response frame from r. Safe on any goroutine.
func readResponse(r io.Reader) (response, error) {
	var l [protocol.FrameLengthSize]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return response{}, err
	}
	size, err := protocol.PeekFrame(l[:], 0)
	if err != nil && !errors.Is(err, protocol.ErrShortFrame) {
		return response{}, fmt.Errorf("response length: %w", err)
	}
	f := make([]byte, size)
	copy(f, l[:])
	if _, err := io.ReadFull(r, f[len(l):]); err != nil {
		return response{}, err
	}
	h, p, err := protocol.ParseResponseHeader(f)
	return response{h, p}, err
}

// read reads the next response frame.
func (c *rawConn) read() response {
	c.tb.Helper()
	c.conn.SetReadDeadline(time.Now().Add(ioTimeout))
	r, err := readResponse(c.conn)
	if err != nil {
		c.tb.Fatalf("read response: %v", err)
	}
	return r
}

// expectClosed checks that the server closes the connection without sending
// anything more.
func (c *rawConn) expectClosed() {
	c.tb.Helper()
	c.conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	var b [1]byte
	n, err := c.conn.Read(b[:])
	if n != 0 || (!errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET)) {
		c.tb.Fatalf("connection not closed by the server: read %d bytes, %v", n, err)
	}
}

// roundTrip sends one request frame and reads its response, which must echo
// the request's op and correlation id.
func (c *rawConn) roundTrip(req []byte) response {
	c.tb.Helper()
	h, _, err := protocol.ParseRequestHeader(req)
	if err != nil && len(req) < protocol.HeaderSize {
		c.tb.Fatalf("bad test request: %v", err)
	}
	c.write(req)
	r := c.read()
	if r.CorrID != h.CorrID || r.Op != h.Op {
		c.tb.Fatalf("response %+v does not echo request op %v corr id %d", r.ResponseHeader, h.Op, h.CorrID)
	}
	return r
}

// ok sends req and returns the payload of its successful response.
func (c *rawConn) ok(req []byte) []byte {
	c.tb.Helper()
	r := c.roundTrip(req)
	if r.Code != protocol.CodeOK {
		c.tb.Fatalf("%v: code %v: %s", r.Op, r.Code, r.errMsg())
	}
	return r.Payload
}

// fail sends req, checks that it is answered with code and returns the
// error message.
func (c *rawConn) fail(req []byte, code protocol.Code) string {
	c.tb.Helper()
	r := c.roundTrip(req)
	if r.Code != code {
		c.tb.Fatalf("%v: got code %v (%s), want %v", r.Op, r.Code, r.errMsg(), code)
	}
	if r.Version != protocol.Version {
		c.tb.Fatalf("%v: error response in version %d", r.Op, r.Version)
	}
	return r.errMsg()
}

func (c *rawConn) ping() {
	c.tb.Helper()
	if p := c.ok(protocol.AppendPingRequest(nil, c.id())); len(p) != 0 {
		c.tb.Fatalf("ping response payload %x", p)
	}
}

func (c *rawConn) produce(topic string, flags protocol.ProduceFlags, msgs ...string) protocol.ProduceResponse {
	c.tb.Helper()
	p := c.ok(protocol.AppendProduceRequest(nil, c.id(), topic, flags, batchOf(msgs...)))
	pr, err := protocol.ParseProduceResponse(p)
	if err != nil {
		c.tb.Fatal(err)
	}
	if pr.Count != uint32(len(msgs)) {
		c.tb.Fatalf("produce count %d, want %d", pr.Count, len(msgs))
	}
	return pr
}

func (c *rawConn) consume(topic string, offset int64, limit, maxBytes, waitMs int32) protocol.ConsumeResponse {
	c.tb.Helper()
	p := c.ok(protocol.AppendConsumeRequest(nil, c.id(), topic, offset, limit, maxBytes, waitMs))
	cr, err := protocol.ParseConsumeResponse(p)
	if err != nil {
		c.tb.Fatal(err)
	}
	return cr
}

func (c *rawConn) info(topic string) protocol.TopicInfoResponse {
	c.tb.Helper()
	info, err := protocol.ParseTopicInfoResponse(c.ok(protocol.AppendTopicInfoRequest(nil, c.id(), topic)))
	if err != nil {
		c.tb.Fatal(err)
	}
	return info
}

func (c *rawConn) list(prefix, regex string) []string {
	c.tb.Helper()
	lr, err := protocol.ParseListTopicsResponse(c.ok(protocol.AppendListTopicsRequest(nil, c.id(), prefix, regex)))
	if err != nil {
		c.tb.Fatal(err)
	}
	return lr.Strings()
}

func (c *rawConn) truncate(topic string, by protocol.TruncateBy, before int64) int64 {
	c.tb.Helper()
	tr, err := protocol.ParseTruncateResponse(c.ok(protocol.AppendTruncateRequest(nil, c.id(), topic, by, before)))
	if err != nil {
		c.tb.Fatal(err)
	}
	return tr.OldestOffset
}

func batchOf(msgs ...string) []byte {
	m := make([][]byte, len(msgs))
	for i, s := range msgs {
		m[i] = []byte(s)
	}
	return protocol.AppendBatch(nil, m...)
}

// message is one consumed message.
type message struct {
	Offset int64
	Data   string
}

// decodeBatches checks every batch (CRC and body) and returns all their
// messages, in order.
func decodeBatches(batches []byte) ([]message, error) {
	var out []message
	for len(batches) > 0 {
		bt, n, err := protocol.ParseBatch(batches)
		if err != nil {
			return nil, err
		}
		if err := bt.Validate(); err != nil {
			return nil, fmt.Errorf("batch at offset %d: %w", bt.BaseOffset, err)
		}
		err = protocol.Messages(bt.Body, bt.Count, bt.BaseOffset, func(o int64, m []byte) error {
			out = append(out, message{o, string(m)})
			return nil
		})
		if err != nil {
			return nil, err
		}
		batches = batches[n:]
	}
	return out, nil
}

// messagesIn returns the messages of cr a client keeps: those in
// [StartOffset, StartOffset+limit), limit <= 0 meaning no limit.
func messagesIn(tb testing.TB, cr protocol.ConsumeResponse, limit int) []message {
	tb.Helper()
	all, err := decodeBatches(cr.Batches)
	if err != nil {
		tb.Fatal(err)
	}
	var out []message
	for _, m := range all {
		if m.Offset >= cr.StartOffset && (limit <= 0 || m.Offset < cr.StartOffset+int64(limit)) {
			out = append(out, m)
		}
	}
	return out
}

func msgData(ms []message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Data
	}
	return out
}

// waitFor polls cond until it holds or the I/O timeout passes.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(ioTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func withFsync(p storage.FsyncPolicy) brokertest.Option {
	return func(o *storage.Options, _ *broker.Config) { o.Fsync = p }
}

func withEntries(n int) brokertest.Option {
	return func(o *storage.Options, _ *broker.Config) { o.Entries = n }
}

// --- tests -----------------------------------------------------------------

// TestPipelinedInOrder writes 200 mixed requests in one write and checks
// that the answers come in request order, each echoing its correlation id,
// and that a consume sees the produces sent before it on the connection.
// With fsync=always produces are answered from goroutines, so ordering rests
// on the broker's slots.
func TestPipelinedInOrder(t *testing.T) {
	for _, p := range []storage.FsyncPolicy{storage.FsyncNever, storage.FsyncAlways} {
		for _, overTLS := range []bool{false, true} {
			t.Run(fmt.Sprintf("fsync=%s/tls=%v", p, overTLS), func(t *testing.T) {
				testPipelinedInOrder(t, p, overTLS)
			})
		}
	}
}

// testPipelinedInOrder: over TLS the consumes' batches are sent by the
// pump beside the rest, which goes through the socket pair; they must
// still come in their places.
func testPipelinedInOrder(t *testing.T, p storage.FsyncPolicy, overTLS bool) {
	_, dial := startMaybeTLS(t, 2, overTLS, withFsync(p))
	c := dial()
	type want struct {
		op     protocol.Op
		id     uint32
		code   protocol.Code
		offset int64 // produce: base offset; consume: the message; info: next
	}
	var req []byte
	var wants []want
	produced := int64(0)
	for i := range 200 {
		id := c.id()
		w := want{id: id}
		switch i % 5 {
		case 0:
			w.op, w.offset = protocol.OpProduce, produced
			req = protocol.AppendProduceRequest(req, id, "pipe", protocol.ProduceCreateTopic, batchOf(fmt.Sprintf("m%d", produced)))
			produced++
		case 1:
			w.op = protocol.OpPing
			req = protocol.AppendPingRequest(req, id)
		case 2:
			w.op, w.offset = protocol.OpConsume, produced-1
			req = protocol.AppendConsumeRequest(req, id, "pipe", produced-1, 1, 0, 0)
		case 3:
			w.op, w.offset = protocol.OpTopicInfo, produced
			req = protocol.AppendTopicInfoRequest(req, id, "pipe")
		case 4:
			w.op, w.code = protocol.OpTopicInfo, protocol.CodeTopicNotFound
			req = protocol.AppendTopicInfoRequest(req, id, "missing")
		}
		wants = append(wants, w)
	}
	c.write(req)
	for i, w := range wants {
		r := c.read()
		if r.CorrID != w.id || r.Op != w.op || r.Code != w.code {
			t.Fatalf("response %d: got op %v corr %d code %v (%s), want op %v corr %d code %v",
				i, r.Op, r.CorrID, r.Code, r.errMsg(), w.op, w.id, w.code)
		}
		if w.code != protocol.CodeOK {
			continue
		}
		switch w.op {
		case protocol.OpProduce:
			pr, err := protocol.ParseProduceResponse(r.Payload)
			if err != nil || pr.BaseOffset != w.offset || pr.Count != 1 {
				t.Fatalf("response %d: produce %+v %v, want base offset %d: pipelined produces stored out of order",
					i, pr, err, w.offset)
			}
		case protocol.OpConsume:
			cr, err := protocol.ParseConsumeResponse(r.Payload)
			if err != nil {
				t.Fatal(err)
			}
			got := messagesIn(t, cr, 1)
			if len(got) != 1 || got[0].Offset != w.offset || got[0].Data != fmt.Sprintf("m%d", w.offset) {
				t.Fatalf("response %d: consume of offset %d got %+v", i, w.offset, got)
			}
		case protocol.OpTopicInfo:
			info, err := protocol.ParseTopicInfoResponse(r.Payload)
			if err != nil || info.NextOffset != w.offset {
				t.Fatalf("response %d: info %+v %v, want next offset %d", i, info, err, w.offset)
			}
		}
	}
}

// TestOneByteAtATime sends frames one byte per write: nothing is answered
// before a frame is whole, then everything is answered correctly.
func TestOneByteAtATime(t *testing.T) {
	s := brokertest.Start(t, 1)
	c := dialRaw(t, s.Addr)
	if tc, ok := c.conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	var req []byte
	req = protocol.AppendProduceRequest(req, 7, "bytes", protocol.ProduceCreateTopic, batchOf("one", "two"))
	first := len(req)
	req = protocol.AppendConsumeRequest(req, 8, "bytes", 0, 0, 0, 0)
	req = protocol.AppendPingRequest(req, 9)
	for i := range first - 1 {
		c.write(req[i : i+1])
	}
	// The first frame lacks its last byte: no answer may come yet.
	c.conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	var b [1]byte
	if n, err := c.conn.Read(b[:]); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("answer to an incomplete frame: %d bytes, %v", n, err)
	}
	for i := first - 1; i < len(req); i++ {
		c.write(req[i : i+1])
	}
	r := c.read()
	pr, err := protocol.ParseProduceResponse(r.Payload)
	if r.CorrID != 7 || r.Code != protocol.CodeOK || err != nil || pr.BaseOffset != 0 || pr.Count != 2 {
		t.Fatalf("produce: %+v %+v %v", r.ResponseHeader, pr, err)
	}
	r = c.read()
	cr, err := protocol.ParseConsumeResponse(r.Payload)
	if r.CorrID != 8 || r.Code != protocol.CodeOK || err != nil {
		t.Fatalf("consume: %+v %v", r.ResponseHeader, err)
	}
	if got := msgData(messagesIn(t, cr, 0)); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("consumed %q", got)
	}
	if r = c.read(); r.CorrID != 9 || r.Op != protocol.OpPing || r.Code != protocol.CodeOK {
		t.Fatalf("ping: %+v", r.ResponseHeader)
	}
}

// TestVersionAndUnknownOp: an unsupported version and an unknown op are
// answered with their codes, and the connection stays usable.
func TestVersionAndUnknownOp(t *testing.T) {
	s := brokertest.Start(t, 1)
	c := dialRaw(t, s.Addr)

	req := protocol.AppendPingRequest(nil, 77)
	req[4] = 9 // version
	r := c.roundTrip(req)
	if r.Code != protocol.CodeUnsupportedVersion || r.Version != protocol.Version {
		t.Fatalf("version 9: %+v %s", r.ResponseHeader, r.errMsg())
	}
	c.ping()

	for _, op := range []byte{0, 200, 255} { // ops no version defines
		req = protocol.AppendPingRequest(nil, 78)
		req[5] = op
		if r = c.roundTrip(req); r.Code != protocol.CodeUnknownOp {
			t.Fatalf("op %d: %+v %s", op, r.ResponseHeader, r.errMsg())
		}
		c.ping()
	}
}

// TestOps exercises every op and its documented error codes.
func TestOps(t *testing.T) {
	s := brokertest.Start(t, 2)
	c := dialRaw(t, s.Addr)
	id := c.id

	t.Run("create", func(t *testing.T) {
		c.tb = t
		c.ok(protocol.AppendCreateTopicRequest(nil, id(), "orders"))
		c.fail(protocol.AppendCreateTopicRequest(nil, id(), "orders"), protocol.CodeTopicExists)
		for _, bad := range []string{"../x", "", ".", "..", "a/b", "sp ace", strings.Repeat("x", 256)} {
			c.fail(protocol.AppendCreateTopicRequest(nil, id(), bad), protocol.CodeInvalidTopic)
		}
		for _, name := range []string{"orders-eu", "orders.us", "payments", strings.Repeat("y", 255)} {
			c.ok(protocol.AppendCreateTopicRequest(nil, id(), name))
		}
	})
	t.Run("list", func(t *testing.T) {
		c.tb = t
		long := strings.Repeat("y", 255)
		for _, tc := range []struct {
			prefix, regex string
			want          []string
		}{
			{"", "", []string{"orders", "orders-eu", "orders.us", "payments", long}},
			{"orders", "", []string{"orders", "orders-eu", "orders.us"}},
			{"", `^o.*s$`, []string{"orders", "orders.us"}},
			{"orders", `eu`, []string{"orders-eu"}},
			{"pay", "", []string{"payments"}},
			{"zzz", "", []string{}},
			{"", `\.`, []string{"orders.us"}},
		} {
			if got := c.list(tc.prefix, tc.regex); !slices.Equal(got, tc.want) {
				t.Errorf("list %q %q = %q, want %q", tc.prefix, tc.regex, got, tc.want)
			}
		}
		c.fail(protocol.AppendListTopicsRequest(nil, id(), "", "("), protocol.CodeInvalidArgument)
		c.fail(protocol.AppendListTopicsRequest(nil, id(), "", strings.Repeat("a", protocol.MaxRegexLen+1)), protocol.CodeInvalidArgument)
		// 3.6 KB that would compile to seconds of work: refused unexpanded.
		c.fail(protocol.AppendListTopicsRequest(nil, id(), "", strings.Repeat("(?:a?){1000}", 300)+"z"), protocol.CodeInvalidArgument)
		c.ping()
	})
	t.Run("info", func(t *testing.T) {
		c.tb = t
		if info := c.info("orders"); info.OldestOffset != 0 || info.NextOffset != 0 {
			t.Fatalf("empty topic info %+v", info)
		}
		c.fail(protocol.AppendTopicInfoRequest(nil, id(), "nope"), protocol.CodeTopicNotFound)
		c.fail(protocol.AppendTopicInfoRequest(nil, id(), "../x"), protocol.CodeInvalidTopic)
	})
	t.Run("produce", func(t *testing.T) {
		c.tb = t
		if pr := c.produce("orders", 0, "a", "b", "c"); pr.BaseOffset != 0 {
			t.Fatalf("first produce %+v", pr)
		}
		if pr := c.produce("orders", 0, "d", "e"); pr.BaseOffset != 3 {
			t.Fatalf("second produce %+v", pr)
		}
		info := c.info("orders")
		if info.OldestOffset != 0 || info.NextOffset != 5 || info.Bytes <= 0 || info.Segments < 1 {
			t.Fatalf("info after produce %+v", info)
		}

		// Broken CRC: one body byte flipped, and the CRC field itself.
		for _, at := range []int{protocol.MinBatchHeaderSize + 1, 20} {
			bt := batchOf("x", "y")
			bt[at] ^= 0x40
			c.fail(protocol.AppendProduceRequest(nil, id(), "orders", 0, bt), protocol.CodeBadBatch)
		}
		// A count that does not match the body, with a correct CRC.
		bt := protocol.AppendBatchBody(nil, protocol.CodecNone, 3, 4, []byte{1, 'a', 1, 'b'})
		c.fail(protocol.AppendProduceRequest(nil, id(), "orders", 0, bt), protocol.CodeBadBatch)
		if info2 := c.info("orders"); info2 != info {
			t.Fatalf("a rejected batch changed the topic: %+v -> %+v", info, info2)
		}

		c.fail(protocol.AppendProduceRequest(nil, id(), "nope", 0, batchOf("x")), protocol.CodeTopicNotFound)
		if pr := c.produce("auto", protocol.ProduceCreateTopic, "x"); pr.BaseOffset != 0 {
			t.Fatalf("produce with create %+v", pr)
		}
		if pr := c.produce("auto", protocol.ProduceCreateTopic, "y"); pr.BaseOffset != 1 {
			t.Fatalf("produce with create to an existing topic %+v", pr)
		}
		for _, bad := range []string{"../x", "..", "a/../../x", "/etc"} {
			c.fail(protocol.AppendProduceRequest(nil, id(), bad, protocol.ProduceCreateTopic, batchOf("x")), protocol.CodeInvalidTopic)
			c.fail(protocol.AppendProduceRequest(nil, id(), bad, 0, batchOf("x")), protocol.CodeInvalidTopic)
		}
		for _, v := range s.Volumes {
			if _, err := os.Stat(filepath.Join(v, "..", "x")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a produce to ../x escaped the volume: %v", err)
			}
		}
		if got := c.list("", ""); slices.Contains(got, "x") || slices.Contains(got, "..") {
			t.Fatalf("invalid topic listed: %q", got)
		}
	})
	t.Run("consume", func(t *testing.T) {
		c.tb = t
		all := []string{"a", "b", "c", "d", "e"}
		for _, tc := range []struct {
			offset       int64
			limit        int32
			start        int64
			want         []string
			wantBatchCnt int
		}{
			{0, 0, 0, all, 2},
			{0, 2, 0, all[:2], 1},
			{1, 1, 1, all[1:2], 1},
			{3, 10, 3, all[3:], 1},
			{2, 2, 2, all[2:4], 2},
			{-1, 0, 4, all[4:], 1},
			{-2, 1, 3, all[3:4], 1},
			{-100, 0, 0, all, 2}, // raised to the oldest offset
		} {
			cr := c.consume("orders", tc.offset, tc.limit, 0, 0)
			got := msgData(messagesIn(t, cr, int(tc.limit)))
			nb := 0
			for b := cr.Batches; len(b) > 0; nb++ {
				_, n, _ := protocol.ParseBatch(b)
				b = b[n:]
			}
			if cr.StartOffset != tc.start || cr.NextOffset != 5 || !slices.Equal(got, tc.want) || nb != tc.wantBatchCnt {
				t.Errorf("consume offset %d limit %d: start %d next %d %d batches %q; want start %d next 5 %d batches %q",
					tc.offset, tc.limit, cr.StartOffset, cr.NextOffset, nb, got, tc.start, tc.wantBatchCnt, tc.want)
			}
		}
		// At the end with no wait: an empty answer at once.
		start := time.Now()
		cr := c.consume("orders", 5, 0, 0, 0)
		if cr.StartOffset != 5 || cr.NextOffset != 5 || len(cr.Batches) != 0 {
			t.Fatalf("consume at the end: %+v", cr)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("consume at the end with max wait 0 took %s", d)
		}
		c.fail(protocol.AppendConsumeRequest(nil, id(), "orders", 6, 0, 0, 0), protocol.CodeOffsetOutOfRange)
		c.fail(protocol.AppendConsumeRequest(nil, id(), "orders", 1<<40, 0, 0, 0), protocol.CodeOffsetOutOfRange)
		c.fail(protocol.AppendConsumeRequest(nil, id(), "nope", 0, 0, 0, 0), protocol.CodeTopicNotFound)
		c.fail(protocol.AppendConsumeRequest(nil, id(), "../x", 0, 0, 0, 0), protocol.CodeInvalidTopic)
		c.ping()
	})
	t.Run("truncate by offset", func(t *testing.T) {
		c.tb = t
		if oldest := c.truncate("orders", protocol.TruncateByOffset, 3); oldest != 3 {
			t.Fatalf("truncate before 3: oldest %d", oldest)
		}
		if info := c.info("orders"); info.OldestOffset != 3 || info.NextOffset != 5 {
			t.Fatalf("info after truncate %+v", info)
		}
		c.fail(protocol.AppendConsumeRequest(nil, id(), "orders", 0, 0, 0, 0), protocol.CodeOffsetOutOfRange)
		cr := c.consume("orders", 3, 0, 0, 0)
		if got := msgData(messagesIn(t, cr, 0)); !slices.Equal(got, []string{"d", "e"}) {
			t.Fatalf("after truncate read %q", got)
		}
		if cr := c.consume("orders", -10, 0, 0, 0); cr.StartOffset != 3 {
			t.Fatalf("negative offset after truncate starts at %d", cr.StartOffset)
		}
		// Below the oldest: nothing to do.
		if oldest := c.truncate("orders", protocol.TruncateByOffset, 1); oldest != 3 {
			t.Fatalf("truncate before 1: oldest %d", oldest)
		}
		c.fail(protocol.AppendTruncateRequest(nil, id(), "orders", protocol.TruncateByOffset, 6), protocol.CodeOffsetOutOfRange)
		c.fail(protocol.AppendTruncateRequest(nil, id(), "nope", protocol.TruncateByOffset, 0), protocol.CodeTopicNotFound)
		c.fail(protocol.AppendTruncateRequest(nil, id(), "../x", protocol.TruncateByOffset, 0), protocol.CodeInvalidTopic)
		// Up to the end: the topic is empty, its next offset kept.
		if oldest := c.truncate("orders", protocol.TruncateByOffset, 5); oldest != 5 {
			t.Fatalf("truncate to the end: oldest %d", oldest)
		}
		if pr := c.produce("orders", 0, "f"); pr.BaseOffset != 5 {
			t.Fatalf("produce after truncating everything %+v", pr)
		}
	})
	t.Run("truncate by time", func(t *testing.T) {
		c.tb = t
		c.produce("timed", protocol.ProduceCreateTopic, "old1", "old2")
		c.produce("timed", 0, "old3")
		second := c.produce("timed", 0, "new1", "new2")
		cr := c.consume("timed", 0, 0, 0, 0)
		var times []int64
		for b := cr.Batches; len(b) > 0; {
			bt, n, err := protocol.ParseBatch(b)
			if err != nil {
				t.Fatal(err)
			}
			times = append(times, bt.AppendTime)
			b = b[n:]
		}
		if len(times) != 3 || times[0] <= 0 || times[2] < times[1] || times[1] < times[0] {
			t.Fatalf("append times %v", times)
		}
		if times[2] == times[1] {
			t.Skip("two batches got the same append time; cannot truncate between them")
		}
		if oldest := c.truncate("timed", protocol.TruncateByTime, 0); oldest != 0 {
			t.Fatalf("truncate before time 0: oldest %d", oldest)
		}
		if oldest := c.truncate("timed", protocol.TruncateByTime, times[2]); oldest != second.BaseOffset {
			t.Fatalf("truncate before the last batch's time: oldest %d, want %d", oldest, second.BaseOffset)
		}
		if got := msgData(messagesIn(t, c.consume("timed", -100, 0, 0, 0), 0)); !slices.Equal(got, []string{"new1", "new2"}) {
			t.Fatalf("after truncate by time read %q", got)
		}
		if oldest := c.truncate("timed", protocol.TruncateByTime, time.Now().Add(time.Hour).UnixNano()); oldest != 5 {
			t.Fatalf("truncate before a future time: oldest %d, want 5", oldest)
		}
	})
	t.Run("delete", func(t *testing.T) {
		c.tb = t
		c.ok(protocol.AppendDeleteTopicRequest(nil, id(), "orders"))
		c.fail(protocol.AppendDeleteTopicRequest(nil, id(), "orders"), protocol.CodeTopicNotFound)
		c.fail(protocol.AppendDeleteTopicRequest(nil, id(), "missing"), protocol.CodeTopicNotFound)
		c.fail(protocol.AppendDeleteTopicRequest(nil, id(), "../x"), protocol.CodeInvalidTopic)
		c.fail(protocol.AppendTopicInfoRequest(nil, id(), "orders"), protocol.CodeTopicNotFound)
		c.fail(protocol.AppendConsumeRequest(nil, id(), "orders", 0, 0, 0, 0), protocol.CodeTopicNotFound)
		if got := c.list("orders", ""); !slices.Equal(got, []string{"orders-eu", "orders.us"}) {
			t.Fatalf("list after delete %q", got)
		}
		c.ok(protocol.AppendCreateTopicRequest(nil, id(), "orders"))
		if info := c.info("orders"); info.NextOffset != 0 {
			t.Fatalf("recreated topic kept data: %+v", info)
		}
	})
}
