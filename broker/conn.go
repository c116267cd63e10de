package broker

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/valyala/bytebufferpool"

	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
)

// This file: the gnet callbacks of a connection, framing and backpressure.

// conn is one connection, owned by its event loop: its framing
// (readFrames), the order of its answers (order.go), their flushing, its
// backpressure and its consume pump (consume.go). Requests are answered in
// the order they arrived: a response that cannot be sent yet (a produce
// waiting for its fsync, a parked long poll, or anything behind them)
// waits in slots. The storage requests that run off the loop are handed to
// the connection's worker (worker.go), which has a lock of its own. The
// Broker holds only what all connections share.
type conn struct {
	b *Broker   // the server it belongs to
	c gnet.Conn // its gnet connection

	slots []*slot // requests waiting for their turn, oldest first
	out   []byte  // responses gathered during one callback
	fatal error   // the connection must close

	big          *bytebufferpool.ByteBuffer // a large frame being gathered
	bigSize      int                        // its size
	handlingBig  bool                       // big is the frame being handled: its job may take it
	waitingFrame bool                       // readFrames last stopped for the rest of a frame
	gathering    bool                       // in shedState.gathering (budget.go)
	frameBytes   atomic.Int64               // the unfinished frame's bytes at the last count (budget.go)
	shed         atomic.Bool                // marked to close for the budget (shedFrames)
	shedBytes    int64                      // frameBytes when marked; shedState.mu

	stalledSince time.Time // when its output became backed up; zero once it drains
	pausedSince  time.Time // when it was last paused for the memory budget; zero while served
	waitSince    time.Time // when its consume began waiting for the budget's reserve; zero once served
	handling     int       // size of the frame being handled, still in the inbound buffer

	accounted   int64        // its share of Broker.stats.buffered (budget.go)
	draining    atomic.Bool  // in Broker.draining: to be woken while over the budget
	inboundLeft int          // unread input at the end of the last callback
	lastRecv    atomic.Int64 // Unix nanoseconds of the last bytes received (idle.go)

	caller service.Caller // the rights of its last successful hello (Config.Auth); loop-owned
	tenant string         // its name among the tenants without a token (service.Caller.WithConn)
	// fetching: the topics a follower fetches on it (replica fetches
	// and waits), with the follower, told to the replication when it
	// closes (replicawait.go). Loop-owned.
	fetching map[string]string
	remote   net.Addr // a TLS client's TCP address (tls.go); nil: c.RemoteAddr()
	tls      *tlsOut  // a TLS connection's consumes, sent by its pump (tlsout.go); nil: plaintext

	exempt   bool      // a member's: out of the connection counts (exemptMember); loop-owned
	helloDue bool      // no hello succeeded yet, with a deadline (hello.go); loop-owned
	opened   time.Time // when it opened, with helloDue

	control controlBucket // its allowance of control requests (control.go)

	w worker // shared with the connection's goroutine
}

// maxKeptOut is the largest output buffer a connection keeps between
// callbacks.
const maxKeptOut = 1 << 20

// OnOpen sets up a connection's state.
func (e *events) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	b := e.b
	if isProbe(c) {
		close(b.ready)
		return nil, gnet.Close
	}
	cs := &conn{b: b, c: c}
	cs.tenant = "conn " + strconv.FormatUint(b.connSeq.Add(1), 10)
	cs.caller = cs.caller.WithConn(cs.tenant)
	if p, ok := c.Context().(*peer); ok {
		cs.remote, cs.tls = p.remote, p.out
	}
	cs.w.b, cs.w.conn = b, c
	c.SetContext(cs)
	b.stats.connections.Add(1)
	cs.track()
	cs.awaitHello()
	return nil, gnet.None
}

// isProbe reports whether c came through the engine's own Unix socket:
// Start's probe, the only connection that socket ever takes. The other
// Unix connections, a TLS connection's socket pair, come with a context
// (peer, then conn).
func isProbe(c gnet.Conn) bool {
	a := c.LocalAddr()
	return a != nil && a.Network() == "unix" && c.Context() == nil
}

// OnClose releases what a connection still holds.
func (e *events) OnClose(c gnet.Conn, err error) gnet.Action {
	b := e.b
	if isProbe(c) {
		return gnet.None
	}
	b.stats.connections.Add(-1)
	cs, _ := c.Context().(*conn)
	b.releaseClosed(c, cs) // accept.go; a TLS connection's pump releases the rest
	if cs == nil {
		return gnet.None
	}
	cs.fetchesGone()
	for _, s := range cs.slots {
		if s.consume != nil {
			b.unpark(s.consume)
		}
		if s.async {
			b.stats.pending.Add(-1)
		}
	}
	cs.slots = nil
	cs.big = nil // unfinished: left to the collector, a client may have made it large
	cs.forgetFrame()
	cs.helloDone()
	b.stats.buffered.Add(-cs.accounted)
	cs.accounted = 0
	b.stalledMu.Lock()
	delete(b.stalled, c)
	delete(b.draining, c)
	b.stalledMu.Unlock()
	b.untrack(c)
	return gnet.None
}

// OnTraffic answers what can be answered: completed slots first, then new
// frames, as long as the connection's output is not backed up.
func (e *events) OnTraffic(c gnet.Conn) gnet.Action {
	b := e.b
	cs := c.Context().(*conn)
	cs.w.woken.Store(false) // answers filed from here on wake the loop again
	if cs.shed.Load() {
		return cs.closeShed() // marked by another connection's shedFrames
	}
	if b.cfg.IdleTimeout > 0 {
		if in := c.InboundBuffered(); in > cs.inboundLeft {
			cs.lastRecv.Store(time.Now().UnixNano())
		} else if (in == 0 || cs.waitingFrame) && cs.idle() {
			return b.closeIdle(c, cs.waitingFrame)
		}
	}
	if !cs.stalledSince.IsZero() && cs.outbound() <= b.cfg.MaxOutboundBytes {
		cs.stalledSince = time.Time{} // drained
	}
	cs.advance()
	action := gnet.None
	if cs.fatal == nil {
		action = cs.readFrames()
	}
	if cs.fatal == nil && action == gnet.None {
		cs.advance() // answers the frames just read filed behind nothing pending
	}
	cs.flush()
	if cs.fatal != nil {
		return gnet.Close
	}
	if cs.helloLate() {
		return cs.closeHelloLate()
	}
	if action == gnet.Close {
		return action // what it holds goes with it: not counted against the budget
	}
	if cs.settle() {
		return cs.closeShed()
	}
	cs.inboundLeft = c.InboundBuffered()
	return action
}

// readFrames handles every whole frame buffered, stopping when the output is
// backed up (backpressure: the client must read before it may send more).
// It records whether it stopped for the rest of a frame (waitingFrame).
func (cs *conn) readFrames() gnet.Action {
	b, c := cs.b, cs.c
	cs.waitingFrame = false
	turn := time.Now()
	for cs.fatal == nil {
		if cs.big == nil && c.InboundBuffered() >= protocol.FrameLengthSize {
			// A frame refused for its length is refused before anything
			// of it counts against the budget, whatever else waits.
			hdr, _ := c.Peek(protocol.FrameLengthSize)
			if act, refused := cs.checkFrameLength(hdr); refused {
				return act
			}
		}
		if cs.backedUp() || cs.overBudget() {
			if in := c.InboundBuffered(); in > b.cfg.MaxFrameSize+b.cfg.MaxOutboundBytes || in > budgetUnread && b.overCeiling() {
				b.stats.stallClosed.Add(1)
				b.cfg.Logger.Warn("closing a connection that sends without reading", "remote", remoteAddr(c), "unread", in)
				return gnet.Close
			}
			return gnet.None
		}
		if cs.big != nil {
			// A large frame arriving in pieces: gather it in one buffer.
			if !cs.gatherBig() {
				cs.waitingFrame = true
				return gnet.None
			}
			cs.handlingBig = true
			cs.handle(cs.big.B)
			cs.handlingBig = false
			if cs.big != nil { // the frame's job did not take it (take)
				bytebufferpool.Put(cs.big)
				cs.big = nil
			}
			continue
		}
		if c.InboundBuffered() < protocol.FrameLengthSize {
			cs.waitingFrame = c.InboundBuffered() > 0
			return gnet.None
		}
		hdr, _ := c.Peek(protocol.FrameLengthSize)
		size, _ := protocol.PeekFrame(hdr, b.cfg.MaxFrameSize) // checked above
		if c.InboundBuffered() < size {
			if size >= bigFrame {
				// The buffer grows as bytes arrive, not to the declared
				// size: a client must send what it announces.
				cs.big, cs.bigSize = bytebufferpool.Get(), size
				cs.big.B = cs.big.B[:0]
				cs.gatherBig()
			}
			cs.waitingFrame = true
			return gnet.None // wait for the rest of the frame
		}
		frame, err := c.Peek(size)
		if err != nil {
			return gnet.None
		}
		if h, _, err := protocol.ParseRequestHeader(frame); err == nil && cs.controlPaused(h.Op) {
			return gnet.None // over -max-control-rate: read on once the next is due
		}
		cs.handling = size
		cs.handle(frame)
		cs.handling = 0
		_, _ = c.Discard(size)
		if time.Since(turn) > loopTurn && c.InboundBuffered() > 0 {
			// The connection's turn is over: the loop serves the others
			// that are ready, then this one's next frames.
			b.stats.turnsYielded.Add(1)
			cs.w.wake()
			return gnet.None
		}
	}
	return gnet.None
}

// loopTurn is how long one connection's frames may hold its event loop
// before the loop serves the other connections ready on it: a client that
// pipelines thousands of cheap requests (leases, pings, lookups) costs
// another client on the loop at most this much wait per turn, as Kafka
// mutes a connection between its requests. The cost to the pipelining
// client is one eventfd wake-up per turn.
const loopTurn = 200 * time.Microsecond

// refuseFrame answers a frame that is too large or malformed, then closes
// the connection, since the stream cannot be trusted past it. Nothing of
// the frame is buffered.
// checkFrameLength refuses a frame by its length field, hdr: over
// MaxFrameSize, malformed, or too large before a hello.
func (cs *conn) checkFrameLength(hdr []byte) (gnet.Action, bool) {
	size, err := protocol.PeekFrame(hdr, cs.b.cfg.MaxFrameSize)
	if err != nil && !errors.Is(err, protocol.ErrShortFrame) {
		return cs.refuseFrame(size, err), true
	}
	if err := cs.frameBeforeHello(size); err != nil {
		return cs.refuseFrame(size, err), true
	}
	return gnet.None, false
}

func (cs *conn) refuseFrame(size int, err error) gnet.Action {
	b, c := cs.b, cs.c
	b.stats.badFrame.Add(1)
	h, _, _ := protocol.ParseRequestHeader(peekUpTo(c, protocol.HeaderSize))
	if errors.Is(err, protocol.ErrFrameTooLarge) && size > b.cfg.MaxFrameSize {
		err = fmt.Errorf("%w: a frame of %d bytes, the server's limit is %d (-max-frame): send smaller batches (hrqa produce -batch N, client.WithMaxBatchBytes) or raise the server's -max-frame",
			err, size, b.cfg.MaxFrameSize)
	}
	cs.respondError(h.Op, h.CorrID, err)
	return gnet.Close
}

// bigFrame is the size from which a frame that arrives in pieces is
// gathered into a buffer of its own as it comes, rather than left to
// gnet's inbound ring buffer, which grows by copying and hands a frame that
// wraps around it out as one more copy.
const bigFrame = 256 << 10

// gatherBig moves what gnet buffered of the large frame being gathered into
// cs.big and reports whether the frame is whole.
func (cs *conn) gatherBig() bool {
	c := cs.c
	need := cs.bigSize - len(cs.big.B)
	if n := min(need, c.InboundBuffered()); n > 0 {
		chunk, err := c.Next(n)
		if err != nil {
			return false
		}
		if len(cs.big.B)+n > cap(cs.big.B) {
			// Double, up to the frame's size: append's growth by a
			// quarter would leave four times the frame in garbage.
			grown := make([]byte, len(cs.big.B), min(cs.bigSize, max(len(cs.big.B)+n, 2*cap(cs.big.B))))
			copy(grown, cs.big.B)
			cs.big.B = grown
		}
		cs.big.B = append(cs.big.B, chunk...)
	}
	return len(cs.big.B) == cs.bigSize
}

func peekUpTo(c gnet.Conn, n int) []byte {
	n = min(n, c.InboundBuffered())
	b, _ := c.Peek(n)
	return b
}

func (cs *conn) backedUp() bool {
	b := cs.b
	if len(cs.slots) >= b.cfg.MaxPending {
		return true // slot completions wake the connection
	}
	if cs.outbound() > b.cfg.MaxOutboundBytes {
		cs.stall()
		return true
	}
	// Ready responses held behind one not yet sent (a parked consume, say)
	// count against the same bound: the loop reads on once the head is
	// answered (its Watch or its timer wakes the connection).
	if cs.w.held.Load() > int64(b.cfg.MaxOutboundBytes) {
		return true
	}
	// Compressed produces waiting to be checked on the connection's
	// goroutine (worker.go): checking one wakes the connection.
	if cs.w.decodes.Load() >= maxConnDecodes {
		return true
	}
	// Produces copied for the connection's goroutine count too: their
	// completion wakes the connection.
	return cs.w.queued.Load() > int64(b.cfg.MaxOutboundBytes)
}

// flush writes the gathered output; gnet copies what the socket does not take.
func (cs *conn) flush() {
	c := cs.c
	if len(cs.out) > 0 {
		if _, err := c.Write(cs.out); err != nil {
			cs.fatal = err
		} else {
			cs.wrote(len(cs.out))
		}
	}
	if cap(cs.out) > maxKeptOut {
		cs.out = nil
	} else {
		cs.out = cs.out[:0]
	}
}
