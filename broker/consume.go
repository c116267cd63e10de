package broker

import (
	"fmt"
	"io"
	"time"

	"github.com/valyala/bytebufferpool"
	"golang.org/x/sys/unix"

	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
)

// consume is a consume request, served when it reaches the head of its
// connection's queue; with a max wait it parks there until data arrives.
type consume struct {
	corrID   uint32
	topic    string
	caller   service.Caller
	offset   int64 // resolved once the first read is made
	resolved bool
	limit    int
	maxBytes int64
	deadline time.Time // zero: answer at once

	// replica, for a replica fetch (op 17): the follower and its epoch,
	// and the leader's answer fields of the last read.
	replica *replicaFetch
	// wait, for a replica wait (op 24): its topics (replicawait.go).
	wait *replicaWait

	start  time.Time // when the request arrived, for Config.ObserveRequest
	waited bool      // parked at least once
	parked bool
	cancel func() bool // storage watch
	timer  *time.Timer
}

// replicaFetch is what a replica fetch adds to a consume.
type replicaFetch struct {
	follower string
	epoch    int64
	answer   service.FetchAnswer
	parkedHW int64 // the high-water mark when it first parked; -1: not parked
}

// newHighWater reports whether a parked replica fetch should be answered
// without batches: the high-water mark moved since it parked, which the
// follower needs to serve reads (and nil is no replica fetch).
func (rf *replicaFetch) newHighWater() bool {
	return rf != nil && rf.parkedHW >= 0 && rf.answer.HighWater > rf.parkedHW
}

// handleReplicaFetch serves a follower's fetch as a consume that names
// its follower and epoch: the same queue, parking and sendfile.
func (cs *conn) handleReplicaFetch(h protocol.RequestHeader, payload []byte, start time.Time) {
	b := cs.b
	req, err := protocol.ParseReplicaFetchRequest(payload)
	if err == nil {
		err = b.svc.Allow(cs.caller, h.Op, string(req.Topic))
	}
	if err != nil {
		cs.respondError(h.Op, h.CorrID, err)
		b.observe(h.Op, false, start)
		return
	}
	cr := &consume{corrID: h.CorrID, topic: string(req.Topic), caller: cs.caller, offset: req.Offset, resolved: true, start: start,
		replica: &replicaFetch{follower: string(req.Follower), epoch: req.Epoch, parkedHW: -1}}
	cs.fetched(cr.topic, cr.replica.follower)
	cs.queueConsume(cr, req.MaxBytes, req.MaxWaitMs)
}

// op is the op cr answers.
func (cr *consume) op() protocol.Op {
	if cr.wait != nil {
		return protocol.OpReplicaWait
	}
	if cr.replica != nil {
		return protocol.OpReplicaFetch
	}
	return protocol.OpConsume
}

// read makes cr's read: a consume's, or a replica fetch's on the leader.
func (cs *conn) read(cr *consume) (*service.ReadResult, error) {
	b := cs.b
	if rf := cr.replica; rf != nil {
		r, ans, err := b.svc.ReplicaRead(cr.caller, cr.topic, rf.follower, rf.epoch, cr.offset, cr.maxBytes)
		rf.answer = ans
		if err == nil && ans.From > cr.offset {
			cr.offset = ans.From // the leader's log starts past the follower's end
		}
		return r, err
	}
	return b.svc.Read(cr.caller, cr.topic, cr.offset, cr.limit, cr.maxBytes)
}

// copyChunk is the size of the pooled buffer the copying path reads through.
const copyChunk = 256 << 10

func (cs *conn) handleConsume(h protocol.RequestHeader, payload []byte, start time.Time) {
	b := cs.b
	req, err := protocol.ParseConsumeRequest(payload)
	if err == nil {
		err = b.svc.Allow(cs.caller, h.Op, string(req.Topic))
	}
	if err != nil {
		cs.respondError(h.Op, h.CorrID, err)
		b.observe(h.Op, false, start)
		return
	}
	cr := &consume{corrID: h.CorrID, topic: string(req.Topic), caller: cs.caller, offset: req.Offset, start: start}
	switch {
	case req.Limit > 0:
		cr.limit = int(req.Limit)
	case b.cfg.DefaultLimit > 0:
		cr.limit = b.cfg.DefaultLimit
	}
	cs.queueConsume(cr, req.MaxBytes, req.MaxWaitMs)
}

// queueConsume bounds cr by the request's max bytes and max wait and the
// server's, then answers it at once if nothing is queued before it and it
// can be, else queues it.
func (cs *conn) queueConsume(cr *consume, maxBytes, maxWaitMs int32) {
	b := cs.b
	cr.maxBytes = int64(b.cfg.MaxConsumeBytes)
	if maxBytes > 0 {
		cr.maxBytes = min(cr.maxBytes, int64(maxBytes))
	}
	if maxWaitMs > 0 {
		cr.deadline = time.Now().Add(min(time.Duration(maxWaitMs)*time.Millisecond, b.cfg.MaxWait))
	}
	if len(cs.slots) == 0 && !cs.consumeWaits() && cs.serveConsume(cr) {
		return
	}
	cs.slots = append(cs.slots, &slot{consume: cr})
}

// serveConsume answers cr if it can: data is there, the wait is over, or an
// error. Otherwise it parks cr (a storage watch and a timer wake the
// connection) and returns false. Runs on the event loop.
func (cs *conn) serveConsume(cr *consume) bool {
	b := cs.b
	if cr.wait != nil {
		return cs.serveWait(cr)
	}
	r, err := cs.read(cr)
	if err == nil && !cr.resolved {
		cr.offset, cr.resolved = r.Offset, true
	}
	if err != nil {
		b.unpark(cr)
		cs.out = b.appendError(cs.out, cr.op(), cr.corrID, err)
		b.observe(cr.op(), cr.waited, cr.start)
		return true
	}
	if r.Batches == 0 && !cr.deadline.IsZero() && time.Now().Before(cr.deadline) && !cr.replica.newHighWater() {
		r.Release()
		if err := cs.park(cr); err != nil {
			b.unpark(cr)
			cs.out = b.appendError(cs.out, cr.op(), cr.corrID, err)
			b.observe(cr.op(), cr.waited, cr.start)
			return true
		}
		return false
	}
	b.unpark(cr)
	cs.sendConsume(cr, r) // releases r
	b.observe(cr.op(), cr.waited, cr.start)
	return true
}

// park arranges for the connection to be woken when the topic grows past
// cr.offset or the wait ends. Calling it again renews the watch.
func (cs *conn) park(cr *consume) error {
	b, c := cs.b, cs.c
	wake := func() { _ = c.Wake(nil) }
	if cr.cancel != nil {
		cr.cancel()
	}
	watch := b.svc.Watch
	if cr.replica != nil {
		watch = b.svc.ReplicaWatch // the log, not the high-water mark
	}
	cancel, err := watch(cr.caller, cr.topic, cr.offset, wake)
	if err != nil {
		return err
	}
	if rf := cr.replica; rf != nil {
		// A follower also hears of a new high-water mark.
		if rf.parkedHW < 0 {
			rf.parkedHW = rf.answer.HighWater
		}
		hwCancel, err := b.svc.ReplicaWatchHighWater(cr.caller, cr.topic, rf.parkedHW, wake)
		if err != nil {
			cancel()
			return err
		}
		logCancel := cancel
		cancel = func() bool { a, b := logCancel(), hwCancel(); return a || b }
	}
	cr.cancel = cancel
	if !cr.parked {
		cr.parked, cr.waited = true, true
		cr.timer = time.AfterFunc(time.Until(cr.deadline), wake)
		b.stats.parked.Add(1)
	}
	return nil
}

func (b *Broker) unpark(cr *consume) {
	if cr.cancel != nil {
		cr.cancel()
		cr.cancel = nil
	}
	if cr.parked {
		cr.timer.Stop()
		cr.parked = false
		b.stats.parked.Add(-1)
	}
}

// sendConsume writes the response header, then the batches: with
// sendfile(2) straight from the segment file while gnet's outbound buffer is
// empty and the socket takes them, and what remains through a pooled buffer
// into gnet's outbound buffer. On a TLS connection the pump sends the
// batches (tlsout.go). It releases r.
func (cs *conn) sendConsume(cr *consume, r *service.ReadResult) {
	b, c := cs.b, cs.c
	if rf := cr.replica; rf != nil {
		cs.out = protocol.AppendReplicaFetchResponseHeader(cs.out, cr.corrID, protocol.ReplicaFetchResponse{
			StartOffset: cr.offset, NextOffset: r.End, HighWater: rf.answer.HighWater,
			Epoch: rf.answer.Epoch, BatchEpoch: rf.answer.BatchEpoch}, int(r.Bytes))
	} else {
		cs.out = protocol.AppendConsumeResponseHeader(cs.out, cr.corrID, cr.offset, r.End, int(r.Bytes))
	}
	cs.flush() // the header goes before the batch bytes
	if cs.fatal != nil {
		r.Release()
		return
	}
	b.stats.consumedBytes.Add(r.Bytes)
	if cs.tls != nil {
		cs.tls.file(r)
		return
	}
	defer r.Release()
	sock := c.Fd()
	for _, sp := range r.Spans {
		pos, end := sp.Pos, sp.Pos+sp.Len
		if c.OutboundBuffered() == 0 {
			for pos < end {
				n, err := unix.Sendfile(sock, int(sp.File.Fd()), &pos, int(min(end-pos, 1<<30)))
				if n > 0 {
					b.stats.zeroCopyBytes.Add(int64(n))
				}
				if err == unix.EINTR {
					continue
				}
				if err == unix.EAGAIN || (err == nil && n == 0) {
					break
				}
				if err != nil {
					cs.fatal = fmt.Errorf("broker: sendfile: %w", err)
					return
				}
			}
		}
		if pos < end {
			if err := cs.copySpan(sp.File, pos, end); err != nil {
				cs.fatal = err
				return
			}
		}
	}
}

// copySpan reads [pos, end) of f through a pooled buffer into the
// connection's outbound buffer.
func (cs *conn) copySpan(f service.File, pos, end int64) error {
	b, c := cs.b, cs.c
	buf := bytebufferpool.Get()
	defer bytebufferpool.Put(buf)
	for pos < end {
		n := int(min(end-pos, copyChunk))
		if cap(buf.B) < n {
			buf.B = make([]byte, n)
		}
		chunk := buf.B[:n]
		if m, err := f.ReadAt(chunk, pos); m < n {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("broker: read segment: %w", err)
		}
		if _, err := c.Write(chunk); err != nil {
			return err
		}
		b.stats.copiedBytes.Add(int64(n))
		pos += int64(n)
	}
	return nil
}
