package broker

import (
	"time"

	"github.com/haraqa/haraqa/broker/internal/limit"
	"github.com/haraqa/haraqa/protocol"
)

// This file: the per-connection bound on control requests
// (Config.MaxControlRate), a token bucket owned by the connection's loop.

// DefaultMaxControlRate is the default Config.MaxControlRate: control
// requests a second per connection. A consumer commits or renews a lease
// a few times a second; a script creating a thousand topics takes a
// fifth of a second; a client pipelining 65,536 leases takes 13 s rather
// than the server's two cores for half a second.
const DefaultMaxControlRate = 5000

// isControl reports whether op counts against Config.MaxControlRate: every
// request but those that move data (produce, consume, import, a replica
// fetch or wait) and hello.
func isControl(op protocol.Op) bool {
	switch op {
	case protocol.OpProduce, protocol.OpConsume, protocol.OpImport, protocol.OpHello, protocol.OpReplicaFetch, protocol.OpReplicaWait:
		return false
	}
	return true
}

// controlBucket is a connection's allowance of control requests. Loop-owned.
type controlBucket struct {
	tokens limit.Bucket // made at the first control request; zero: not yet
	wakeAt time.Time    // when the wake scheduled for the next token is due
}

// controlWait takes a token for a control request and returns 0, or,
// when none is left, how long until the next one is due.
func (cs *conn) controlWait(op protocol.Op, now time.Time) time.Duration {
	rate := cs.b.cfg.MaxControlRate
	if rate <= 0 || !isControl(op) {
		return 0
	}
	q := &cs.control
	if q.tokens == (limit.Bucket{}) {
		q.tokens = limit.PerSecond(float64(rate), max(float64(rate)/10, 1))
	}
	return q.tokens.Wait(now)
}

// pauseControl stops reading the connection until its next control
// request is due, in d from now: a timer wakes it, one at a time however
// often its client sends meanwhile.
func (cs *conn) pauseControl(now time.Time, d time.Duration) {
	if now.Before(cs.control.wakeAt) {
		return // a wake is on its way
	}
	cs.control.wakeAt = now.Add(d)
	cs.b.stats.controlPauses.Add(1)
	w := &cs.w
	time.AfterFunc(d, func() { w.wake() })
}

// controlPaused takes a token for a request of op, or, when none is left,
// pauses the connection until the next is due and reports true.
func (cs *conn) controlPaused(op protocol.Op) bool {
	now := time.Now()
	d := cs.controlWait(op, now)
	if d > 0 {
		cs.pauseControl(now, d)
	}
	return d > 0
}
