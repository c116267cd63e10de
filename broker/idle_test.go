package broker_test

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

func withIdleTimeout(d time.Duration) brokertest.Option {
	return func(_ *storage.Options, c *broker.Config) { c.IdleTimeout = d }
}

// expectIdleClosed reads the CodeIdleTimeout frame (op 0, correlation id
// 0) that closes an idle connection, then the end of the stream.
func (c *rawConn) expectIdleClosed() {
	c.tb.Helper()
	r := c.read()
	if r.Op != 0 || r.CorrID != 0 || r.Code != protocol.CodeIdleTimeout || !strings.Contains(r.errMsg(), "-idle-timeout") {
		c.tb.Fatalf("want an idle timeout frame, got %+v %q", r.ResponseHeader, r.errMsg())
	}
	c.expectClosed()
}

// TestIdleTimeout: a connection that holds nothing and sends nothing for
// IdleTimeout is sent an idle timeout frame and closed; one that keeps
// sending is not.
func TestIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	s := brokertest.Start(t, 1, withIdleTimeout(idle))
	quiet := dialRaw(t, s.Addr)
	quiet.ping()
	start := time.Now()
	busy := dialRaw(t, s.Addr)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		quiet.expectIdleClosed()
	}()
	for pinging := true; pinging; {
		select {
		case <-closed:
			pinging = false
		default:
			busy.ping()
		}
	}
	if took := time.Since(start); took < idle {
		t.Fatalf("closed after %s, before the idle timeout of %s", took, idle)
	}
	busy.ping()
	if st := s.Broker.Stats(); st.IdleClosed != 1 || st.Connections != 1 {
		t.Fatalf("idle closed %d, connections %d: want 1 and 1", st.IdleClosed, st.Connections)
	}
}

// TestIdleTimeoutSparesParkedConsume: a connection whose consume is parked
// for longer than IdleTimeout is not closed, though it sends nothing; once
// answered, it holds nothing and is closed in its turn.
func TestIdleTimeoutSparesParkedConsume(t *testing.T) {
	const idle = 200 * time.Millisecond
	s := brokertest.Start(t, 1, withIdleTimeout(idle))
	p := dialRaw(t, s.Addr)
	p.produce("t", protocol.ProduceCreateTopic, "a")
	parked := dialRaw(t, s.Addr)
	parked.write(protocol.AppendConsumeRequest(nil, 7, "t", 1, 0, 0, 30000))
	waitFor(t, "the consume to park", func() bool { return s.Broker.Stats().ParkedPolls == 1 })
	// A connection opened after the parked one, idle from the start: by the
	// time it is closed, the parked one has been silent longer.
	quiet := dialRaw(t, s.Addr)
	quiet.expectIdleClosed()
	dialRaw(t, s.Addr).produce("t", 0, "b") // p is idle too by now
	r := parked.read()
	if r.CorrID != 7 || r.Code != protocol.CodeOK {
		t.Fatalf("parked consume: %+v %s", r.ResponseHeader, r.errMsg())
	}
	parked.expectIdleClosed()
}

// BenchmarkIdleConnections measures the CPU the process spends per second
// of wall time while 9,000 connections sit idle (the test process holds
// both ends, so 9,000 stays under a 20,000 descriptor limit), with the
// idle timeout on (the default 10 minutes) and off.
//
//	go test -run - -bench IdleConnections -benchtime 1x ./broker/
func BenchmarkIdleConnections(b *testing.B) {
	const conns = 9000
	for _, idle := range []time.Duration{broker.DefaultIdleTimeout, 0} {
		b.Run("idle-timeout="+idle.String(), func(b *testing.B) {
			s := brokertest.Start(b, 1, withIdleTimeout(idle), func(_ *storage.Options, c *broker.Config) { c.MaxConns, c.MaxConnsPerAddr = conns+10, 0 })
			for range conns {
				c := dialRaw(b, s.Addr)
				c.ping()
			}
			var before, after syscall.Rusage
			b.ResetTimer()
			for range b.N {
				syscall.Getrusage(syscall.RUSAGE_SELF, &before)
				start := time.Now()
				time.Sleep(2 * time.Second) // the measurement: CPU while nothing happens
				syscall.Getrusage(syscall.RUSAGE_SELF, &after)
				cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
				b.ReportMetric(100*cpu.Seconds()/time.Since(start).Seconds(), "%cpu")
			}
		})
	}
}
