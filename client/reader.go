package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// Reader reads one topic in order at the speed of the connection. While
// the caller handles the messages of one response, the request for the
// next is already in flight, and responses are read into two buffers that
// are reused, so a long read allocates almost nothing.
//
// The messages Next returns, their Values included, are valid until the
// next call to Next or Close: copy what must live longer. A Reader holds a
// connection of its own and is not safe for concurrent use.
type Reader struct {
	c       *Client
	slot    *connSlot
	release func()
	topic   string
	offset  int64 // offset of the next message to return (negative: from the end)
	bufs    [2][]byte
	pending *fetch // the request in flight, if any
	msgs    []Message
	atEnd   bool // the last response was empty: the next request waits
	closed  bool
	server  string        // over several servers: the topic's, named in errors
	k       *cluster      // over several servers: where to look for another replica
	moveGap time.Duration // the last wait for a replicated topic with no server to move to
}

// fetch is a consume request in flight, reading into bufs[buf].
type fetch struct {
	offset int64
	buf    int
	wait   time.Duration
	cn     *conn
	id     uint32
	ch     chan response
}

// NewReader returns a Reader of topic from offset (negative counts back
// from the end: -1 is the last message). Close it when done.
func (c *Client) NewReader(topic string, offset int64) (*Reader, error) {
	if c.cl != nil {
		return c.cl.newReader(topic, offset)
	}
	slot, release, err := c.pollSlot()
	if err != nil {
		return nil, err
	}
	return &Reader{c: c, slot: slot, release: release, topic: topic, offset: offset}, nil
}

// Offset is the offset of the next message Next will return, once known
// (before the first Next, the offset NewReader was given).
func (r *Reader) Offset() int64 { return r.offset }

// Server is the address of the server the Reader reads from, over
// several servers (it changes when the Reader moves to another replica);
// empty on a Client of one server.
func (r *Reader) Server() string { return r.server }

// Next returns the next messages of the topic, at least one. At the end of
// the topic it waits for new ones (long polls, no busy loop) until ctx
// ends. Broken connections are dialed again, up to WithRetries times in a
// row (once more, at once, after the server closed one as idle without
// reading the request, as for the Client's requests); a server's error
// returns an *Error. Over several servers an error is a *ServerError
// naming the topic's server (wrapping the error), and a replicated topic
// is read on another replica when its server fails or stops serving it,
// or waited for while none serves it (see the package doc).
func (r *Reader) Next(ctx context.Context) ([]Message, error) {
	msgs, err := r.next(ctx)
	if err != nil && r.server != "" && !errors.Is(err, ErrClosed) && ctx.Err() == nil {
		err = wrapServer(r.server, err)
	}
	return msgs, err
}

// next is Next without naming the server.
func (r *Reader) next(ctx context.Context) ([]Message, error) {
	if r.closed {
		return nil, ErrClosed
	}
	rt := r.c.newRetrier(r.c.opts.retries, requestBackoffMax)
	for {
		if r.pending == nil {
			wait := time.Duration(0)
			if r.atEnd {
				wait = followWait
			}
			if err := r.start(ctx, r.offset, 0, wait, true); err != nil {
				if err := r.failed(ctx, &rt, err); err != nil {
					return nil, err
				}
				continue
			}
		}
		f := r.pending
		resp, ok := f.cn.await(ctx, f.id, f.ch)
		if !ok {
			return nil, ctx.Err() // the request stays in flight for the next call
		}
		r.pending = nil
		if resp.err != nil {
			if err := r.failed(ctx, &rt, resp.err); err != nil {
				return nil, err
			}
			continue
		}
		if resp.frame != nil && cap(resp.frame) > cap(r.bufs[f.buf]) {
			r.bufs[f.buf] = resp.frame[:0]
		}
		if resp.hdr.Code != protocol.CodeOK {
			if err := r.refused(ctx, resp); err != nil {
				return nil, err
			}
			continue
		}
		cr, err := protocol.ParseConsumeResponse(resp.payload)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		next, err := batchesEnd(cr.Batches, cr.StartOffset)
		if err != nil {
			return nil, err
		}
		if next > cr.StartOffset {
			// Ask for the next response now, into the other buffer, whose
			// messages the caller gave up by calling Next. It waits at the
			// server for messages past the end: a Reader that keeps up
			// with its topic gets each new message in one round trip, not
			// an empty answer first and a long poll after.
			if err := r.start(ctx, next, 1-f.buf, followWait, false); err != nil && !errors.Is(err, ErrConnection) {
				return nil, err
			} // a broken connection is dialed again by the next call
		}
		r.msgs, err = r.c.splitBatches(r.msgs[:0], cr.Batches, cr.StartOffset, -1)
		if err != nil {
			// Read these offsets again next time, on a new connection: the
			// request in flight must not write into a buffer reused later.
			r.slot.close()
			r.pending, r.msgs = nil, nil
			return nil, err
		}
		r.offset = next
		r.atEnd = len(r.msgs) == 0
		if !r.atEnd {
			return r.msgs, nil
		}
		rt.reset()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// start sends a consume request from offset, to be read into bufs[buf].
// With await, Next waits for it at once and reads it itself if it can;
// else the connection's reader reads it meanwhile.
func (r *Reader) start(ctx context.Context, offset int64, buf int, wait time.Duration, await bool) error {
	cn, err := r.c.connect(ctx, r.slot)
	if err != nil {
		return err
	}
	topic, maxBytes := r.topic, r.c.opts.consumeBytes()
	send := cn.post
	if await {
		send = cn.send
	}
	id, ch, err := send(time.Time{}, func(b []byte, id uint32) []byte {
		return protocol.AppendConsumeRequest(b, id, topic, offset, 0, maxBytes, int32(wait/time.Millisecond))
	}, r.bufs[buf])
	if err != nil {
		return err
	}
	r.pending = &fetch{offset: offset, buf: buf, wait: wait, cn: cn, id: id, ch: ch}
	return nil
}

// failed decides what follows a request that failed with err: on a
// broken connection over several servers, reading on another replica, or,
// while the topic's other replicas serve nobody (an election, a server
// back before its cluster), waiting to ask again (wait); else a retry
// here, as rt allows (nil: go on).
func (r *Reader) failed(ctx context.Context, rt *retrier, err error) error {
	if errors.Is(err, ErrConnection) && r.k != nil {
		moved, elsewhere := r.move(ctx, err)
		switch {
		case moved:
			return nil
		case elsewhere:
			return r.wait(ctx, err)
		}
	}
	return rt.retry(ctx, err)
}

// refused handles a consume the server refused: over several servers,
// a replicated topic this server no longer serves (it left the in-sync
// set, lost touch with its cluster, or is shutting down) is read on
// another, or asked for again after a wait while none serves it (nil: ask
// again); any other refusal is returned.
func (r *Reader) refused(ctx context.Context, resp response) error {
	r.c.stats.errors.Add(1)
	err := serverError(protocol.OpConsume, resp)
	if r.k != nil && (resp.hdr.Code == protocol.CodeNotLeader || resp.hdr.Code == protocol.CodeShuttingDown) {
		if moved, _ := r.move(ctx, err); moved {
			return nil
		}
		return r.wait(ctx, err)
	}
	return err
}

// move goes on reading on another server of a replicated topic, after
// the Reader's server failed with err (over several servers only): the
// leader err names, else whichever other server has the topic. It
// reports whether it moved and, if not, whether the topic is known to be
// elsewhere all the same: a server that has it refused to serve it (not
// its leader, shutting down), or the failed server answers for it again.
// Neither holds for a topic of the failed server alone.
func (r *Reader) move(ctx context.Context, err error) (moved, elsewhere bool) {
	if r.k == nil {
		return false, false
	}
	from := r.k.server(r.server)
	r.k.forget(r.topic, from)
	var to *Client
	if addr, ok := LeaderOf(err); ok {
		to = r.k.server(addr)
	}
	if to == nil || to == from {
		s, _, rerr := r.k.route(ctx, r.topic, false)
		switch {
		case rerr != nil:
			return false, errors.Is(rerr, ErrNotLeader) || errors.Is(rerr, ErrShuttingDown)
		case s == from:
			return false, true
		}
		to = s
	}
	slot, release, serr := to.pollSlot()
	if serr != nil {
		return false, false
	}
	r.release()
	r.pending = nil
	r.c, r.slot, r.release, r.server = to, slot, release, to.addr
	r.k.remember(r.topic, to)
	r.moveGap = 0
	return true, true
}

// wait waits before Next asks again for a replicated topic that no server
// serves at the moment (an election, servers down): longer each time, up
// to maxNotLeaderWait, until ctx ends, when it returns ctx's error
// wrapping err.
func (r *Reader) wait(ctx context.Context, err error) error {
	r.moveGap = min(max(2*r.moveGap, notLeaderWait), maxNotLeaderWait)
	t := time.NewTimer(r.moveGap)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	case <-t.C:
		return nil
	}
}

// Close ends the Reader and its connection; the messages it returned are
// no longer valid.
func (r *Reader) Close() error {
	if !r.closed {
		r.closed = true
		r.release()
		r.pending, r.msgs = nil, nil
	}
	return nil
}

// batchesEnd returns the offset after the last message of batches, whose
// headers it reads without checking them (splitBatches does), or start if
// there are none.
func batchesEnd(batches []byte, start int64) (int64, error) {
	next := start
	for b := batches; len(b) > 0; {
		bt, n, err := protocol.ParseBatch(b)
		if err != nil {
			return start, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		next = max(next, bt.BaseOffset+int64(bt.Count))
		b = b[n:]
	}
	return next, nil
}
