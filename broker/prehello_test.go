package broker_test

import (
	"errors"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/auth"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// startAuthWith starts a server that checks authRules' tokens, with opts.
func startAuthWith(t *testing.T, opts ...brokertest.Option) *brokertest.Server {
	t.Helper()
	a := auth.New(authRules(t))
	return brokertest.Start(t, 1, append([]brokertest.Option{func(_ *storage.Options, c *broker.Config) { c.Auth = a }}, opts...)...)
}

// closedOrReset reads until the server closes c: it may send one frame
// first, returned (nil if none came before the end, or a reset lost it).
func closedOrReset(t *testing.T, c *rawConn) *response {
	t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(ioTimeout))
	r, err := readResponse(c.conn)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			return nil
		}
		t.Fatalf("connection not closed by the server: %v", err)
	}
	c.expectClosed()
	return &r
}

// unbuffered waits until the server buffers nothing (the connections
// closed before have let their buffers go).
func unbuffered(t *testing.T, s *brokertest.Server) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.Broker.Stats().BufferedBytes != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the server still buffers %d bytes of closed connections", s.Broker.Stats().BufferedBytes)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPreHelloFrame: with tokens, a connection that has not
// said hello announces a 1 MiB frame: it is answered frame too large,
// naming -max-prehello-frame and the hello, and closed before anything of
// the frame is buffered, though its client goes on sending. A hello with
// a large produce pipelined behind it is served, and a failed hello does
// not lift the limit.
func TestPreHelloFrame(t *testing.T) {
	s := startAuthWith(t)
	peak, stopSampling := sampleBuffered(s)
	req := produceOfFrameLength(t, 7, "orders.x", 1<<20)

	// Enough of the frame for one read: answered, then closed.
	c := dialRaw(t, s.Addr)
	c.write(req[:16<<10])
	r := closedOrReset(t, c)
	if r == nil || r.Code != protocol.CodeFrameTooLarge || r.CorrID != 7 ||
		!strings.Contains(r.errMsg(), "-max-prehello-frame") || !strings.Contains(r.errMsg(), "hello first") {
		t.Fatalf("a 1 MiB frame before a hello: got %+v, want code %v naming -max-prehello-frame and the hello", r, protocol.CodeFrameTooLarge)
	}

	// A client that sends the whole frame but its last byte, at once.
	// (The peak is the server's total: each connection's buffers are let
	// go before the next, so that it measures one at a time.)
	unbuffered(t, s)
	c = dialRaw(t, s.Addr)
	go func() { _, _ = c.conn.Write(req[:len(req)-1]) }()
	closedOrReset(t, c)

	// After a failed hello, still no large frame.
	unbuffered(t, s)
	c = dialRaw(t, s.Addr)
	c.fail(protocol.AppendHelloRequest(nil, c.id(), protocol.Version, "test", tokWrong), protocol.CodeUnauthenticated)
	c.write(req[:16<<10])
	if r := closedOrReset(t, c); r == nil || r.Code != protocol.CodeFrameTooLarge {
		t.Fatalf("a 1 MiB frame after a failed hello: got %+v", r)
	}
	stopSampling()
	if p := peak.Load(); p > broker.DefaultMaxPreHelloFrame {
		t.Errorf("buffered %d bytes at peak for frames refused before a hello, want at most %d", p, broker.DefaultMaxPreHelloFrame)
	}
	if st := s.Broker.Stats(); st.ClosedForFrames != 3 {
		t.Errorf("closed for frames %d, want 3", st.ClosedForFrames)
	}

	// The hello and a 1 MiB produce behind it in one write: both served.
	c = dialRaw(t, s.Addr)
	c.write(append(protocol.AppendHelloRequest(nil, 1, protocol.Version, "test", tokPC), req...))
	for _, id := range []uint32{1, 7} {
		if r := c.read(); r.CorrID != id || r.Code != protocol.CodeOK {
			t.Fatalf("pipelined behind a hello: %+v %s", r.ResponseHeader, r.errMsg())
		}
	}
}

// TestHelloTimeout: with tokens, a connection that only pings
// and never says hello is closed at HelloTimeout with a frame naming
// -hello-timeout; one that said hello is not.
func TestHelloTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	s := startAuthWith(t, func(_ *storage.Options, c *broker.Config) { c.HelloTimeout = timeout })
	start := time.Now()
	good := dialRaw(t, s.Addr)
	good.hello(tokPC)
	pinger := dialRaw(t, s.Addr)
	var last response
	for {
		if _, err := pinger.conn.Write(protocol.AppendPingRequest(nil, pinger.id())); err != nil {
			t.Fatalf("ping: %v", err)
		}
		last = pinger.read()
		if last.CorrID == 0 {
			break
		}
		if time.Since(start) > 3*timeout {
			t.Fatalf("a connection without hello still served %s after it opened (-hello-timeout %s)", time.Since(start), timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if took := time.Since(start); took < timeout {
		t.Fatalf("closed after %s, before the hello timeout of %s", took, timeout)
	}
	if last.Code != protocol.CodeUnauthenticated || !strings.Contains(last.errMsg(), "-hello-timeout") {
		t.Fatalf("closing frame %+v %q, want code %v naming -hello-timeout", last.ResponseHeader, last.errMsg(), protocol.CodeUnauthenticated)
	}
	pinger.expectClosed()
	// A connection that opened and said nothing at all goes the same way.
	quiet := dialRaw(t, s.Addr)
	if r := quiet.read(); r.CorrID != 0 || r.Code != protocol.CodeUnauthenticated {
		t.Fatalf("silent connection: %+v", r.ResponseHeader)
	}
	quiet.expectClosed()
	good.produce("orders.x", protocol.ProduceCreateTopic, "still served")
	waitFor(t, "two hello timeouts and one connection left", func() bool {
		st := s.Broker.Stats()
		return st.HelloTimeouts == 2 && st.Connections == 1
	})
}

// TestPartialFramesBudget: without tokens, three connections
// each hold a 1 MiB produce frame but its last byte, then a fourth sends
// 6 MiB of an 8 MiB frame, past the 4 MiB budget: the largest unfinished
// frame, the fourth's, is closed with a frame naming -max-buffered-bytes,
// the total stays within the budget and one read, the three finish their
// produces, and a well-behaved client produces and consumes throughout.
func TestPartialFramesBudget(t *testing.T) {
	const budget = 4 << 20
	s := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) {
		c.MaxBufferedBytes = budget
		c.EventLoops = 2
	})
	o := dialRaw(t, s.Addr)
	o.produce("t", protocol.ProduceCreateTopic, "before")
	peak, stopSampling := sampleBuffered(s)

	var held []*rawConn
	var frames [][]byte
	for i := range 3 {
		c := dialRaw(t, s.Addr)
		req := produceOfFrameLength(t, uint32(10+i), "t", 1<<20)
		c.write(req[:len(req)-1])
		held, frames = append(held, c), append(frames, req)
		waitFor(t, "the partial frame to be counted", func() bool { return s.Broker.Stats().BufferedBytes >= int64(i+1)*(1<<20-1) })
	}
	big := dialRaw(t, s.Addr)
	bigReq := produceOfFrameLength(t, 99, "t", 8<<20)
	go func() { _, _ = big.conn.Write(bigReq[:6<<20]) }()
	r := closedOrReset(t, big)
	if r != nil && (r.Code != protocol.CodeLimitReached || !strings.Contains(r.errMsg(), "-max-buffered-bytes")) {
		t.Fatalf("the largest unfinished frame closed with %+v %q, want code %v naming -max-buffered-bytes", r.ResponseHeader, r.errMsg(), protocol.CodeLimitReached)
	}
	o.produce("t", 0, "during")
	o.consume("t", 0, 2, 1<<20, 0)
	stopSampling()
	if st := s.Broker.Stats(); st.BudgetClosed != 1 {
		t.Fatalf("budget closed %d connections, want 1 (the largest frame)", st.BudgetClosed)
	}
	if p, limit := peak.Load(), int64(budget+2<<20); p > limit {
		t.Errorf("buffered %d bytes at peak, want at most %d (the budget and a read per loop)", p, limit)
	}
	for i, c := range held {
		c.write(frames[i][len(frames[i])-1:])
		if r := c.read(); r.Code != protocol.CodeOK || r.CorrID != uint32(10+i) {
			t.Fatalf("held frame %d finished: %+v %s", i, r.ResponseHeader, r.errMsg())
		}
	}
	if cr := o.consume("t", 0, 10, 16<<20, 0); cr.NextOffset != 5 {
		t.Fatalf("next offset %d, want 5", cr.NextOffset)
	}
}

// TestSlowloris: a connection that sent part of a frame and
// nothing more for IdleTimeout is closed as idle, with a small frame or a
// large one half sent; one that trickles a frame slowly is not, and is
// answered once the frame is whole.
func TestSlowloris(t *testing.T) {
	const idle = 300 * time.Millisecond
	s := brokertest.Start(t, 1, withIdleTimeout(idle))
	small := produceOfFrameLength(t, 5, "t", 4<<10)
	large := produceOfFrameLength(t, 6, "t", 1<<20)
	start := time.Now()
	stuck := []*rawConn{dialRaw(t, s.Addr), dialRaw(t, s.Addr)}
	stuck[0].write(small[:len(small)/2])
	stuck[1].write(large[:len(large)/2])
	trickler := dialRaw(t, s.Addr)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, c := range stuck {
			c.expectIdleClosed()
		}
	}()
	sent := 0
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-time.After(idle / 10):
			trickler.write(small[sent : sent+1])
			sent++
		}
	}
	if took := time.Since(start); took < idle {
		t.Fatalf("closed after %s, before the idle timeout of %s", took, idle)
	}
	trickler.write(small[sent:])
	if r := trickler.read(); r.Code != protocol.CodeOK || r.CorrID != 5 {
		t.Fatalf("trickled frame: %+v %s", r.ResponseHeader, r.errMsg())
	}
	if st := s.Broker.Stats(); st.IdleClosed != 2 {
		t.Fatalf("idle closed %d, want 2", st.IdleClosed)
	}
}
