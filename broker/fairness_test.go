package broker_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// TestLoopTurnServesOthers: on one event loop, a connection that pipelines
// tens of thousands of pings holds the loop at most a turn at a time (the
// connection wakes itself to go on, and gnet runs that wake after the next
// epoll_wait, not in the same drain of its task queue), so another
// connection's ping on the same loop is answered while most of the
// pipeline is still unanswered, not after all of it.
func TestLoopTurnServesOthers(t *testing.T) {
	t.Run("pings", func(t *testing.T) {
		testLoopTurn(t, func(req []byte, i int) []byte { return protocol.AppendPingRequest(req, uint32(i+1)) })
	})
	// Leases are answered by the connection's goroutine, whose answers
	// wake the loop while it drains its tasks.
	t.Run("leases", func(t *testing.T) {
		testLoopTurn(t, func(req []byte, i int) []byte {
			return protocol.AppendLeaseRequest(req, uint32(i+1), protocol.LeaseRequest{TTLMs: 100,
				Topic: []byte("t"), Group: fmt.Appendf(nil, "g%04d", i%1000), Member: []byte("m")})
		})
	})
}

func testLoopTurn(t *testing.T, appendReq func(req []byte, i int) []byte) {
	s := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) {
		c.EventLoops = 1
		c.MaxControlRate = 0 // pipelined pings and leases unpaced: the turn is what this checks
	})
	victim := dialRaw(t, s.Addr)
	victim.produce("t", protocol.ProduceCreateTopic, "m")
	flood := dialRaw(t, s.Addr)
	const n = 60000 // tens of milliseconds of the loop's time
	var req []byte
	for i := range n {
		req = appendReq(req, i)
	}
	var answered atomic.Int64
	done := make(chan error, 1)
	go func() {
		flood.conn.SetReadDeadline(time.Now().Add(time.Minute))
		for range n {
			if _, err := readResponse(flood.conn); err != nil {
				done <- err
				return
			}
			answered.Add(1)
		}
		done <- nil
	}()
	go func() { _, _ = flood.conn.Write(req) }()
	deadline := time.Now().Add(ioTimeout)
	for answered.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no answer to the pipelined pings")
		}
		time.Sleep(50 * time.Microsecond)
	}
	victim.ping()
	if got := answered.Load(); got == n {
		t.Fatalf("the other connection's ping was answered after all %d pipelined pings: the pipeline held the loop", n)
	} else {
		t.Logf("the other connection's ping was answered after %d of %d pipelined pings", got, n)
	}
	if err := <-done; err != nil {
		t.Fatalf("pipelined pings: %v", err)
	}
	if y := s.Broker.Stats().TurnsYielded; y == 0 {
		t.Fatal("no turn yielded: the pipeline never gave the loop up")
	}
}
