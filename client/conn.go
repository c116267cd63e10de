package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/haraqa/haraqa/protocol"
)

// conn is one connection with pipelined requests: writes are serialized,
// one goroutine reads responses and hands each to the request waiting for
// its correlation id.
type conn struct {
	nc  net.Conn
	wmu sync.Mutex // serializes writes

	mu      sync.Mutex
	pending map[uint32]chan response
	nextID  uint32
	err     error // set once the connection failed; then pending is empty
	done    chan struct{}
}

type response struct {
	hdr     protocol.ResponseHeader
	payload []byte
	err     error
}

func dial(ctx context.Context, addr string, timeout time.Duration, maxFrame int) (*conn, error) {
	d := net.Dialer{Timeout: timeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConnection, err)
	}
	c := &conn{nc: nc, pending: make(map[uint32]chan response), done: make(chan struct{})}
	go c.readLoop(maxFrame)
	return c, nil
}

func (c *conn) readLoop(maxFrame int) {
	var lenBuf [protocol.FrameLengthSize]byte
	for {
		if _, err := io.ReadFull(c.nc, lenBuf[:]); err != nil {
			c.fail(err)
			return
		}
		n := int(binary.LittleEndian.Uint32(lenBuf[:]))
		if n > maxFrame || n < protocol.HeaderSize-protocol.FrameLengthSize {
			c.fail(fmt.Errorf("response frame of %d bytes: %w", n, protocol.ErrMalformed))
			return
		}
		frame := make([]byte, protocol.FrameLengthSize+n)
		copy(frame, lenBuf[:])
		if _, err := io.ReadFull(c.nc, frame[protocol.FrameLengthSize:]); err != nil {
			c.fail(err)
			return
		}
		hdr, payload, err := protocol.ParseResponseHeader(frame)
		if err != nil {
			c.fail(err)
			return
		}
		c.mu.Lock()
		ch := c.pending[hdr.CorrID]
		delete(c.pending, hdr.CorrID)
		c.mu.Unlock()
		if ch != nil {
			ch <- response{hdr: hdr, payload: payload}
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
	for _, ch := range pending {
		ch <- response{err: c.err}
	}
}

func (c *conn) dead() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err != nil
}

// send writes the frame build appends (given its correlation id) and
// returns the channel its response will arrive on, exactly once. The error
// is set when the request cannot have reached the server.
func (c *conn) send(deadline time.Time, build func(dst []byte, corrID uint32) []byte) (uint32, chan response, error) {
	ch := make(chan response, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, nil, err
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = ch
	c.mu.Unlock()

	// Frames are built in pooled buffers: a fresh megabyte per batch would
	// be zeroed and, on a VM, page-faulted in, costing more than the send.
	buf := bytebufferpool.Get()
	defer bytebufferpool.Put(buf)
	buf.B = build(buf.B[:0], id)
	c.wmu.Lock()
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		// Expired before a byte was written: the connection is fine.
		c.wmu.Unlock()
		c.forget(id)
		return 0, nil, context.DeadlineExceeded
	}
	_ = c.nc.SetWriteDeadline(deadline)
	n, err := c.nc.Write(buf.B)
	c.wmu.Unlock()
	if err != nil {
		if n == 0 {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.forget(id)
				return 0, nil, context.DeadlineExceeded
			}
		}
		c.fail(err) // a frame cut short breaks the stream; answers ch
	}
	return id, ch, nil
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
		return resp, true
	case <-ctx.Done():
		c.forget(id)
		return response{err: ctx.Err()}, true
	}
}

func (c *conn) close() {
	c.fail(errors.New("closed"))
}
