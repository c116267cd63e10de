package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// ErrBufferFull: TrySend found the Producer's buffer full.
var ErrBufferFull = errors.New("client: producer buffer is full")

// ProducerOption configures a Producer.
type ProducerOption func(*producerOptions)

type producerOptions struct {
	batchSize   int
	linger      time.Duration
	maxInFlight int
	maxMsgs     int
	maxBytes    int
}

// WithBatchSize sends a batch once it holds n messages (default 1000, at
// most protocol.MaxBatchMessages).
func WithBatchSize(n int) ProducerOption {
	return func(o *producerOptions) { o.batchSize = min(max(n, 1), protocol.MaxBatchMessages) }
}

// WithLinger sends a batch at the latest d after its first message
// (default 5ms; 0 sends each batch as soon as the sender is free).
func WithLinger(d time.Duration) ProducerOption {
	return func(o *producerOptions) { o.linger = max(d, 0) }
}

// WithMaxInFlight bounds the batches sent and not yet acknowledged,
// pipelined on the client's connection (default 4).
func WithMaxInFlight(n int) ProducerOption {
	return func(o *producerOptions) { o.maxInFlight = max(n, 1) }
}

// WithMaxBuffered bounds the messages and bytes held by the Producer, from
// Send to acknowledgement (default 100,000 messages and 64 MiB).
func WithMaxBuffered(msgs, bytes int) ProducerOption {
	return func(o *producerOptions) { o.maxMsgs, o.maxBytes = max(msgs, 1), max(bytes, 1) }
}

// Producer batches messages sent one at a time to one topic: a batch goes
// out when it holds the batch size, when the linger time has passed since
// its first message, or on Flush. Batches are pipelined on the client's
// connection in order, so offsets follow Send order. A batch that fails
// (the server's answer, or a broken connection after it was sent) fails
// every Future in it and is not resent, since it may have been stored.
// A Producer is safe for concurrent use.
type Producer struct {
	c     *Client
	topic string
	o     producerOptions

	mu       sync.Mutex
	cur      *pbatch
	sealed   []*pbatch // waiting for the sender
	open     []*pbatch // sealed and not yet completed, oldest first
	bufMsgs  int
	bufBytes int
	room     chan struct{} // closed when room frees up
	closed   bool

	err error // set: the topic could not be found or placed (several servers); Send fails with it

	kick chan struct{} // wakes the sender
	quit chan struct{}
	sem  chan struct{} // in-flight slots
	done chan struct{} // the sender has stopped
}

type pbatch struct {
	raw     []byte
	size    int // buffer room it takes: see add
	futures []*Future
	timer   *time.Timer
	done    chan struct{}
}

// Future is the outcome of one sent message.
type Future struct {
	done   chan struct{}
	offset int64
	err    error
}

// Done is closed once the message is acknowledged or failed.
func (f *Future) Done() <-chan struct{} { return f.done }

// Wait waits for the message's offset or error.
func (f *Future) Wait(ctx context.Context) (int64, error) {
	select {
	case <-f.done:
		return f.offset, f.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// NewProducer returns a batching Producer for topic. Close it when done.
func (c *Client) NewProducer(topic string, opts ...ProducerOption) *Producer {
	if c.cl != nil {
		return c.cl.newProducer(topic, opts)
	}
	o := producerOptions{batchSize: 1000, linger: 5 * time.Millisecond, maxInFlight: 4, maxMsgs: 100000, maxBytes: 64 << 20}
	for _, f := range opts {
		f(&o)
	}
	p := &Producer{
		c: c, topic: topic, o: o,
		room: make(chan struct{}),
		kick: make(chan struct{}, 1),
		quit: make(chan struct{}),
		sem:  make(chan struct{}, o.maxInFlight),
		done: make(chan struct{}),
	}
	go p.sender()
	return p
}

// Send adds msg (copied) to the current batch, waiting for room in the
// buffer or for ctx.
func (p *Producer) Send(ctx context.Context, msg []byte) (*Future, error) {
	for {
		f, room, err := p.add(msg)
		if err != ErrBufferFull {
			return f, err
		}
		select {
		case <-room:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-p.c.done:
			return nil, ErrClosed
		}
	}
}

// TrySend is Send that fails at once with ErrBufferFull when there is no room.
func (p *Producer) TrySend(msg []byte) (*Future, error) {
	f, _, err := p.add(msg)
	return f, err
}

func (p *Producer) add(msg []byte) (*Future, chan struct{}, error) {
	if p.err != nil {
		return nil, nil, p.err
	}
	size := len(msg) + 10
	if size+protocol.BatchHeaderSize > p.c.opts.maxBatchBytes {
		return nil, nil, fmt.Errorf("%w: message of %d bytes", ErrFrameTooLarge, len(msg))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil, ErrClosed
	}
	if p.bufMsgs > 0 && (p.bufMsgs+1 > p.o.maxMsgs || p.bufBytes+size > p.o.maxBytes) {
		return nil, p.room, ErrBufferFull
	}
	if p.cur != nil && len(p.cur.raw)+size+protocol.BatchHeaderSize > p.c.opts.maxBatchBytes {
		p.sealLocked()
	}
	if p.cur == nil {
		p.cur = &pbatch{done: make(chan struct{})}
		if p.o.linger > 0 {
			b := p.cur
			b.timer = time.AfterFunc(p.o.linger, func() {
				p.mu.Lock()
				if p.cur == b {
					p.sealLocked()
				}
				p.mu.Unlock()
			})
		}
	}
	f := &Future{done: make(chan struct{})}
	p.cur.raw = protocol.AppendMessage(p.cur.raw, msg)
	p.cur.futures = append(p.cur.futures, f)
	p.cur.size += size
	p.bufMsgs++
	p.bufBytes += size
	if len(p.cur.futures) >= p.o.batchSize || p.o.linger == 0 {
		p.sealLocked()
	}
	return f, nil, nil
}

// sealLocked hands the current batch to the sender. p.mu must be held.
func (p *Producer) sealLocked() {
	b := p.cur
	if b == nil {
		return
	}
	p.cur = nil
	if b.timer != nil {
		b.timer.Stop()
	}
	p.sealed = append(p.sealed, b)
	p.open = append(p.open, b)
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// sender sends sealed batches in order, at most maxInFlight unanswered.
func (p *Producer) sender() {
	defer close(p.done)
	for {
		select {
		case <-p.kick:
		case <-p.quit:
			return
		}
		p.mu.Lock()
		batches := p.sealed
		p.sealed = nil
		p.mu.Unlock()
		for _, b := range batches {
			select {
			case p.sem <- struct{}{}:
			case <-p.c.done:
				p.complete(b, false, 0, ErrClosed)
				continue
			}
			p.send(b)
		}
	}
}

// send writes one batch and leaves its answer to a goroutine.
func (p *Producer) send(b *pbatch) {
	count := len(b.futures)
	batch := protocol.AppendBatchRaw(nil, p.c.opts.codec, count, b.raw)
	var flags protocol.ProduceFlags
	if p.c.opts.autoCreate {
		flags = protocol.ProduceCreateTopic
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.c.opts.requestTimeout)
	// A batch that cannot have reached the server (no connection, or
	// refused before it was written) is sent again, with a doubling
	// backoff, until the request timeout: like Produce, never twice.
	var cn *conn
	var id uint32
	var ch chan response
	bo := p.c.newBackoff(producerBackoffMax)
	for {
		var err error
		if cn, err = p.c.connect(ctx, &p.c.main); err == nil {
			id, ch, err = cn.send(deadlineOf(ctx), func(dst []byte, corrID uint32) []byte {
				return protocol.AppendProduceRequest(dst, corrID, p.topic, flags, batch)
			})
		}
		if err == nil {
			break
		}
		if !errors.Is(err, ErrConnection) || ctx.Err() != nil {
			cancel()
			p.complete(b, true, 0, err)
			return
		}
		if err := bo.wait(ctx); errors.Is(err, ErrClosed) {
			cancel()
			p.complete(b, true, 0, ErrClosed)
			return
		} // ctx's end is seen by the next attempt
	}
	p.c.stats.msgsSent.Add(int64(count))
	p.c.stats.bytesSent.Add(int64(len(batch)))
	p.c.stats.inFlight.Add(1)
	go func() {
		defer cancel()
		defer p.c.stats.inFlight.Add(-1)
		var resp response
		select {
		case resp = <-ch:
		case <-ctx.Done():
			cn.forget(id)
			resp.err = ctx.Err()
		}
		base, err := int64(0), resp.err
		if err == nil && resp.hdr.Code != protocol.CodeOK {
			err = serverError(protocol.OpProduce, resp)
		}
		if err == nil {
			var r protocol.ProduceResponse
			if r, err = protocol.ParseProduceResponse(resp.payload); err == nil {
				base = r.BaseOffset
				p.c.stats.msgsAcked.Add(int64(count))
				p.c.stats.bytesAcked.Add(int64(len(batch)))
			}
		}
		if err != nil {
			p.c.stats.errors.Add(1)
		}
		p.complete(b, true, base, err)
	}()
}

// complete resolves a batch's futures and frees its room and, if it held
// one, its in-flight slot.
func (p *Producer) complete(b *pbatch, slot bool, base int64, err error) {
	for i, f := range b.futures {
		f.offset, f.err = base+int64(i), err
		close(f.done)
	}
	close(b.done)
	p.mu.Lock()
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

// Flush sends the current batch now and waits until every message sent
// before it is acknowledged or failed.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	p.sealLocked()
	open := append([]*pbatch(nil), p.open...)
	p.mu.Unlock()
	for _, b := range open {
		select {
		case <-b.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Close flushes, waits for every message to be acknowledged or failed and
// stops the Producer. Sends after Close fail with ErrClosed.
func (p *Producer) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.Flush(context.Background())
	close(p.quit)
	<-p.done
	return err
}

func deadlineOf(ctx context.Context) time.Time {
	dl, _ := ctx.Deadline()
	return dl
}
