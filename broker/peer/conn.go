package peer

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// Defaults of Options.
const (
	DefaultDialTimeout    = 5 * time.Second
	DefaultRequestTimeout = 30 * time.Second
	// DefaultMaxResponseBytes: a frame of the server's default limit,
	// with room for a response's header.
	DefaultMaxResponseBytes = protocol.DefaultMaxFrameSize + 64<<10
)

// readBufferSize is the reader's buffer: answers to pipelined requests
// arrive together, and one read(2) takes many of them. Larger reads go
// straight to the socket.
const readBufferSize = 64 << 10

// minWriteTime is the least time a write is given before it fails the
// Conn: a server that reads nothing for that long is taken as gone.
const minWriteTime = time.Second

// Options set a Conn up; the zero value is a plaintext connection with
// the defaults.
type Options struct {
	// Name is the client name a hello presents (only with a Token).
	Name string
	// Token, if set, is presented in a hello before any other request.
	Token string
	// TLS, if set, is the TLS configuration of the connection; nil:
	// plaintext.
	TLS *tls.Config
	// DialTimeout bounds the dial and the TLS handshake (default
	// DefaultDialTimeout).
	DialTimeout time.Duration
	// RequestTimeout bounds a request whose context has no deadline,
	// plus the time the server may hold it (a fetch's wait); default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxResponseBytes is the largest response frame read, in bytes
	// (default DefaultMaxResponseBytes); a larger one fails its request
	// with ErrResponseTooLarge.
	MaxResponseBytes int
}

func (o *Options) setDefaults() {
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = DefaultMaxResponseBytes
	}
}

// Conn is one connection to a server's binary port, safe for concurrent
// use: requests are pipelined (see the package doc).
type Conn struct {
	addr string
	opts Options
	nc   net.Conn
	rd   *bufio.Reader // the reader goroutine's

	wmu  sync.Mutex // one frame written at a time
	wbuf []byte     // the frame being written; wmu must be held

	mu      sync.Mutex
	pending map[uint32]waiter // requests waiting for their answer
	nextID  uint32
	err     error         // set once the Conn failed or was closed; then pending is nil
	done    chan struct{} // closed with err
}

// waiter is a request waiting for its answer: the channel it arrives on
// and, optionally, a buffer to read it into.
type waiter struct {
	ch  chan answer
	buf []byte // used when the answer fits its capacity
}

// answer is a response frame, or the error in its place.
type answer struct {
	hdr     protocol.ResponseHeader
	payload []byte // borrows from frame
	frame   []byte
	err     error
}

// Dial connects to the binary port at addr (host:port), presents
// o.Token if set, and checks that the server answers a ping. ctx bounds
// all three.
func Dial(ctx context.Context, addr string, o Options) (*Conn, error) {
	o.setDefaults()
	d := &net.Dialer{Timeout: o.DialTimeout}
	var nc net.Conn
	var err error
	if o.TLS != nil {
		nc, err = (&tls.Dialer{NetDialer: d, Config: o.TLS}).DialContext(ctx, "tcp", addr)
	} else {
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConnection, err)
	}
	// The first request's correlation id is '\n' in its first byte: an
	// HTTP server reading it as a request line sees the line end there
	// and answers at once, which the reader reports as ErrHTTPPort.
	c := &Conn{addr: addr, opts: o, nc: nc, rd: bufio.NewReaderSize(nc, readBufferSize),
		pending: make(map[uint32]waiter), nextID: '\n' - 1, done: make(chan struct{})}
	go c.readLoop()
	if o.Token != "" {
		if err := c.hello(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.Ping(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Addr returns the address the Conn was dialed to.
func (c *Conn) Addr() string { return c.addr }

// Close closes the connection: requests in flight end with ErrClosed.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	return nil
}

// Err returns why the Conn no longer serves requests (it failed or was
// closed), nil while it does.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fail ends the Conn with err (ErrClosed, or what broke it, which is
// wrapped in ErrConnection) and fails every request waiting on it.
func (c *Conn) fail(err error) {
	if !errors.Is(err, ErrClosed) && !errors.Is(err, ErrConnection) {
		err = fmt.Errorf("%w: %w", ErrConnection, err)
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	pending := c.pending
	c.pending = nil
	close(c.done)
	c.mu.Unlock()
	c.nc.Close()
	for _, w := range pending {
		w.ch <- answer{err: err}
	}
}

// hello presents the Conn's name and token. A server too old to know
// the op has no tokens to check: that is no error.
func (c *Conn) hello(ctx context.Context) error {
	_, err := c.do(ctx, protocol.OpHello, 0, nil, func(dst []byte, id uint32) []byte {
		return protocol.AppendHelloRequest(dst, id, protocol.Version, c.opts.Name, c.opts.Token)
	})
	if errors.Is(err, &protocol.Error{Code: protocol.CodeUnknownOp}) {
		return nil
	}
	return err
}

// do sends a request and returns the payload of a successful answer,
// which borrows from the frame read (into *buf when it fits its
// capacity; *buf is then left holding that buffer, for the next call).
// A context without a deadline is given the request timeout plus
// extraWait, the time the server may hold the request.
func (c *Conn) do(ctx context.Context, op protocol.Op, extraWait time.Duration, buf *[]byte,
	build func(dst []byte, corrID uint32) []byte) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.RequestTimeout+extraWait)
		defer cancel()
	}
	var into []byte
	if buf != nil {
		into = *buf
	}
	a := c.roundTrip(ctx, into, build)
	if buf != nil && a.frame != nil {
		*buf = a.frame[:0]
	}
	switch {
	case a.err != nil:
		return nil, a.err
	case a.hdr.Code != protocol.CodeOK:
		return nil, serverError(op, a.hdr.Code, a.payload)
	}
	return a.payload, nil
}

// roundTrip sends the frame build appends (given its correlation id) and
// waits for its answer, read into buf if it fits, or for ctx to end.
func (c *Conn) roundTrip(ctx context.Context, buf []byte, build func(dst []byte, corrID uint32) []byte) answer {
	ch := make(chan answer, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return answer{err: err}
	}
	c.nextID++
	if c.nextID == 0 { // 0 answers no request (see readLoop)
		c.nextID = 1
	}
	id := c.nextID
	c.pending[id] = waiter{ch: ch, buf: buf}
	c.mu.Unlock()
	if err := c.write(ctx, id, build); err != nil {
		if c.forget(id) {
			return answer{err: err}
		}
		return <-ch // failed with the Conn
	}
	select {
	case a := <-ch:
		return a
	case <-ctx.Done():
	}
	if !c.forget(id) {
		// The reader took the request's answer and may be reading it
		// into buf, which the caller gets back: the Conn goes, so that
		// the reader lets go of it before this returns.
		c.fail(fmt.Errorf("a request given up on while its answer was read: %w", ctx.Err()))
		<-ch
	}
	return answer{err: ctx.Err()}
}

// forget drops the wait for the answer to id, and reports whether it was
// still waiting (nobody will send on its channel).
func (c *Conn) forget(id uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pending[id]; !ok {
		return false
	}
	delete(c.pending, id)
	return true
}

// write writes the request's frame, within ctx's deadline but at least
// minWriteTime; a write that fails fails the Conn.
func (c *Conn) write(ctx context.Context, id uint32, build func(dst []byte, corrID uint32) []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := c.Err(); err != nil {
		return err
	}
	c.wbuf = build(c.wbuf[:0], id)
	dl, _ := ctx.Deadline()
	if floor := time.Now().Add(minWriteTime); dl.Before(floor) {
		dl = floor
	}
	_ = c.nc.SetWriteDeadline(dl)
	_, err := c.nc.Write(c.wbuf)
	if cap(c.wbuf) > readBufferSize {
		c.wbuf = nil // a large request's buffer is not kept
	}
	if err != nil {
		c.fail(err)
		return c.Err()
	}
	return nil
}

// readLoop is the Conn's reader: it reads every answer and hands it to
// its request, until the Conn fails or is closed.
func (c *Conn) readLoop() {
	for {
		if err := c.readOne(); err != nil {
			c.fail(err)
			return
		}
	}
}

// readOne reads one response frame and delivers it. An error ends the
// Conn.
func (c *Conn) readOne() error {
	var head [protocol.HeaderSize]byte
	if _, err := io.ReadFull(c.rd, head[:]); err != nil {
		return err
	}
	if string(head[:5]) == "HTTP/" {
		return ErrHTTPPort
	}
	n := int(binary.LittleEndian.Uint32(head[:]))
	if n < protocol.HeaderSize-protocol.FrameLengthSize {
		return fmt.Errorf("response frame of %d bytes: %w", n, protocol.ErrMalformed)
	}
	id := binary.LittleEndian.Uint32(head[protocol.HeaderSize-4:])
	c.mu.Lock()
	w, ok := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	size := protocol.FrameLengthSize + n
	if size > c.opts.MaxResponseBytes {
		// Skip it: the stream stays in step, the request fails.
		if _, err := io.CopyN(io.Discard, c.rd, int64(size-protocol.HeaderSize)); err != nil {
			return err
		}
		if ok {
			w.ch <- answer{err: fmt.Errorf("%w: %d bytes, the limit is %d", ErrResponseTooLarge, size, c.opts.MaxResponseBytes)}
		}
		return nil
	}
	frame := w.buf[:0]
	if cap(frame) < size {
		frame = make([]byte, size)
	}
	frame = frame[:size]
	copy(frame, head[:])
	if _, err := io.ReadFull(c.rd, frame[protocol.HeaderSize:]); err != nil {
		if ok {
			c.mu.Lock()
			if c.pending != nil {
				c.pending[id] = w // failed with the others
			} else {
				w.ch <- answer{err: fmt.Errorf("%w: %w", ErrConnection, err)}
			}
			c.mu.Unlock()
		}
		return err
	}
	hdr, payload, err := protocol.ParseResponseHeader(frame)
	switch {
	case err != nil:
		if ok {
			w.ch <- answer{err: fmt.Errorf("%w: %w", ErrConnection, err)}
		}
		return err
	case ok:
		w.ch <- answer{hdr: hdr, payload: payload, frame: frame}
	case id == 0 && hdr.Code != protocol.CodeOK:
		// An answer to no request: the server closes the connection (an
		// idle timeout, a limit reached) or could not read a request.
		return serverError(hdr.Op, hdr.Code, payload)
	}
	return nil
}
