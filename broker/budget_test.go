package broker_test

import (
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// TestMemoryBudget: many connections that pipeline consumes and never read
// their answers hold no more than MaxBufferedBytes together, plus the
// documented slack (one response per event loop), although each is far
// under its own MaxOutboundBytes; a connection that reads its answers is
// served all along, its consumes too (the hogs pipeline, so they do not
// take the reserve); a hog that starts reading gets every answer; and the
// total falls back to nothing once the hogs are gone.
func TestMemoryBudget(t *testing.T) {
	const (
		budget   = 1 << 20
		msgSize  = 60 << 10
		hogs     = 20
		requests = 200 // 12 MB per hog: more than kernel socket buffers take, under MaxOutboundBytes
		loops    = 2
		reserve  = budget / 8                      // for connections holding no output
		slack    = reserve + loops*(msgSize+4<<10) // and one response per event loop
	)
	s := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) {
		c.MaxBufferedBytes = budget
		c.EventLoops = loops
	})
	p := dialRaw(t, s.Addr)
	p.produce("t", protocol.ProduceCreateTopic, strings.Repeat("x", msgSize))

	peak, stopSampling := sampleBuffered(s)

	cs := make([]*rawConn, hogs)
	consumedBefore := s.Broker.Stats().ConsumedBytes
	for i := range cs {
		cs[i] = dialRaw(t, s.Addr)
		cs[i].conn.(*net.TCPConn).SetReadBuffer(16 << 10)
		var req []byte
		for j := range requests {
			req = protocol.AppendConsumeRequest(req, uint32(j+1), "t", 0, 0, 1<<20, 0)
		}
		cs[i].write(req)
	}
	waitFor(t, "the server to pause the hogs", func() bool { return s.Broker.Stats().BudgetPauses >= hogs })
	// Let the server push all it will: it is stuck once ConsumedBytes stops moving.
	last, stable := int64(-1), 0
	waitFor(t, "the server to stop sending", func() bool {
		got := s.Broker.Stats().ConsumedBytes
		if got == last {
			stable++
		} else {
			last, stable = got, 0
		}
		time.Sleep(5 * time.Millisecond)
		return stable >= 40
	})

	// A client that reads its answers is served while the hogs hold the
	// budget, its consumes included: the hogs pipeline, so they cannot
	// take the reserve kept for consumers that ask one at a time.
	st := s.Broker.Stats()
	if st.BufferedBytes <= budget {
		t.Errorf("the hogs hold %d bytes: the test does not reach the budget (%d)", st.BufferedBytes, budget)
	}
	o := dialRaw(t, s.Addr)
	for range 5 {
		o.ping()
		o.produce("t", 0, "m")
		o.info("t")
		cr := o.consume("t", 0, 1, 1<<20, 0)
		if len(messagesIn(t, cr, 1)) != 1 {
			t.Fatal("the reading client's consume answered without its message")
		}
	}
	stopSampling()
	st = s.Broker.Stats()
	t.Logf("peak buffered %d KiB (budget %d KiB, slack %d KiB); %d pauses; %d KiB handed to the sockets of %d hogs asking for %d KiB",
		peak.Load()>>10, budget>>10, slack>>10, st.BudgetPauses, (st.ConsumedBytes-consumedBefore)>>10, hogs, hogs*requests*msgSize>>10)
	if peak.Load() > budget+slack {
		t.Errorf("buffered %d bytes at peak: over the budget %d + slack %d", peak.Load(), budget, slack)
	}

	// Once the other hogs are gone, a hog that starts reading gets every
	// answer, in order.
	for _, c := range cs[1:] {
		c.conn.Close()
	}
	for j := range requests {
		r := cs[0].read()
		if r.CorrID != uint32(j+1) || r.Code != protocol.CodeOK {
			t.Fatalf("hog answer %d: corr %d code %v", j, r.CorrID, r.Code)
		}
	}
	cs[0].ping()

	cs[0].conn.Close()
	waitFor(t, "the hogs' share to leave the total", func() bool {
		return s.Broker.Stats().Connections == 2 && s.Broker.Stats().BufferedBytes == 0
	})
	o.ping()
}

// TestBudgetStallTimeout: a connection paused for the memory budget that
// does not read its answers for StallTimeout is closed, though its output
// is far under MaxOutboundBytes, and its share leaves the total.
func TestBudgetStallTimeout(t *testing.T) {
	s := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) {
		c.MaxBufferedBytes = 256 << 10
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
	waitFor(t, "the hog to be closed", func() bool { return s.Broker.Stats().StallClosed == 1 })
	waitFor(t, "its share to leave the total", func() bool {
		st := s.Broker.Stats()
		return st.Connections == 1 && st.BufferedBytes == 0
	})
	p.ping()
}

// TestBudgetUnreadInputBounded: gnet reads every socket whatever the
// broker does, so connections paused for the budget whose clients go on
// sending would grow their unread input up to MaxFrameSize +
// MaxOutboundBytes (80 MiB) each. While the server is over its budget and
// a quarter, a paused connection holding more than 1 MiB unread is closed,
// so the total stays within the budget, its quarter and 1 MiB (plus what
// one read brings) per connection; a client that reads its answers is
// served all along.
func TestBudgetUnreadInputBounded(t *testing.T) {
	const (
		budget = 1 << 20
		hogs   = 4
		sends  = 16 << 20 // per hog
	)
	s := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) {
		c.MaxBufferedBytes = budget
		c.EventLoops = 2
	})
	p := dialRaw(t, s.Addr)
	p.produce("t", protocol.ProduceCreateTopic, strings.Repeat("x", 60<<10))

	peak, stopSampling := sampleBuffered(s)
	var pings []byte
	for i := range 1 << 14 {
		pings = protocol.AppendPingRequest(pings, uint32(i+1000))
	}
	done := make(chan error, hogs)
	for range hogs {
		c := dialRaw(t, s.Addr)
		c.conn.(*net.TCPConn).SetReadBuffer(16 << 10)
		var req []byte
		for j := range 100 { // output to hold: the hog is paused
			req = protocol.AppendConsumeRequest(req, uint32(j+1), "t", 0, 0, 1<<20, 0)
		}
		go func() {
			c.conn.SetWriteDeadline(time.Now().Add(ioTimeout))
			_, err := c.conn.Write(req)
			for sent := 0; err == nil && sent < sends; sent += len(pings) {
				_, err = c.conn.Write(pings)
			}
			done <- err
		}()
	}
	closed := 0
	for range hogs {
		if err := <-done; err != nil {
			closed++ // the server closed it: the write failed
		}
	}
	stopSampling()
	st := s.Broker.Stats()
	limit := int64(budget + budget/4 + hogs*(1<<20+256<<10))
	t.Logf("peak buffered %d KiB (limit %d KiB); %d of %d hogs closed; %d closed as stalled", peak.Load()>>10, limit>>10, closed, hogs, st.StallClosed)
	if st.StallClosed == 0 {
		t.Errorf("no hog closed though each sent %d MiB without reading", sends>>20)
	}
	if peak.Load() > limit {
		t.Errorf("buffered %d bytes at peak, over %d", peak.Load(), limit)
	}
	p.ping()
	p.produce("t", 0, "after")
}

// sampleBuffered samples the broker's buffered bytes every 100 us into the
// returned peak until the returned stop is called (which waits for the
// sampler to end).
func sampleBuffered(s *brokertest.Server) (peak *atomic.Int64, stop func()) {
	peak = new(atomic.Int64)
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if n := s.Broker.Stats().BufferedBytes; n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-done:
				return
			default:
				time.Sleep(100 * time.Microsecond)
			}
		}
	}()
	return peak, func() { close(done); <-sampled }
}
