package broker

import (
	"errors"
	"sync/atomic"

	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
)

// This file: response ordering. Each request that cannot be answered at
// once takes a slot in its connection's queue; advance sends the slots at
// the head as they complete, so responses leave in request order.

// slot is one request waiting for its turn to be answered.
type slot struct {
	// done is set once the outcome fields below are written, which
	// happens once: the loop reads them only after done, with no lock, so
	// that answering thousands of pipelined requests never contends with
	// the goroutine filing them.
	done    atomic.Bool
	resp    []byte   // the response frame, once done
	async   bool     // answered by a goroutine (counted in stats.pending)
	consume *consume // a consume, served when it reaches the head; loop-owned

	// An asynchronous produce (worker.appendAsync): its outcome, set
	// before done, from which the loop writes the response.
	produce *job
	base    int64
	err     error
}

// advance sends the responses at the head of the queue that are ready.
func (cs *conn) advance() {
	b := cs.b
	for len(cs.slots) > 0 && cs.fatal == nil {
		s := cs.slots[0]
		if s.consume != nil {
			if cs.outbound() > b.cfg.MaxOutboundBytes {
				cs.stall() // resume once the client has read
				return
			}
			if cs.consumeWaits() {
				return // the tick wakes it to look again
			}
			if !cs.serveConsume(s.consume) || len(cs.slots) == 0 || cs.fatal != nil {
				// Not ready, or a failed write closed the connection
				// (gnet calls OnClose from inside Write).
				return
			}
		} else {
			if !s.done.Load() {
				return
			}
			resp := s.resp
			if j := s.produce; j != nil {
				cs.out = b.appendProduceResponse(cs.out, j, s.base, s.err)
				b.observe(j.op, false, j.start)
				b.release(&cs.w, j)
			} else {
				cs.out = append(cs.out, resp...)
				cs.w.held.Add(-int64(len(resp)))
			}
			if s.async {
				b.stats.pending.Add(-1)
			}
		}
		cs.slots[0] = nil
		cs.slots = cs.slots[1:]
	}
}

// begin returns the buffer a ready response is appended to: the output if
// nothing waits before it, a fresh slice otherwise; end files it.
func (cs *conn) begin() []byte {
	if len(cs.slots) == 0 {
		return cs.out
	}
	return nil
}

func (cs *conn) end(resp []byte) {
	if len(cs.slots) == 0 {
		cs.out = resp
		return
	}
	cs.w.held.Add(int64(len(resp)))
	s := &slot{resp: resp}
	s.done.Store(true)
	cs.slots = append(cs.slots, s)
}

func (cs *conn) respondError(op protocol.Op, corrID uint32, err error) {
	b := cs.b
	if errors.Is(err, protocol.ErrMalformed) || errors.Is(err, protocol.ErrFrameTooLarge) {
		// The stream cannot be trusted past this frame: answer now, ahead of
		// anything still pending, since the connection closes next.
		cs.out = b.appendError(cs.out, op, corrID, err)
		cs.fatal = err
		return
	}
	cs.end(b.appendError(cs.begin(), op, corrID, err))
}

func (b *Broker) appendError(dst []byte, op protocol.Op, corrID uint32, err error) []byte {
	b.stats.errors.Add(1)
	code := service.Code(err)
	if code == protocol.CodeUnknown {
		b.cfg.Logger.Error("request failed", "op", op.String(), "err", err)
	}
	return protocol.AppendErrorResponse(dst, op, corrID, code, service.Message(err, code))
}
