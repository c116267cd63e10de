package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// conn is one connection with pipelined requests. Requests are coalesced:
// each is appended to a write buffer, and one sender at a time writes
// whatever has gathered with one write(2), so requests that several
// goroutines send together share a system call on both ends.
//
// Responses are read by one goroutine at a time, the reader, which hands
// each to the request waiting for its correlation id. On a plain TCP
// connection (direct) a caller of roundTrip that finds no reader becomes
// it and reads until its own response arrives, so a request alone in
// flight costs no hand-off between goroutines (a cross-thread wake-up of
// tens of microseconds on a busy machine); if others are still waiting
// when it is done, it wakes the connection's reader goroutine to go on.
// Nobody reads a direct connection with nothing in flight: dead probes it
// for a close by the server before it is used again. On a TLS connection
// the reader goroutine reads all the time. On Linux a direct connection
// reads and writes through sockIO (sockio_linux.go), raw system calls that
// keep the runtime's monitor thread asleep.
type conn struct {
	nc     net.Conn
	direct bool            // plain TCP: callers may read their own responses
	raw    syscall.RawConn // direct: for probe
	sock   *sockIO         // direct, on Linux: raw reads and writes (sockio_linux.go); else nil

	wmu     sync.Mutex // guards the fields below
	wbuf    []byte     // frames waiting to be written
	wids    []uint32   // their correlation ids, in order
	wends   []int      // where each ends in wbuf
	wdl     time.Time  // the write deadline of the frames in wbuf: the latest of theirs, zero if one has none
	writing bool       // a sender is writing; it writes wbuf too before it stops
	spare   []byte     // the writer's other buffer

	lastSend atomic.Int64 // Unix nanoseconds of the last request queued, or of the dial

	mu       sync.Mutex
	pending  map[uint32]waiter
	nextID   uint32
	err      error // set once the connection failed; then pending is empty
	done     chan struct{}
	reading  bool   // someone owns rd: the reader goroutine or a caller
	readerID uint32 // the correlation id of the caller that owns rd; 0 for the goroutine
	midFrame bool   // rd holds part of a frame: reading it on is needed
	deadline bool   // a read deadline was set to stop a caller's read

	kick chan struct{} // wakes the reader goroutine (direct)
	rd   frameReader   // owned by the reader
}

// waiter is a request waiting for its response: the channel it arrives on
// and, optionally, a buffer to read it into.
type waiter struct {
	ch  chan response
	buf []byte // used when the response fits its capacity
}

type response struct {
	hdr     protocol.ResponseHeader
	payload []byte
	frame   []byte // the whole frame payload is part of
	err     error
}

// dial connects to addr, with TLS when tc is set (the handshake within
// timeout and ctx too).
func dial(ctx context.Context, addr string, timeout time.Duration, tc *tls.Config, maxFrame int) (*conn, error) {
	d := &net.Dialer{Timeout: timeout}
	var nc net.Conn
	var err error
	if tc != nil {
		nc, err = (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, "tcp", addr)
	} else {
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConnection, err)
	}
	// The first request's correlation id is '\n' (10) in its first byte:
	// an HTTP server reading it as a request line sees the line end there
	// and answers 400 at once, which the reader reports as ErrHTTPPort,
	// instead of waiting for a line that never ends.
	c := &conn{nc: nc, pending: make(map[uint32]waiter), done: make(chan struct{}), nextID: '\n' - 1,
		kick: make(chan struct{}, 1)}
	c.lastSend.Store(time.Now().UnixNano())
	if tcp, ok := nc.(*net.TCPConn); ok && canPeek {
		if raw, err := tcp.SyscallConn(); err == nil {
			c.direct, c.raw, c.sock = true, raw, newSockIO(raw)
		}
	}
	var r io.Reader = nc
	if c.sock != nil {
		r = c.sock
	}
	c.rd = frameReader{r: bufio.NewReaderSize(r, readBufferSize), maxFrame: maxFrame, sock: c.sock}
	if !c.direct {
		c.reading = true
	}
	go c.readLoop()
	return c, nil
}

// readBufferSize is the reader's buffer: responses to pipelined requests
// arrive together, and a buffered reader takes many of them per read(2).
// Reads larger than it go straight to the socket.
const readBufferSize = 64 << 10

// frameReader reads response frames; a read that stops early (a deadline
// set to stop a caller's read) resumes where it stopped, in whichever
// goroutine reads next. Only the reader uses it.
type frameReader struct {
	r        *bufio.Reader
	sock     *sockIO // under r when direct on Linux: told what a frame still holds (expect)
	maxFrame int
	head     [protocol.HeaderSize]byte
	nh       int    // bytes of head read
	w        waiter // the request the frame answers, once head is read
	ok       bool   // w is set
	skip     int64  // bytes of an over-limit frame still to discard
	frame    []byte // the frame, once head is read and it fits
	nf       int    // bytes of frame read
}

// frameEvent is what one whole frame read means.
type frameEvent struct {
	id   uint32
	w    waiter
	ok   bool     // w is the request the frame answers
	resp response // for w
	fail error    // the connection is done: fail it with this
}

// next reads one frame. An error is the read's: a timeout leaves the frame
// where it stopped; any other error ends the connection.
func (f *frameReader) next(c *conn) (frameEvent, error) {
	if f.nh < len(f.head) {
		n, err := io.ReadFull(f.r, f.head[f.nh:])
		f.nh += n
		if err != nil {
			return frameEvent{}, err
		}
		if string(f.head[:5]) == "HTTP/" { // an HTTP server's answer to our frame
			return f.reset(frameEvent{fail: ErrHTTPPort}), nil
		}
		n = int(binary.LittleEndian.Uint32(f.head[:]))
		if n < protocol.HeaderSize-protocol.FrameLengthSize {
			return f.reset(frameEvent{fail: fmt.Errorf("response frame of %d bytes: %w", n, protocol.ErrMalformed)}), nil
		}
		id := binary.LittleEndian.Uint32(f.head[protocol.HeaderSize-4:])
		c.mu.Lock()
		f.w, f.ok = c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		size := protocol.FrameLengthSize + n
		if size > f.maxFrame {
			// Skip it: the stream stays in step, the request fails.
			f.skip = int64(size - protocol.HeaderSize)
		} else {
			f.frame = f.w.buf[:0]
			if cap(f.frame) < size {
				f.frame = make([]byte, size)
			}
			f.frame = f.frame[:size]
			copy(f.frame, f.head[:])
			f.nf = protocol.HeaderSize
		}
	}
	id := binary.LittleEndian.Uint32(f.head[protocol.HeaderSize-4:])
	if f.frame == nil {
		size := protocol.FrameLengthSize + int(binary.LittleEndian.Uint32(f.head[:]))
		for f.skip > 0 {
			n, err := io.CopyN(io.Discard, f.r, f.skip)
			f.skip -= n
			if err != nil {
				return frameEvent{}, err
			}
		}
		return f.reset(frameEvent{id: id, w: f.w, ok: f.ok, resp: response{err: fmt.Errorf(
			"%w: a response of %d bytes is over the client's limit of %d bytes; raise it with WithMaxResponseBytes",
			ErrResponseTooLarge, size, f.maxFrame)}}), nil
	}
	if f.sock != nil {
		f.sock.expect(len(f.frame) - f.nf - f.r.Buffered())
	}
	n, err := io.ReadFull(f.r, f.frame[f.nf:])
	f.nf += n
	if f.sock != nil {
		f.sock.expect(0)
	}
	if err != nil {
		return frameEvent{}, err
	}
	ev := frameEvent{id: id, w: f.w, ok: f.ok}
	hdr, payload, err := protocol.ParseResponseHeader(f.frame)
	switch {
	case err != nil:
		ev.resp.err = fmt.Errorf("%w: %w", ErrConnection, err)
		ev.fail = err
	case f.ok:
		ev.resp = response{hdr: hdr, payload: payload, frame: f.frame}
	case id == 0 && hdr.Code == protocol.CodeIdleTimeout:
		// The server closes the connection as idle: it answered every
		// request it read, so those still waiting were not read and may
		// be sent again, produces included.
		ev.fail = fmt.Errorf("%w: %w", errNotSent, serverError(hdr.Op, response{hdr: hdr, payload: payload}))
	case id == 0 && hdr.Code != protocol.CodeOK:
		// An answer to no request: the server refuses the connection (a
		// limit reached) or could not read a request's header.
		ev.fail = serverError(hdr.Op, response{hdr: hdr, payload: payload})
	}
	return f.reset(ev), nil
}

// reset makes f ready for the next frame and returns ev.
func (f *frameReader) reset(ev frameEvent) frameEvent {
	f.nh, f.w, f.ok, f.skip, f.frame, f.nf = 0, waiter{}, false, 0, nil, 0
	return ev
}

// midFrame reports whether part of a frame has been read.
func (f *frameReader) midFrame() bool { return f.nh > 0 }

// readOne reads a frame as the reader and delivers it, except to the
// caller whose request is mine (0: none), whose response it returns
// (own true). It reports false when the connection failed or the read
// stopped at a deadline (timedOut).
func (c *conn) readOne(mine uint32) (resp response, own, alive, timedOut bool) {
	ev, err := c.rd.next(c)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) && !c.failed() {
			return response{}, false, false, true
		}
		if c.rd.ok {
			c.rd.w.ch <- response{err: fmt.Errorf("%w: %w", ErrConnection, err)}
		}
		c.rd.reset(frameEvent{})
		c.fail(err)
		return response{}, false, false, false
	}
	if ev.ok {
		if mine != 0 && ev.id == mine {
			resp, own = ev.resp, true
		} else {
			ev.w.ch <- ev.resp
		}
	}
	if ev.fail != nil {
		c.fail(ev.fail)
		return resp, own, false, false
	}
	return resp, own, true, false
}

// readLoop is the connection's reader goroutine: on a TLS connection it
// reads every frame; on a direct one, it reads while requests are waiting
// and no caller reads, woken by kick.
func (c *conn) readLoop() {
	if !c.direct {
		for {
			if _, _, alive, timedOut := c.readOne(0); !alive && !timedOut {
				return
			}
		}
	}
	for {
		select {
		case <-c.kick:
		case <-c.done:
			return
		}
		if !c.claim(0) {
			continue
		}
		for {
			_, _, alive, timedOut := c.readOne(0)
			if timedOut { // a deadline meant for a caller that owned rd before
				c.mu.Lock()
				c.clearDeadlineLocked()
				c.mu.Unlock()
				continue
			}
			if !alive {
				return
			}
			if !c.release(true) {
				break
			}
		}
	}
}

// claim makes the caller of the request id (0: the reader goroutine) the
// reader if nobody reads, the connection is alive and there is something
// to read.
func (c *conn) claim(id uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reading || c.err != nil || (len(c.pending) == 0 && !c.midFrame) {
		return false
	}
	c.reading, c.readerID = true, id
	c.clearDeadlineLocked()
	return true
}

// release ends the reader's turn. With keep, it keeps the turn instead
// (and reports true) while there is more to read; without, a caller's
// turn passes to the reader goroutine if there is.
func (c *conn) release(keep bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.midFrame = c.rd.midFrame()
	more := c.err == nil && (len(c.pending) > 0 || c.midFrame)
	if keep && more {
		return true
	}
	c.reading, c.readerID = false, 0
	c.clearDeadlineLocked()
	if more {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	return false
}

// clearDeadlineLocked removes a read deadline set to stop a caller's read.
// c.mu must be held.
func (c *conn) clearDeadlineLocked() {
	if c.deadline {
		c.deadline = false
		_ = c.nc.SetReadDeadline(time.Time{})
	}
}

// wakeReader makes sure a reader will read the responses to requests just
// queued: on a direct connection with nobody reading, the goroutine.
func (c *conn) wakeReader() {
	if !c.direct {
		return
	}
	c.mu.Lock()
	idle := !c.reading
	c.mu.Unlock()
	if idle {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
}

// readOwn reads frames as the reader until the response to the request id
// arrives, delivering the others, or ctx ends (ok false: wait on ch).
func (c *conn) readOwn(ctx context.Context, id uint32, ch chan response) (response, bool) {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.reading && c.readerID == id {
			c.deadline = true
			_ = c.nc.SetReadDeadline(aLongTimeAgo)
		}
	})
	defer stop()
	for {
		select {
		case resp := <-ch: // answered by the reader before this one
			c.release(false)
			return resp, true
		default:
		}
		resp, own, alive, _ := c.readOne(id)
		if own {
			c.release(false)
			return resp, true
		}
		if !alive {
			c.release(false)
			return response{}, false
		}
	}
}

var aLongTimeAgo = time.Unix(1, 0)

// probeAfter is how long a direct connection with nothing in flight goes
// unused before dead looks for a close by the server.
const probeAfter = time.Millisecond

// fail marks the connection dead and fails every request waiting on it.
func (c *conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = fmt.Errorf("%w: %w", ErrConnection, err)
	pending := c.pending
	c.pending = nil
	close(c.done)
	c.mu.Unlock()
	c.nc.Close()
	for _, w := range pending {
		w.ch <- response{err: c.err}
	}
}

// dead reports whether the connection failed. A direct connection that
// nobody reads and that went unused for probeAfter is probed first: if the
// server closed it, it is failed now, before a request is sent on it, and
// what it holds (a late answer to a request given up on, an idle-timeout
// notice) is read.
func (c *conn) dead() bool {
	c.mu.Lock()
	if c.err != nil || !c.direct || c.reading || len(c.pending) > 0 ||
		time.Since(time.Unix(0, c.lastSend.Load())) < probeAfter {
		defer c.mu.Unlock()
		return c.err != nil
	}
	// Nobody reads and nothing is in flight: new requests wait for c.mu,
	// so what the socket holds was sent before any of them.
	data, err := c.peekLocked()
	switch {
	case err != nil:
		c.mu.Unlock()
		c.fail(fmt.Errorf("%w: %w", errNotSent, err))
		return true
	case !data:
		c.mu.Unlock()
		return false
	}
	c.reading, c.readerID = true, 0
	c.mu.Unlock()
	for {
		if _, _, alive, _ := c.readOne(0); !alive {
			break
		}
		if c.rd.r.Buffered() == 0 && !c.rd.midFrame() {
			c.mu.Lock()
			data, err := c.peekLocked()
			c.mu.Unlock()
			if err != nil || !data {
				break // a close is read as such next time
			}
		}
	}
	c.release(false)
	return c.failed()
}

func (c *conn) failed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err != nil
}

// idleFor reports whether no request is waiting on c and none was sent for
// d or longer (d > 0).
func (c *conn) idleFor(d time.Duration) bool {
	if d <= 0 || time.Since(time.Unix(0, c.lastSend.Load())) < d {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending) == 0
}

// forget drops the wait for the response to id.
func (c *conn) forget(id uint32) {
	c.mu.Lock()
	if c.pending != nil {
		delete(c.pending, id)
	}
	c.mu.Unlock()
}

// roundTrip sends a request and waits for its response. sent reports
// whether the request may have reached the server.
func (c *conn) roundTrip(ctx context.Context, buf []byte, build func(dst []byte, corrID uint32) []byte) (resp response, sent bool) {
	dl, _ := ctx.Deadline()
	id, ch, err := c.send(dl, build, buf)
	if err != nil {
		return response{err: err}, false
	}
	resp, ok := c.await(ctx, id, ch)
	if !ok {
		c.forget(id)
		return response{err: ctx.Err()}, true
	}
	return resp, !errors.Is(resp.err, errNotSent)
}

// await waits for the response to the request id, on ch, reading it
// itself on a direct connection that nobody reads; ok is false if ctx
// ended first (the request is still in flight).
func (c *conn) await(ctx context.Context, id uint32, ch chan response) (resp response, ok bool) {
	if c.direct {
		if c.claim(id) {
			if resp, ok := c.readOwn(ctx, id, ch); ok {
				return resp, true
			}
		} else {
			c.wakeReader()
		}
	}
	select {
	case resp = <-ch:
		return resp, true
	case <-ctx.Done():
		return response{}, false
	}
}

func (c *conn) close() {
	c.fail(errors.New("closed"))
}

// hello presents the client's name and token, before any other request.
// A server too old to know the op has no tokens to check: that is no
// error.
func (c *conn) hello(ctx context.Context, name, token string) error {
	resp, _ := c.roundTrip(ctx, nil, func(dst []byte, id uint32) []byte {
		return protocol.AppendHelloRequest(dst, id, protocol.Version, name, token)
	})
	switch {
	case resp.err != nil:
		return resp.err
	case resp.hdr.Code == protocol.CodeUnknownOp:
		return nil
	case resp.hdr.Code != protocol.CodeOK:
		return serverError(protocol.OpHello, resp)
	}
	_, err := protocol.ParseHelloResponse(resp.payload)
	return err
}
