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
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// conn is one connection with pipelined requests. Requests are coalesced:
// each is appended to a write buffer, and one sender at a time writes
// whatever has gathered with one write(2), so requests that several
// goroutines send together share a system call on both ends. One goroutine
// reads responses and hands each to the request waiting for its
// correlation id.
type conn struct {
	nc net.Conn

	wmu     sync.Mutex // guards the fields below
	wbuf    []byte     // frames waiting to be written
	wids    []uint32   // their correlation ids, in order
	wends   []int      // where each ends in wbuf
	writing bool       // a sender is writing; it writes wbuf too before it stops
	spare   []byte     // the writer's other buffer

	lastSend atomic.Int64 // Unix nanoseconds of the last request queued, or of the dial

	mu      sync.Mutex
	pending map[uint32]waiter
	nextID  uint32
	err     error // set once the connection failed; then pending is empty
	done    chan struct{}
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
	c := &conn{nc: nc, pending: make(map[uint32]waiter), done: make(chan struct{})}
	c.lastSend.Store(time.Now().UnixNano())
	go c.readLoop(maxFrame)
	return c, nil
}

// readBufferSize is the read loop's buffer: responses to pipelined requests
// arrive together, and a buffered reader takes many of them per read(2).
// Reads larger than it go straight to the socket.
const readBufferSize = 64 << 10

func (c *conn) readLoop(maxFrame int) {
	var head [protocol.HeaderSize]byte
	r := bufio.NewReaderSize(c.nc, readBufferSize)
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			c.fail(err)
			return
		}
		n := int(binary.LittleEndian.Uint32(head[:]))
		if n < protocol.HeaderSize-protocol.FrameLengthSize {
			c.fail(fmt.Errorf("response frame of %d bytes: %w", n, protocol.ErrMalformed))
			return
		}
		id := binary.LittleEndian.Uint32(head[protocol.HeaderSize-4:])
		c.mu.Lock()
		w, ok := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if size := protocol.FrameLengthSize + n; size > maxFrame {
			// Skip it: the stream stays in step, the request fails.
			if _, err := io.CopyN(io.Discard, r, int64(size-protocol.HeaderSize)); err != nil {
				c.fail(err)
				return
			}
			if ok {
				w.ch <- response{err: fmt.Errorf("%w: a response of %d bytes is over the client's limit of %d bytes; raise it with WithMaxResponseBytes",
					ErrResponseTooLarge, size, maxFrame)}
			}
			continue
		}
		size := protocol.FrameLengthSize + n
		frame := w.buf[:0]
		if cap(frame) < size {
			frame = make([]byte, size)
		}
		frame = frame[:size]
		copy(frame, head[:])
		if _, err := io.ReadFull(r, frame[protocol.HeaderSize:]); err != nil {
			if ok {
				w.ch <- response{err: fmt.Errorf("%w: %w", ErrConnection, err)}
			}
			c.fail(err)
			return
		}
		hdr, payload, err := protocol.ParseResponseHeader(frame)
		if err != nil {
			if ok {
				w.ch <- response{err: fmt.Errorf("%w: %w", ErrConnection, err)}
			}
			c.fail(err)
			return
		}
		if ok {
			w.ch <- response{hdr: hdr, payload: payload, frame: frame}
		} else if id == 0 && hdr.Code == protocol.CodeIdleTimeout {
			// The server closes the connection as idle: it answered every
			// request it read, so those still waiting were not read and
			// may be sent again, produces included.
			c.fail(fmt.Errorf("%w: %w", errNotSent, serverError(hdr.Op, response{hdr: hdr, payload: payload})))
			return
		} else if id == 0 && hdr.Code != protocol.CodeOK {
			// An answer to no request: the server refuses the connection
			// (a limit reached) or could not read a request's header.
			c.fail(serverError(hdr.Op, response{hdr: hdr, payload: payload}))
			return
		}
	}
}

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

func (c *conn) dead() bool {
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

// maxKeptWriteBuf is the largest write buffer a connection keeps.
const maxKeptWriteBuf = 4 << 20

// errNotSent marks a request that failed before any of its bytes were
// written: retrying it is harmless.
var errNotSent = errors.New("request not sent")

// send queues the frame build appends (given its correlation id) and
// returns the channel its response will arrive on, exactly once. If no
// other sender is writing, it writes the queued frames itself, its own and
// those queued meanwhile, until none is left. The error is set when the
// request was not queued: it cannot have reached the server.
func (c *conn) send(deadline time.Time, build func(dst []byte, corrID uint32) []byte) (uint32, chan response, error) {
	return c.sendInto(deadline, build, nil)
}

// sendInto is send with a buffer the response is read into if it fits.
func (c *conn) sendInto(deadline time.Time, build func(dst []byte, corrID uint32) []byte, buf []byte) (uint32, chan response, error) {
	ch := make(chan response, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, nil, err
	}
	c.nextID++
	if c.nextID == 0 { // 0 answers no request (see readLoop)
		c.nextID = 1
	}
	id := c.nextID
	c.pending[id] = waiter{ch: ch, buf: buf}
	c.mu.Unlock()
	c.lastSend.Store(time.Now().UnixNano())

	c.wmu.Lock()
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		// Expired before it was queued: the connection is fine.
		c.wmu.Unlock()
		c.forget(id)
		return 0, nil, context.DeadlineExceeded
	}
	c.wbuf = build(c.wbuf, id)
	c.wids = append(c.wids, id)
	c.wends = append(c.wends, len(c.wbuf))
	if c.writing {
		c.wmu.Unlock()
		return id, ch, nil
	}
	c.writing = true
	if len(c.wids) == 1 {
		// Let goroutines that are ready to send too (woken by the same
		// batch of responses, say) queue their frames behind this one, so
		// that one write carries them all. Costs well under a microsecond
		// when no one else is ready.
		c.wmu.Unlock()
		runtime.Gosched()
		c.wmu.Lock()
	}
	for len(c.wbuf) > 0 {
		buf, ids, ends := c.wbuf, c.wids, c.wends
		c.wbuf, c.wids, c.wends = c.spare[:0], nil, nil
		c.wmu.Unlock()
		_ = c.nc.SetWriteDeadline(deadline)
		n, err := c.nc.Write(buf)
		c.wmu.Lock()
		if cap(buf) <= maxKeptWriteBuf {
			c.spare = buf[:0]
		}
		if err != nil {
			// Frames wholly past what was written never reached the
			// server, nor did those queued meanwhile.
			unsent := append(unsentFrames(ids, ends, n), c.wids...)
			c.wbuf, c.wids, c.wends = c.wbuf[:0], nil, nil
			c.writing = false
			c.wmu.Unlock()
			c.failUnsent(err, unsent)
			return id, ch, nil
		}
	}
	c.writing = false
	c.wmu.Unlock()
	return id, ch, nil
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
func (c *conn) roundTrip(ctx context.Context, build func(dst []byte, corrID uint32) []byte) (resp response, sent bool) {
	dl, _ := ctx.Deadline()
	id, ch, err := c.send(dl, build)
	if err != nil {
		return response{err: err}, false
	}
	select {
	case resp = <-ch:
		return resp, !errors.Is(resp.err, errNotSent)
	case <-ctx.Done():
		c.forget(id)
		return response{err: ctx.Err()}, true
	}
}

func (c *conn) close() {
	c.fail(errors.New("closed"))
}

// hello presents the client's name and token, before any other request.
// A server too old to know the op has no tokens to check: that is no
// error.
func (c *conn) hello(ctx context.Context, name, token string) error {
	resp, _ := c.roundTrip(ctx, func(dst []byte, id uint32) []byte {
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
