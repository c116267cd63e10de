package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// A Producer's batches on the wire: their send, their answer, a resend in
// sequence order, and their Futures' completion.

// send hands one batch to the connection (post) and leaves its answer to a
// goroutine. It holds an in-flight slot, which it releases if it puts the
// batch back.
func (p *Producer) send(b *pbatch) {
	p.encode(b)
	ctx, cancel := context.WithDeadline(context.Background(), b.deadline)
	rt := p.cl().newRetrier(untilDone, producerBackoffMax)
	if b.moved {
		// It follows the leader to another server (follow, which pauses
		// itself while none is named): at once, each batch put back.
		b.moved = false
	} else if b.sends > 0 {
		// A resend after a broken connection: not at once, in case the
		// new connection breaks at once too.
		rt.double(min(b.sends, 4))
		if err := rt.wait(ctx); err != nil {
			cancel()
			p.complete(b, true, 0, fmt.Errorf("%w: %w", ErrConnection, err))
			return
		}
	}
	// A batch that cannot have reached the server (no connection, or
	// refused before it was written) is sent again, with a doubling
	// backoff (retrier), until the request timeout: like Produce, never
	// twice.
	var cn *conn
	var id uint32
	var ch chan response
	for {
		var err error
		c := p.cl()
		if cn, err = c.connect(ctx, &c.main); err == nil {
			if p.idem && p.behindResends(b, cn) {
				cancel()
				<-p.sem
				return
			}
			if !p.fly(b, c, cn) {
				continue // the Producer moved off c meanwhile
			}
			id, ch, err = cn.post(deadlineOf(ctx), p.request(b), nil)
			if err != nil {
				p.land(b)
			}
		}
		if err == nil {
			break
		}
		if p.follow(ctx, c, err) {
			continue
		}
		if err := rt.retry(ctx, err); err != nil {
			cancel()
			p.complete(b, true, 0, err)
			return
		}
	}
	p.inFlight(ctx, cancel, b, cn, id, ch)
}

// encode makes b's batch and deadline at its first send, under the
// current producer id, and seals it again under that id if it was
// refused out of order under one given up since (reseal).
func (p *Producer) encode(b *pbatch) {
	p.mu.Lock()
	pid := p.pid
	p.mu.Unlock()
	if b.reseal {
		b.reseal, b.pid = false, pid
		protocol.SetBatchProducer(b.batch, pid, b.seq)
	}
	if b.batch == nil {
		b.pid = pid
		meta := p.batchMeta(b.headers, pid, b.seq)
		if codec := p.cl().opts.codec; codec == protocol.CodecNone {
			// Sealed where it was gathered: no copy.
			protocol.SealBatchMeta(b.raw, meta, codec, len(b.futures), len(b.raw)-b.hdr)
			b.batch = b.raw
		} else {
			b.batch = protocol.AppendBatchRawMeta(nil, meta, codec, len(b.futures), b.raw[b.hdr:])
			p.recycle(b.raw)
		}
		b.raw = nil
		b.deadline = time.Now().Add(p.cl().opts.requestTimeout)
	}
}

// batchMeta is the meta of a batch of p under producer id pid (0: none)
// with sequence seq: the header newBatchLocked keeps room for is the one
// encode seals.
func (p *Producer) batchMeta(headers bool, pid, seq uint64) protocol.BatchMeta {
	meta := protocol.BatchMeta{Headers: headers}
	if pid != 0 {
		meta.ProducerID, meta.Sequence = pid, seq
	}
	return meta
}

// newBatchLocked returns an empty batch to gather messages in, in a spare
// buffer when one is free, with room for its header. p.mu must be held.
func (p *Producer) newBatchLocked(headers bool) *pbatch {
	b := &pbatch{done: make(chan struct{}), headers: headers, futures: make([]*Future, 0, p.lastCount),
		hdr: p.batchMeta(headers, p.pid, 0).HeaderSize()}
	select {
	case b.raw = <-p.spare:
	default:
	}
	b.raw = append(b.raw[:0], make([]byte, b.hdr)...)
	return b
}

// recycle keeps buf, which nothing refers to any more, for a batch to
// gather in, unless two are kept already.
func (p *Producer) recycle(buf []byte) {
	select {
	case p.spare <- buf[:0]:
	default:
	}
}

// request returns the builder of b's produce request frame.
func (p *Producer) request(b *pbatch) func(dst []byte, corrID uint32) []byte {
	var flags protocol.ProduceFlags
	if p.cl().opts.autoCreate {
		flags = protocol.ProduceCreateTopic
	}
	if p.cl().opts.acksLeader {
		flags |= protocol.ProduceAcksLeader
	}
	if p.idem {
		// The server stores each batch only as the next of its producer,
		// so that one refused (not leader) and sent again is not stored
		// after a later one that reached the new leader first.
		flags |= protocol.ProduceStrictSequence
	}
	return func(dst []byte, corrID uint32) []byte {
		return protocol.AppendProduceRequest(dst, corrID, p.topic, flags, b.batch)
	}
}

// inFlight counts b, just queued on cn as request id, as sent, and leaves
// its answer (on ch, or ctx's end) to a goroutine, which cancel ends.
func (p *Producer) inFlight(ctx context.Context, cancel context.CancelFunc, b *pbatch, cn *conn, id uint32, ch chan response) {
	count, batch, srv, abandon := len(b.futures), b.batch, b.srv, b.abandon
	b.sends++
	p.cl().stats.msgsSent.Add(int64(count))
	p.cl().stats.bytesSent.Add(int64(len(batch)))
	p.cl().stats.inFlight.Add(1)
	go func() {
		defer cancel()
		var resp response
		select {
		case resp = <-ch:
		case <-ctx.Done():
			cn.forget(id)
			resp.err = ctx.Err()
		case <-abandon:
			select {
			case resp = <-ch: // answered meanwhile after all
			default:
				cn.forget(id)
				resp.err = b.abandonErr // set before abandon was closed
			}
		}
		// Out of flight before the futures complete, so that Stats
		// after Flush counts it so.
		p.cl().stats.inFlight.Add(-1)
		base, err := int64(0), resp.err
		if err == nil && resp.hdr.Code != protocol.CodeOK {
			err = serverError(protocol.OpProduce, resp)
		}
		if err == nil {
			var r protocol.ProduceResponse
			if r, err = protocol.ParseProduceResponse(resp.payload); err == nil {
				base = r.BaseOffset
				p.cl().stats.msgsAcked.Add(int64(count))
				p.cl().stats.bytesAcked.Add(int64(len(batch)))
			}
		}
		if err != nil && p.follow(ctx, srv, err) {
			b.moved = true
			p.resend(b) // nothing stored (not the leader), or stored once (idempotent)
			return
		}
		if err != nil && p.idem && p.mayResend(ctx, b, err) {
			// Stored or not, the server answers a resend with the
			// batch's first offset: put it back in order.
			p.resend(b)
			return
		}
		p.land(b)
		if err != nil {
			p.cl().stats.errors.Add(1)
		}
		p.complete(b, true, base, err)
		p.recycle(batch) // answered for good: no resend will need it
	}()
}

// mayResend reports whether b, an idempotent batch that failed with err,
// is to be sent again (in sequence order, from the first batch put back):
// after a connection error, a server stopping, or a write whose outcome
// is unknown (the lead changed before it was committed), since a server
// that stored it answers with its first offset; and after an out of
// order refusal while a batch before it is still to be stored (a strict
// server stores a batch only after the one before), or under a producer
// id given up since (nothing was stored: it is sealed again under the
// current one).
func (p *Producer) mayResend(ctx context.Context, b *pbatch, err error) bool {
	switch {
	case p.cl().retryable(ctx, err):
		return true
	case ctx.Err() != nil:
		return false
	case errors.Is(err, ErrShuttingDown), errors.Is(err, ErrOutcomeUnknown):
		return true
	case errors.Is(err, ErrOutOfOrderSequence):
		p.mu.Lock()
		defer p.mu.Unlock()
		if b.pid != p.pid {
			b.reseal = true
			return true
		}
		return len(p.open) > 0 && p.open[0] != b
	}
	return false
}

// fly records b as in flight on cn, a connection to srv, unless the
// Producer moved off srv meanwhile (follow, or the watcher abandoning
// it): it then reports false, and b goes to the server it is on now.
func (p *Producer) fly(b *pbatch, srv *Client, cn *conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cl() != srv {
		return false
	}
	b.cn, b.srv, b.answered = cn, srv, make(chan struct{})
	if p.attempt > 0 {
		b.flown, b.abandon, b.abandonErr = time.Now(), make(chan struct{}), nil
		p.flights++
		select {
		case p.flew <- struct{}{}:
		default:
		}
	}
	p.flying = append(p.flying, b)
	return true
}

// land records that b's answer is handled.
func (p *Producer) land(b *pbatch) {
	p.mu.Lock()
	p.landLocked(b)
	p.mu.Unlock()
}

// landLocked is land; p.mu must be held.
func (p *Producer) landLocked(b *pbatch) {
	if i := slices.Index(p.flying, b); i >= 0 {
		p.flying = slices.Delete(p.flying, i, i+1)
		close(b.answered)
	}
}

// resend puts b, whose connection broke, back among the sealed batches in
// sequence order, frees its slot and wakes the sender.
func (p *Producer) resend(b *pbatch) {
	p.mu.Lock()
	p.unsealLocked(b)
	p.landLocked(b)
	p.mu.Unlock()
	<-p.sem
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// behindResends is called before b goes out on cn: it waits until every
// batch in flight that b may not be pipelined behind (staleLocked: on an
// earlier, broken connection, under another producer id, or before the
// first acknowledgement of b's) is answered or put back, and reports
// whether one that precedes b was put back, in which case b goes back too
// (in order), so that batches reach the server in sequence order and
// offsets follow Send order.
func (p *Producer) behindResends(b *pbatch, cn *conn) bool {
	for {
		p.mu.Lock()
		var stale *pbatch
		for _, x := range p.flying {
			if x != b && p.staleLocked(x, b, cn) {
				stale = x
				break
			}
		}
		if stale == nil {
			behind := len(p.sealed) > 0 && p.sealed[0].seq < b.seq
			if behind {
				p.unsealLocked(b)
			}
			p.mu.Unlock()
			return behind
		}
		ch := stale.answered
		p.mu.Unlock()
		<-ch // its connection is dead: every request on it is being failed
	}
}

// complete resolves a batch's futures and frees its room and, if it held
// one, its in-flight slot.
func (p *Producer) complete(b *pbatch, slot bool, base int64, err error) {
	if err != nil && p.server != "" && !errors.Is(err, ErrClosed) {
		err = wrapServer(p.server, err)
	}
	for i, f := range b.futures {
		f.offset, f.err = base+int64(i), err
		close(f.done)
	}
	close(b.done)
	p.mu.Lock()
	if p.idem {
		switch {
		case err == nil && b.pid == p.pid:
			p.confirmed = true
		case err != nil && (b.pid == 0 || b.pid == p.pid):
			p.renewLocked()
		}
	}
	p.bufMsgs -= len(b.futures)
	p.bufBytes -= b.size
	for i, o := range p.open {
		if o == b {
			p.open = append(p.open[:i], p.open[i+1:]...)
			break
		}
	}
	close(p.room)
	p.room = make(chan struct{})
	p.mu.Unlock()
	if slot {
		<-p.sem
	}
}

// renewLocked gives up the producer id after a batch under it (or one
// not sent yet) failed for good: its sequence may never be stored, and a
// strict server stores no later one of that id. The batches not sent yet
// go out under a fresh id, after those in flight under the old one are
// answered (staleLocked); those of them refused out of order are sealed
// again under the new one (reseal). p.mu must be held.
func (p *Producer) renewLocked() {
	p.pid, p.confirmed = randomProducerID(), false
}
