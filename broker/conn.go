package broker

import (
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/valyala/bytebufferpool"

	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// connState is one connection's state. Requests are answered in the order
// they arrived: a response that cannot be sent yet (a produce waiting for
// its fsync, a parked long poll, or anything behind them) waits in slots.
type connState struct {
	mu    sync.Mutex // guards the done and resp fields of slots, set off the loop
	slots []*slot    // loop-owned: requests waiting for their turn, oldest first
	out   []byte     // loop-owned: responses gathered during one callback
	fatal error      // loop-owned: the connection must close
}

type slot struct {
	done    bool     // connState.mu
	resp    []byte   // connState.mu: the response frame, once done
	async   bool     // answered by a goroutine (counted in stats.pending)
	consume *consume // a consume, served when it reaches the head; loop-owned
}

// maxKeptOut is the largest output buffer a connection keeps between
// callbacks.
const maxKeptOut = 1 << 20

// OnOpen sets up a connection's state.
func (b *Broker) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	c.SetContext(&connState{})
	b.stats.connections.Add(1)
	return nil, gnet.None
}

// OnClose releases what a connection still holds.
func (b *Broker) OnClose(c gnet.Conn, err error) gnet.Action {
	b.stats.connections.Add(-1)
	cs, _ := c.Context().(*connState)
	if cs == nil {
		return gnet.None
	}
	for _, s := range cs.slots {
		if s.consume != nil {
			b.unpark(s.consume)
		}
		if s.async {
			b.stats.pending.Add(-1)
		}
	}
	cs.slots = nil
	b.stalledMu.Lock()
	delete(b.stalled, c)
	b.stalledMu.Unlock()
	return gnet.None
}

// OnTraffic answers what can be answered: completed slots first, then new
// frames, as long as the connection's output is not backed up.
func (b *Broker) OnTraffic(c gnet.Conn) gnet.Action {
	cs := c.Context().(*connState)
	b.advance(c, cs)
	action := gnet.None
	if cs.fatal == nil {
		action = b.readFrames(c, cs)
	}
	b.flush(c, cs)
	if cs.fatal != nil {
		return gnet.Close
	}
	return action
}

// readFrames handles every whole frame buffered, stopping when the output is
// backed up (backpressure: the client must read before it may send more).
func (b *Broker) readFrames(c gnet.Conn, cs *connState) gnet.Action {
	for cs.fatal == nil {
		if b.backedUp(c, cs) {
			if c.InboundBuffered() > b.cfg.MaxFrameSize+b.cfg.MaxOutboundBytes {
				b.cfg.Logger.Warn("closing a connection that sends without reading", "remote", c.RemoteAddr())
				return gnet.Close
			}
			return gnet.None
		}
		if c.InboundBuffered() < protocol.FrameLengthSize {
			return gnet.None
		}
		hdr, _ := c.Peek(protocol.FrameLengthSize)
		size, err := protocol.PeekFrame(hdr, b.cfg.MaxFrameSize)
		if err != nil && !errors.Is(err, protocol.ErrShortFrame) {
			// Too large or malformed: answer, then close, since the stream
			// cannot be trusted. Nothing of the frame is buffered here.
			b.stats.badFrame.Add(1)
			h, _, _ := protocol.ParseRequestHeader(peekUpTo(c, protocol.HeaderSize))
			b.respondError(cs, h.Op, h.CorrID, err)
			return gnet.Close
		}
		if c.InboundBuffered() < size {
			return gnet.None // wait for the rest of the frame
		}
		frame, err := c.Peek(size)
		if err != nil {
			return gnet.None
		}
		b.handle(c, cs, frame)
		_, _ = c.Discard(size)
	}
	return gnet.None
}

func peekUpTo(c gnet.Conn, n int) []byte {
	n = min(n, c.InboundBuffered())
	b, _ := c.Peek(n)
	return b
}

func (b *Broker) backedUp(c gnet.Conn, cs *connState) bool {
	if len(cs.slots) >= b.cfg.MaxPending {
		return true // slot completions wake the connection
	}
	if c.OutboundBuffered()+len(cs.out) > b.cfg.MaxOutboundBytes {
		b.stall(c)
		return true
	}
	return false
}

// advance sends the responses at the head of the queue that are ready.
func (b *Broker) advance(c gnet.Conn, cs *connState) {
	for len(cs.slots) > 0 && cs.fatal == nil {
		s := cs.slots[0]
		if s.consume != nil {
			if !b.serveConsume(c, cs, s.consume) {
				return
			}
		} else {
			cs.mu.Lock()
			done, resp := s.done, s.resp
			cs.mu.Unlock()
			if !done {
				return
			}
			cs.out = append(cs.out, resp...)
			if s.async {
				b.stats.pending.Add(-1)
			}
		}
		cs.slots[0] = nil
		cs.slots = cs.slots[1:]
	}
}

// flush writes the gathered output; gnet copies what the socket does not take.
func (b *Broker) flush(c gnet.Conn, cs *connState) {
	if len(cs.out) > 0 {
		if _, err := c.Write(cs.out); err != nil {
			cs.fatal = err
		}
	}
	if cap(cs.out) > maxKeptOut {
		cs.out = nil
	} else {
		cs.out = cs.out[:0]
	}
}

// begin returns the buffer a ready response is appended to: the output if
// nothing waits before it, a fresh slice otherwise; end files it.
func (cs *connState) begin() []byte {
	if len(cs.slots) == 0 {
		return cs.out
	}
	return nil
}

func (cs *connState) end(resp []byte) {
	if len(cs.slots) == 0 {
		cs.out = resp
		return
	}
	cs.slots = append(cs.slots, &slot{done: true, resp: resp})
}

func (b *Broker) respondError(cs *connState, op protocol.Op, corrID uint32, err error) {
	cs.end(b.appendError(cs.begin(), op, corrID, err))
}

func (b *Broker) appendError(dst []byte, op protocol.Op, corrID uint32, err error) []byte {
	b.stats.errors.Add(1)
	code := codeOf(err)
	if code == protocol.CodeUnknown {
		b.cfg.Logger.Error("request failed", "op", op.String(), "err", err)
	}
	return protocol.AppendErrorResponse(dst, op, corrID, code, clientMessage(err, code))
}

// handle serves one whole request frame, valid until it returns.
func (b *Broker) handle(c gnet.Conn, cs *connState, frame []byte) {
	b.stats.requests.Add(1)
	h, payload, err := protocol.ParseRequestHeader(frame)
	if err != nil {
		b.respondError(cs, h.Op, h.CorrID, err)
		if errors.Is(err, protocol.ErrMalformed) {
			cs.fatal = err
		}
		return
	}
	if b.stopping.Load() {
		b.respondError(cs, h.Op, h.CorrID, &protocol.Error{Code: protocol.CodeShuttingDown, Message: "server is shutting down"})
		return
	}
	switch h.Op {
	case protocol.OpPing:
		if err := protocol.ParsePingRequest(payload); err != nil {
			b.respondError(cs, h.Op, h.CorrID, err)
			return
		}
		cs.end(protocol.AppendEmptyResponse(cs.begin(), h.Op, h.CorrID))
	case protocol.OpCreateTopic, protocol.OpDeleteTopic, protocol.OpTopicInfo:
		b.handleTopic(cs, h, payload)
	case protocol.OpListTopics:
		b.handleList(cs, h, payload)
	case protocol.OpProduce:
		b.handleProduce(c, cs, h, payload)
	case protocol.OpConsume:
		b.handleConsume(c, cs, h, payload)
	case protocol.OpTruncate:
		b.handleTruncate(cs, h, payload)
	}
}

func (b *Broker) handleTopic(cs *connState, h protocol.RequestHeader, payload []byte) {
	req, err := protocol.ParseTopicRequest(payload)
	if err != nil {
		b.respondError(cs, h.Op, h.CorrID, err)
		return
	}
	topic := string(req.Topic)
	switch h.Op {
	case protocol.OpCreateTopic:
		err = b.store.CreateTopic(topic)
	case protocol.OpDeleteTopic:
		err = b.store.DeleteTopic(topic)
	case protocol.OpTopicInfo:
		var info storage.TopicInfo
		if info, err = b.store.Info(topic); err == nil {
			cs.end(protocol.AppendTopicInfoResponse(cs.begin(), h.CorrID, protocol.TopicInfoResponse{
				OldestOffset: info.Oldest, NextOffset: info.Next, Bytes: info.Bytes, Segments: uint32(info.Segments),
			}))
			return
		}
	}
	if err != nil {
		b.respondError(cs, h.Op, h.CorrID, err)
		return
	}
	cs.end(protocol.AppendEmptyResponse(cs.begin(), h.Op, h.CorrID))
}

func (b *Broker) handleList(cs *connState, h protocol.RequestHeader, payload []byte) {
	req, err := protocol.ParseListTopicsRequest(payload)
	if err != nil {
		b.respondError(cs, h.Op, h.CorrID, err)
		return
	}
	names := b.store.ListTopics(string(req.Prefix))
	if len(req.Regex) > 0 {
		re, err := regexp.Compile(string(req.Regex))
		if err != nil {
			b.respondError(cs, h.Op, h.CorrID, fmt.Errorf("%w: regex: %w", protocol.ErrInvalidArgument, err))
			return
		}
		kept := names[:0]
		for _, n := range names {
			if re.MatchString(n) {
				kept = append(kept, n)
			}
		}
		names = kept
	}
	cs.end(protocol.AppendListTopicsResponse(cs.begin(), h.CorrID, names))
}

func (b *Broker) handleTruncate(cs *connState, h protocol.RequestHeader, payload []byte) {
	req, err := protocol.ParseTruncateRequest(payload)
	if err != nil {
		b.respondError(cs, h.Op, h.CorrID, err)
		return
	}
	topic := string(req.Topic)
	info, err := b.store.Info(topic)
	if err == nil {
		switch req.By {
		case protocol.TruncateByOffset:
			if req.Before < 0 || req.Before > info.Next {
				err = fmt.Errorf("%w: truncate before %d: the topic's offsets are [%d, %d]", storage.ErrOffsetOutOfRange, req.Before, info.Oldest, info.Next)
				break
			}
			err = b.store.Truncate(topic, req.Before)
		case protocol.TruncateByTime:
			err = b.store.TruncateTime(topic, time.Unix(0, req.Before))
		}
	}
	if err == nil {
		info, err = b.store.Info(topic)
	}
	if err != nil {
		b.respondError(cs, h.Op, h.CorrID, err)
		return
	}
	cs.end(protocol.AppendTruncateResponse(cs.begin(), h.CorrID, info.Oldest))
}

// handleProduce appends the batch. Without fsync the append is a page-cache
// write and runs here on the event loop, storing the frame's bytes without a
// copy; with fsync it runs on a goroutine so the loop never waits for the
// disk, and concurrent produces share one fsync (storage's group commit).
func (b *Broker) handleProduce(c gnet.Conn, cs *connState, h protocol.RequestHeader, payload []byte) {
	req, err := protocol.ParseProduceRequest(payload)
	if err != nil {
		b.respondError(cs, h.Op, h.CorrID, err)
		return
	}
	if !b.fsync {
		cs.end(b.produce(cs.begin(), h.CorrID, string(req.Topic), req.Flags, req.Batch))
		return
	}
	buf := bytebufferpool.Get()
	buf.B = append(buf.B[:0], req.Batch...)
	s := &slot{async: true}
	cs.slots = append(cs.slots, s)
	b.stats.pending.Add(1)
	b.inflight.Add(1)
	topic, flags := string(req.Topic), req.Flags
	go func() {
		defer b.inflight.Done()
		resp := b.produce(nil, h.CorrID, topic, flags, buf.B)
		bytebufferpool.Put(buf)
		cs.mu.Lock()
		s.resp, s.done = resp, true
		cs.mu.Unlock()
		_ = c.Wake(nil)
	}()
}

func (b *Broker) produce(dst []byte, corrID uint32, topic string, flags protocol.ProduceFlags, batch []byte) []byte {
	bt, _, err := protocol.ParseBatch(batch)
	if err != nil {
		return b.appendError(dst, protocol.OpProduce, corrID, err)
	}
	count := bt.Count
	base, err := b.store.Append(topic, batch)
	if errors.Is(err, storage.ErrTopicNotFound) && flags&protocol.ProduceCreateTopic != 0 {
		if cerr := b.store.CreateTopic(topic); cerr == nil || errors.Is(cerr, storage.ErrTopicExists) {
			base, err = b.store.Append(topic, batch)
		}
	}
	if err != nil {
		return b.appendError(dst, protocol.OpProduce, corrID, err)
	}
	b.stats.producedMsgs.Add(int64(count))
	b.stats.producedBytes.Add(int64(len(batch)))
	return protocol.AppendProduceResponse(dst, corrID, base, uint32(count))
}
