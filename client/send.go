package client

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"
)

// This file: the sending half of a connection. Requests are queued in a
// write buffer and one sender at a time writes all that is queued (see
// conn).

// minWriteTime is the least time a write is given before it fails the
// connection: a server that reads nothing for that long is taken as gone.
const minWriteTime = time.Second

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// maxKeptWriteBuf is the largest write buffer a connection keeps.
const maxKeptWriteBuf = 4 << 20

// errNotSent marks a request that failed before any of its bytes were
// written: retrying it is harmless.
var errNotSent = errors.New("request not sent")

// send queues the frame build appends (given its correlation id), for a
// caller that waits for the response itself (await, which reads it when
// nobody reads): no reader is woken. It returns the channel the response
// will arrive on, exactly once, into buf if it fits (nil: a new buffer).
// If no other sender is writing, it writes the queued frames itself, its
// own and those queued meanwhile, until none is left. The error is set
// when the request was not queued: it cannot have reached the server.
func (c *conn) send(deadline time.Time, build func(dst []byte, corrID uint32) []byte, buf []byte) (uint32, chan response, error) {
	id, ch, writer, err := c.push(deadline, build, buf)
	if writer {
		c.writeQueued()
	}
	return id, ch, err
}

// post hands a request off: it is send, then a reader is woken to read
// the response, for a caller that only takes it from the channel (a
// Producer's batches, a Reader's next request). It does not wait on the
// socket: on a direct connection on Linux, what the socket does not take
// at once is written by a goroutine, which keeps the writer's turn until
// nothing is queued.
func (c *conn) post(deadline time.Time, build func(dst []byte, corrID uint32) []byte, buf []byte) (uint32, chan response, error) {
	id, ch, writer, err := c.push(deadline, build, buf)
	if writer {
		if c.sock != nil {
			c.startWrite()
		} else {
			c.writeQueued()
		}
	}
	if err == nil {
		c.wakeReader()
	}
	return id, ch, err
}

// push queues the frame for send and post. With writer it returns holding
// c.wmu, the writer's turn taken: the caller writes what is queued.
func (c *conn) push(deadline time.Time, build func(dst []byte, corrID uint32) []byte, buf []byte) (id uint32, ch chan response, writer bool, err error) {
	ch = make(chan response, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, nil, false, err
	}
	c.nextID++
	if c.nextID == 0 { // 0 answers no request (see readLoop)
		c.nextID = 1
	}
	id = c.nextID
	c.pending[id] = waiter{ch: ch, buf: buf}
	alone := len(c.pending) == 1
	c.mu.Unlock()
	c.lastSend.Store(time.Now().UnixNano())

	c.wmu.Lock()
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		// Expired before it was queued: the connection is fine.
		c.wmu.Unlock()
		c.forget(id)
		return 0, nil, false, context.DeadlineExceeded
	}
	c.wbuf = build(c.wbuf, id)
	c.wids = append(c.wids, id)
	c.wends = append(c.wends, len(c.wbuf))
	switch {
	case len(c.wids) == 1 || (!c.wdl.IsZero() && deadline.After(c.wdl)):
		c.wdl = deadline
	case deadline.IsZero():
		c.wdl = time.Time{}
	}
	if c.writing {
		c.wmu.Unlock()
		return id, ch, false, nil
	}
	c.writing = true
	if len(c.wids) == 1 && !alone {
		// Let goroutines that are ready to send too (woken by the same
		// batch of responses, say) queue their frames behind this one, so
		// that one write carries them all. Only when other requests are in
		// flight: yielding wakes another thread to look for work, which
		// costs a request alone on the connection tens of microseconds on a
		// busy machine.
		c.wmu.Unlock()
		runtime.Gosched()
		c.wmu.Lock()
	}
	return id, ch, true, nil
}

// writeQueued writes the frames queued, and those queued meanwhile, until
// none is left, as the writer. c.wmu must be held; it is released.
func (c *conn) writeQueued() {
	for len(c.wbuf) > 0 {
		buf, ids, ends, dl := c.takeQueued()
		n, err := c.write(buf, dl)
		if !c.wrote(buf, ids, ends, n, err) {
			return
		}
	}
	c.writing = false
	c.wmu.Unlock()
}

// startWrite is writeQueued on a direct connection on Linux for a caller
// that must not wait on the socket: a write the socket does not take whole
// at once is finished by a goroutine, which goes on as the writer. c.wmu
// must be held; it is released.
func (c *conn) startWrite() {
	for len(c.wbuf) > 0 {
		buf, ids, ends, dl := c.takeQueued()
		n, err := c.sock.tryWrite(buf)
		if err == nil && n < len(buf) {
			go c.finishWrite(buf, ids, ends, dl, n)
			return
		}
		if !c.wrote(buf, ids, ends, n, err) {
			return
		}
	}
	c.writing = false
	c.wmu.Unlock()
}

// takeQueued takes the frames queued for one write, releasing c.wmu, which
// must be held: their bytes, ids, ends and write deadline. One write
// carries every frame queued: it may take as long as the most patient of
// them allows, not the sender's own, and at least minWriteTime, since a
// write that times out fails the connection and every request on it, not
// just the impatient one.
func (c *conn) takeQueued() (buf []byte, ids []uint32, ends []int, dl time.Time) {
	buf, ids, ends, dl = c.wbuf, c.wids, c.wends, c.wdl
	c.wbuf, c.wids, c.wends = c.spare[:0], nil, nil
	c.wmu.Unlock()
	return buf, ids, ends, dl
}

// finishWrite writes buf past its first n bytes, then goes on as the
// writer (writeQueued).
func (c *conn) finishWrite(buf []byte, ids []uint32, ends []int, dl time.Time, n int) {
	m, err := c.write(buf[n:], dl)
	if c.wrote(buf, ids, ends, n+m, err) {
		c.writeQueued()
	}
}

// wrote takes c.wmu back after n bytes of buf, which holds the frames ids
// ending at ends, were written, and keeps buf for reuse. After a write
// error it fails the connection, the frames not written reported as never
// sent, and returns false with c.wmu released.
func (c *conn) wrote(buf []byte, ids []uint32, ends []int, n int, err error) bool {
	c.wmu.Lock()
	if cap(buf) <= maxKeptWriteBuf {
		c.spare = buf[:0]
	}
	if err != nil {
		// Frames wholly past what was written never reached the server,
		// nor did those queued meanwhile.
		unsent := append(unsentFrames(ids, ends, n), c.wids...)
		c.wbuf, c.wids, c.wends = c.wbuf[:0], nil, nil
		c.writing = false
		c.wmu.Unlock()
		c.failUnsent(err, unsent)
		return false
	}
	return true
}

// write writes buf, within the deadline dl (zero: none) but at least
// minWriteTime. A direct connection first writes what the socket takes at
// once, without a deadline, which is all of it unless the server is slow
// to read; the deadline, a runtime timer, is set only when it has to wait.
func (c *conn) write(buf []byte, dl time.Time) (int, error) {
	if c.sock == nil {
		_ = c.nc.SetWriteDeadline(writeDeadline(dl))
		return c.nc.Write(buf)
	}
	n, err := c.sock.tryWrite(buf)
	if err != nil || n == len(buf) {
		return n, err
	}
	_ = c.nc.SetWriteDeadline(writeDeadline(dl))
	m, err := c.sock.Write(buf[n:])
	// An expired deadline left on the socket would fail the next write
	// before it tried.
	_ = c.nc.SetWriteDeadline(time.Time{})
	return n + m, err
}

// writeDeadline is the deadline of a write carrying frames whose latest
// deadline is dl (zero: none).
func writeDeadline(dl time.Time) time.Time {
	if dl.IsZero() {
		return dl
	}
	return later(dl, time.Now().Add(minWriteTime))
}

// unsentFrames returns the ids of the frames, ending at ends, that lie
// wholly past the first n bytes written: they never reached the server.
// A frame cut short may have.
func unsentFrames(ids []uint32, ends []int, n int) []uint32 {
	var unsent []uint32
	for i, end := range ends {
		start := 0
		if i > 0 {
			start = ends[i-1]
		}
		if start >= n && end > start {
			unsent = append(unsent, ids[i])
		}
	}
	return unsent
}

// failUnsent fails the connection after a write error, answering the
// requests that were never written with an error saying so.
func (c *conn) failUnsent(err error, unsent []uint32) {
	c.mu.Lock()
	var chans []chan response
	for _, id := range unsent {
		if w, ok := c.pending[id]; ok {
			delete(c.pending, id)
			chans = append(chans, w.ch)
		}
	}
	c.mu.Unlock()
	for _, ch := range chans {
		ch <- response{err: fmt.Errorf("%w: %w: %w", ErrConnection, errNotSent, err)}
	}
	c.fail(err)
}
