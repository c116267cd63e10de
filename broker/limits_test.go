package broker_test

import (
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

const testMaxFrame = 1 << 20

func withMaxFrame(n int) brokertest.Option {
	return func(_ *storage.Options, c *broker.Config) { c.MaxFrameSize = n }
}

// produceOfFrameLength builds a produce request whose length field is
// exactly length, with one message padding the batch.
func produceOfFrameLength(t *testing.T, corrID uint32, topic string, length int) []byte {
	frame := func(m int) []byte {
		return protocol.AppendProduceRequest(nil, corrID, topic, protocol.ProduceCreateTopic, protocol.AppendBatch(nil, make([]byte, m)))
	}
	m := length - 100
	m += length - int(binary.LittleEndian.Uint32(frame(m)))
	req := frame(m)
	if got := int(binary.LittleEndian.Uint32(req)); got != length {
		t.Fatalf("produce frame of length %d, want %d", got, length)
	}
	return req
}

// TestBadFrames sends frames that break the framing. Each is answered with
// its code and the connection is closed, or (truncated) closed silently;
// a second connection keeps working throughout.
func TestBadFrames(t *testing.T) {
	s := brokertest.Start(t, 1, withMaxFrame(testMaxFrame))
	other := dialRaw(t, s.Addr)
	other.ping()

	header := func(length uint32, corrID uint32) []byte {
		b := protocol.AppendPingRequest(nil, corrID)
		binary.LittleEndian.PutUint32(b, length)
		return b
	}
	for _, tc := range []struct {
		name   string
		send   []byte
		code   protocol.Code
		op     protocol.Op
		corrID uint32
	}{
		{"oversized", append(header(testMaxFrame+1, 51), make([]byte, 100)...), protocol.CodeFrameTooLarge, protocol.OpPing, 51},
		{"oversized max uint32", header(1<<32-1, 52), protocol.CodeFrameTooLarge, protocol.OpPing, 52},
		// Only the length arrived: the answer echoes op 0 and corr id 0.
		{"oversized length only", header(64<<20, 53)[:4], protocol.CodeFrameTooLarge, 0, 0},
		{"length 0", header(0, 54), protocol.CodeMalformedRequest, protocol.OpPing, 54},
		{"length 7", header(7, 55), protocol.CodeMalformedRequest, protocol.OpPing, 55},
		{"length 3 short", header(3, 56)[:4], protocol.CodeMalformedRequest, 0, 0},
		// An HTTP request: "GET " read as a length is ~542 MB.
		{"http", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), protocol.CodeFrameTooLarge, protocol.Op(' '), binary.LittleEndian.Uint32([]byte("TP/1"))},
		{"reserved bits", func() []byte { b := protocol.AppendPingRequest(nil, 57); b[6] = 1; return b }(), protocol.CodeMalformedRequest, protocol.OpPing, 57},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := s.Broker.Stats().ClosedForFrames
			c := dialRaw(t, s.Addr)
			c.ping() // a frame before the bad one is answered normally
			c.write(tc.send)
			r := c.read()
			if r.Code != tc.code || r.Op != tc.op || r.CorrID != tc.corrID {
				t.Fatalf("got op %v corr %d code %v (%s), want op %v corr %d code %v",
					r.Op, r.CorrID, r.Code, r.errMsg(), tc.op, tc.corrID, tc.code)
			}
			if tc.code == protocol.CodeFrameTooLarge && !strings.Contains(r.errMsg(), fmt.Sprintf("the server's limit is %d (-max-frame)", testMaxFrame)) {
				t.Errorf("the error %q does not name the server's limit and its flag", r.errMsg())
			}
			c.expectClosed()
			other.ping()
			if tc.code == protocol.CodeFrameTooLarge || tc.send[0] < 8 {
				if after := s.Broker.Stats().ClosedForFrames; after != before+1 {
					t.Errorf("ClosedForFrames %d -> %d", before, after)
				}
			}
		})
	}

	t.Run("at the limit", func(t *testing.T) {
		c := dialRaw(t, s.Addr)
		req := produceOfFrameLength(t, 60, "big", testMaxFrame)
		if r := c.roundTrip(req); r.Code != protocol.CodeOK {
			t.Fatalf("frame of exactly the max size: %v %s", r.Code, r.errMsg())
		}
		cr := c.consume("big", 0, 0, 0, 0)
		if len(cr.Batches) != len(req)-protocol.HeaderSize-2-2-len("big") {
			t.Fatalf("consumed %d bytes", len(cr.Batches))
		}
	})

	t.Run("truncated", func(t *testing.T) {
		c := dialRaw(t, s.Addr)
		req := protocol.AppendProduceRequest(nil, 61, "cut", protocol.ProduceCreateTopic, batchOf("never stored"))
		c.write(req[:len(req)-5])
		c.conn.(*net.TCPConn).CloseWrite()
		c.expectClosed()
		// Only other is left open: every other test connection is closed.
		waitFor(t, "the connection to be released", func() bool { return s.Broker.Stats().Connections == 1 })
		other.ping()
		other.fail(protocol.AppendTopicInfoRequest(nil, other.id(), "cut"), protocol.CodeTopicNotFound)
	})

	// The spec: after code 4 the server closes the connection, since it
	// cannot trust the framing. A malformed payload inside a well-framed
	// request is code 4 too.
	t.Run("malformed payload", func(t *testing.T) {
		for _, req := range [][]byte{
			append(protocol.AppendPingRequest(nil, 62), 0), // payload on a ping
			protocol.AppendTruncateRequest(nil, 63, "x", protocol.TruncateBy(7), 0),
			protocol.AppendProduceRequest(nil, 64, "x", protocol.ProduceFlags(0x80), batchOf("a")),
			protocol.AppendTopicInfoRequest(nil, 65, "x")[:protocol.HeaderSize+1],
		} {
			binary.LittleEndian.PutUint32(req, uint32(len(req)-4))
			c := dialRaw(t, s.Addr)
			c.fail(req, protocol.CodeMalformedRequest)
			c.expectClosed()
			other.ping()
		}
	})
}

// TestManyConnections opens 1,000 connections at once, then each does a
// produce and a consume round trip concurrently.
func TestManyConnections(t *testing.T) {
	const n = 1000
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	const need = 2*n + 256 // both ends live in this process
	if rl.Cur < need {
		rl.Cur = min(need, rl.Max)
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur < need {
			t.Skipf("cannot raise the open file limit to %d (hard limit %d): %v", need, rl.Max, err)
		}
	}
	s := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) { c.MaxConnsPerAddr = 0 }) // all from 127.0.0.1

	conns := make([]net.Conn, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 64) // do not overrun the accept backlog
	for i := range conns {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			c, err := net.DialTimeout("tcp", s.Addr, ioTimeout)
			conns[i] = c
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	waitFor(t, "1000 open connections", func() bool { return s.Broker.Stats().Connections >= n })

	start := make(chan struct{})
	for i, c := range conns {
		go func() {
			<-start
			errs <- roundTripMany(c, i)
		}()
	}
	close(start)
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		return
	}
	c := dialRaw(t, s.Addr)
	var total int64
	for k := range 16 {
		total += c.info(fmt.Sprintf("many-%d", k)).NextOffset
	}
	if total != n {
		t.Fatalf("%d messages stored, want %d", total, n)
	}
}

func roundTripMany(c net.Conn, i int) error {
	c.SetDeadline(time.Now().Add(3 * ioTimeout))
	topic := fmt.Sprintf("many-%d", i%16)
	want := fmt.Sprintf("conn %d", i)
	if _, err := c.Write(protocol.AppendProduceRequest(nil, uint32(i), topic, protocol.ProduceCreateTopic, batchOf(want))); err != nil {
		return err
	}
	r, err := readResponse(c)
	if err != nil {
		return fmt.Errorf("conn %d: produce: %w", i, err)
	}
	pr, err := protocol.ParseProduceResponse(r.Payload)
	if r.Code != protocol.CodeOK || r.CorrID != uint32(i) || err != nil {
		return fmt.Errorf("conn %d: produce: %+v %s %v", i, r.ResponseHeader, r.errMsg(), err)
	}
	if _, err := c.Write(protocol.AppendConsumeRequest(nil, uint32(i+consumeCorrBase), topic, pr.BaseOffset, 1, 0, 0)); err != nil {
		return err
	}
	if r, err = readResponse(c); err != nil {
		return fmt.Errorf("conn %d: consume: %w", i, err)
	}
	cr, err := protocol.ParseConsumeResponse(r.Payload)
	if r.Code != protocol.CodeOK || r.CorrID != uint32(i+consumeCorrBase) || err != nil {
		return fmt.Errorf("conn %d: consume: %+v %s %v", i, r.ResponseHeader, r.errMsg(), err)
	}
	msgs, err := decodeBatches(cr.Batches)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if m.Offset == pr.BaseOffset {
			if m.Data != want {
				return fmt.Errorf("conn %d: offset %d holds %q, want %q", i, m.Offset, m.Data, want)
			}
			return nil
		}
	}
	return fmt.Errorf("conn %d: offset %d not in the consume response", i, pr.BaseOffset)
}

// consumeCorrBase offsets the correlation ids of the consumes in roundTripMany.
const consumeCorrBase = 1 << 20

// TestBackpressure: a client pipelines many consume requests for a large
// topic and reads nothing. The server must stop producing responses for it
// once its output is backed up (bounded memory), keep serving other
// connections, and once the client reads, every response must arrive whole
// and in order.
//
// "behind a long poll" queues the consumes behind a parked consume: they are
// all answered when the poll is woken, and must still respect the bound.
func TestBackpressure(t *testing.T) {
	for _, behindPoll := range []bool{false, true} {
		for _, overTLS := range []bool{false, true} {
			name := map[bool]string{false: "direct", true: "behind a long poll"}[behindPoll]
			t.Run(fmt.Sprintf("%s/tls=%v", name, overTLS), func(t *testing.T) {
				testBackpressure(t, behindPoll, overTLS)
			})
		}
	}
}

// testBackpressure: over TLS the pump sends the consumes' batches, and the
// bytes it has yet to send count against the same bound.
func testBackpressure(t *testing.T, behindPoll, overTLS bool) {
	const (
		maxOut   = 1 << 20 // Config.MaxOutboundBytes
		respSize = 1 << 20 // max bytes of each consume
		requests = 100     // 100 MiB of responses asked for
	)
	var clientTLS *tls.Config
	var opts []brokertest.Option
	if overTLS {
		ca := brokertest.NewCA(t, "test-ca")
		serverTLS := brokertest.ServerTLS(t, ca.Server(t))
		clientTLS = &tls.Config{RootCAs: ca.Pool}
		opts = append(opts, func(_ *storage.Options, c *broker.Config) { c.TLS = serverTLS })
	}
	s := brokertest.Start(t, 1, append(opts, func(_ *storage.Options, c *broker.Config) {
		c.MaxOutboundBytes = maxOut
		c.MaxConsumeBytes = 4 << 20
	})...)
	dial := func(readBuffer int) *rawConn {
		if overTLS {
			return dialRawTLS(t, s.Addr, clientTLS.Clone(), readBuffer)
		}
		c := dialRaw(t, s.Addr)
		if readBuffer > 0 {
			c.conn.(*net.TCPConn).SetReadBuffer(readBuffer)
		}
		return c
	}
	p := dial(0)
	msg := make([]byte, 1000)
	for i := range 25 { // 25 batches of ~100 KB: 2.5 MB
		m := make([][]byte, 100)
		for j := range m {
			msg[0], msg[1] = byte(i), byte(j)
			m[j] = append([]byte(nil), msg...)
		}
		p.ok(protocol.AppendProduceRequest(nil, p.id(), "big", protocol.ProduceCreateTopic, protocol.AppendBatch(nil, m...)))
	}
	want := p.consume("big", 0, 0, respSize, 0).Batches
	if len(want) > respSize || len(want) < respSize/2 {
		t.Fatalf("reference consume of %d bytes", len(want))
	}
	next := p.info("big").NextOffset

	c := dial(64 << 10) // no receive-window autotuning: a fixed kernel share
	var req []byte
	if behindPoll {
		req = protocol.AppendConsumeRequest(req, 1, "big", next, 0, respSize, 10000)
	}
	for i := range requests {
		req = protocol.AppendConsumeRequest(req, uint32(100+i), "big", 0, 0, respSize, 0)
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heapBefore := ms.HeapAlloc
	consumedBefore := s.Broker.Stats().ConsumedBytes
	c.write(req)
	if behindPoll {
		waitFor(t, "the long poll to park", func() bool { return s.Broker.Stats().ParkedPolls == 1 })
		p.produce("big", 0, "wake")
	}

	// Let the server push all it will; it is stuck once ConsumedBytes stops
	// moving (or has clearly passed the bound).
	const bound = 32 << 20 // maxOut + one response + kernel socket buffers, with room
	last, stable := int64(-1), 0
	waitFor(t, "the server to stop sending", func() bool {
		got := s.Broker.Stats().ConsumedBytes - consumedBefore
		if got == last {
			stable++
		} else {
			last, stable = got, 0
		}
		time.Sleep(5 * time.Millisecond)
		return stable >= 40 || got > bound
	})
	sent := s.Broker.Stats().ConsumedBytes - consumedBefore
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heapGrowth := int64(ms.HeapAlloc) - int64(heapBefore)
	t.Logf("server sent %d MiB of %d MiB asked for while the client read nothing; heap grew %d MiB",
		sent>>20, requests*len(want)>>20, heapGrowth>>20)
	if sent > bound {
		t.Errorf("the server buffered %d MiB for a client that reads nothing (bound %d MiB, MaxOutboundBytes %d MiB)",
			sent>>20, bound>>20, maxOut>>20)
	}
	if heapGrowth > bound {
		t.Errorf("heap grew by %d MiB while a client read nothing", heapGrowth>>20)
	}

	// Other connections are served meanwhile, consumes included.
	o := dial(0)
	o.ping()
	if got := o.consume("big", 0, 0, respSize, 0).Batches; string(got) != string(want) {
		t.Fatalf("other connection read %d bytes, want %d", len(got), len(want))
	}

	// The client now reads everything: whole, in order.
	if behindPoll {
		r := c.read()
		cr, err := protocol.ParseConsumeResponse(r.Payload)
		if r.CorrID != 1 || err != nil || cr.StartOffset != next || len(messagesIn(t, cr, 0)) != 1 {
			t.Fatalf("long poll answer %+v %v", r.ResponseHeader, err)
		}
	}
	for i := range requests {
		r := c.read()
		if r.CorrID != uint32(100+i) || r.Code != protocol.CodeOK {
			t.Fatalf("response %d: %+v %s", i, r.ResponseHeader, r.errMsg())
		}
		cr, err := protocol.ParseConsumeResponse(r.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if string(cr.Batches) != string(want) {
			t.Fatalf("response %d: %d bytes differ from the reference %d", i, len(cr.Batches), len(want))
		}
	}
	c.ping()
}

// TestResetWhileAnswering: a client that resets its connection while the
// server is writing a queue of answers to it must not take the server down.
// The answers queue behind a long poll; the client reads the first one and
// resets the connection while the rest are being written.
func TestResetWhileAnswering(t *testing.T) {
	s := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) { c.EventLoops = 1 })
	p := dialRaw(t, s.Addr)
	p.produce("rst", protocol.ProduceCreateTopic, "x")
	for range 20 {
		c := dialRaw(t, s.Addr)
		next := p.info("rst").NextOffset
		req := protocol.AppendConsumeRequest(nil, 1, "rst", next, 0, 0, 10000)
		for i := range 3000 {
			req = protocol.AppendConsumeRequest(req, uint32(2+i), "rst", 0, 1, 0, 0)
		}
		c.write(req)
		waitFor(t, "the long poll to park", func() bool { return s.Broker.Stats().ParkedPolls == 1 })
		p.produce("rst", 0, "wake")
		c.read()
		c.conn.(*net.TCPConn).SetLinger(0)
		c.conn.Close()
		p.ping()
		waitFor(t, "the reset connection to be released", func() bool { return s.Broker.Stats().ParkedPolls == 0 })
	}
}

// TestStallTimeout: a client that pipelines consumes and never reads the
// responses is closed once its output has been backed up for StallTimeout,
// so that it holds neither its output buffer nor the event loop's ticks
// for good; other connections are served meanwhile.
func TestStallTimeout(t *testing.T) {
	s := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) {
		c.MaxOutboundBytes = 64 << 10
		c.StallTimeout = 300 * time.Millisecond
	})
	p := dialRaw(t, s.Addr)
	p.produce("t", protocol.ProduceCreateTopic, strings.Repeat("x", 60<<10))
	c := dialRaw(t, s.Addr)
	c.conn.(*net.TCPConn).SetReadBuffer(16 << 10)
	var req []byte
	for i := range 200 {
		req = protocol.AppendConsumeRequest(req, uint32(i+1), "t", 0, 0, 1<<20, 0)
	}
	c.write(req)
	waitFor(t, "the stalled connection to be closed", func() bool { return s.Broker.Stats().StallClosed == 1 })
	p.ping()
	waitFor(t, "the closed connection to be gone", func() bool { return s.Broker.Stats().Connections == 1 })
}

// TestHeldResponsesBounded: responses ready behind a parked consume count
// against MaxOutboundBytes: a client that parks one consume and pipelines
// thousands of list requests is read only until their answers reach the
// bound, and every answer arrives, in order, once the poll is woken.
func TestHeldResponsesBounded(t *testing.T) {
	const maxOut = 64 << 10
	s := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) { c.MaxOutboundBytes = maxOut })
	p := dialRaw(t, s.Addr)
	for i := range 40 {
		p.ok(protocol.AppendCreateTopicRequest(nil, p.id(), fmt.Sprintf("%03d-%s", i, strings.Repeat("n", 250))))
	}
	c := dialRaw(t, s.Addr)
	const lists = 2000 // about 10 KB each: 20 MB if all were held
	req := protocol.AppendConsumeRequest(nil, 1, "000-"+strings.Repeat("n", 250), 0, 0, 1<<20, 10000)
	for i := range lists {
		req = protocol.AppendListTopicsRequest(req, uint32(2+i), "", "")
	}
	before := s.Broker.Stats().Requests
	go c.conn.Write(req)
	waitFor(t, "the long poll to park", func() bool { return s.Broker.Stats().ParkedPolls == 1 })
	last, stable := int64(-1), 0
	waitFor(t, "the server to stop reading", func() bool {
		n := s.Broker.Stats().Requests
		if n == last {
			stable++
		} else {
			last, stable = n, 0
		}
		time.Sleep(5 * time.Millisecond)
		return stable >= 40
	})
	if handled := last - before; handled > 100 {
		t.Fatalf("%d list requests answered and held behind a parked consume (bound %d bytes)", handled, maxOut)
	}
	p.produce("000-"+strings.Repeat("n", 250), 0, "wake")
	for i := range lists + 1 {
		r := c.read()
		if r.CorrID != uint32(1+i) || r.Code != protocol.CodeOK {
			t.Fatalf("response %d: corr %d code %v", i, r.CorrID, r.Code)
		}
	}
}

// TestProduceNoSpace: a produce while a volume is under its free-space
// floor is answered with CodeNoSpace and leaves the connection usable.
func TestProduceNoSpace(t *testing.T) {
	s := brokertest.Start(t, 1, func(o *storage.Options, _ *broker.Config) { o.MinFreeBytes = 1 << 62 })
	c := dialRaw(t, s.Addr)
	c.write(protocol.AppendProduceRequest(nil, c.id(), "t", protocol.ProduceCreateTopic, batchOf("m")))
	if r := c.read(); r.Code != protocol.CodeNoSpace {
		t.Fatalf("produce under the floor: code %v (%s), want %v", r.Code, r.errMsg(), protocol.CodeNoSpace)
	}
	c.ping()
}
