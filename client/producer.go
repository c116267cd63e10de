package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
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
// (default 5ms). With 0 every Send sends its message at once: the caller
// writes it itself when no batch waits before it and an in-flight slot is
// free (without waiting on the socket), else it goes as soon as a slot
// frees up, batched with those sent meanwhile.
func WithLinger(d time.Duration) ProducerOption {
	return func(o *producerOptions) { o.linger = max(d, 0) }
}

// WithMaxInFlight bounds the batches sent and not yet acknowledged,
// pipelined on the client's connection (default 4). With idempotence keep
// it within the 64 sequences a server remembers per producer, so that a
// batch sent again is always told from one stored.
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
// connection in order, so offsets follow Send order.
//
// With idempotence on (the client's default, WithIdempotence) each
// Producer has a producer id of its own and numbers its batches; a batch
// whose connection broke, sent or not, is sent again on a new connection
// until the request timeout, in order with the batches after it, and a
// server that had stored it answers with its first offset: every message
// is stored once and offsets still follow Send order. Across a failover
// of a replicated topic too: every batch asks the server for strict
// sequence order, so a batch that reaches the new leader before an
// earlier one refused by the old leader (not leader) is refused as out
// of order, and both are sent again, the earlier first. The same goes for
// a batch whose outcome is unknown (ErrOutcomeUnknown: written, but the
// lead changed before it was committed), and for the batches in flight
// on a leader that does not answer (frozen): on a Client of several
// servers, once the oldest has had no answer within WithAttemptTimeout
// and the other servers name another leader, all of them are abandoned
// there and sent to the new one. A batch that fails for good leaves a
// gap in the sequences, so the batches after it go out under a fresh
// producer id. Without idempotence, a batch that fails after it was sent
// (a broken connection, ErrOutcomeUnknown, abandoned on a leader that
// does not answer) fails every Future in it and is not resent, since it
// may have been stored; one refused as not leader is sent to the new
// leader, but a later batch may be stored before it. A batch the server
// refuses otherwise fails its Futures either way. A Producer is safe for
// concurrent use.
type Producer struct {
	// cp is the Client of the server the batches go to: over several
	// servers, a replicated topic's Producer follows its leader (follow).
	cp     atomic.Pointer[Client]
	topic  string
	o      producerOptions
	idem   bool   // idempotence on: batches carry a producer id and a sequence
	server string // over several servers: the topic's, named in errors

	mu  sync.Mutex
	cur *pbatch
	// pid is the producer id batches go out under (idem). A batch that
	// fails for good leaves its sequence unstored, a gap that a strict
	// server would refuse every later batch for; so the batches after it
	// go out under a fresh id (renewLocked), which the server takes from
	// any sequence on.
	pid uint64
	// confirmed: a batch under pid was acknowledged. Until then batches go
	// out one at a time: a server takes any first sequence of a producer
	// it does not know, so a second batch pipelined behind a first that is
	// refused could be stored before it.
	confirmed bool
	nextSeq   uint64    // the sequence of the next batch sealed
	sealed    []*pbatch // waiting for the sender, ascending sequence (resends go back here)
	flying    []*pbatch // sent, not yet answered
	open      []*pbatch // sealed and not yet completed, oldest first
	bufMsgs   int
	bufBytes  int
	// lastCount is the last batch sealed's message count, the next's
	// room for futures.
	lastCount int
	room      chan struct{} // closed when room frees up
	closed    bool
	sending   bool // a goroutine sends sealed batches: the sender, or a Send caller (sendNow)

	err error // set: the topic could not be found or placed (several servers); Send fails with it

	kick chan struct{} // wakes the sender
	// spare holds the buffers of batches answered (or, compressed,
	// encoded) since, for the next batches to gather in (newBatchLocked):
	// a batch of 1,000 1 KiB messages grown from empty copied itself
	// about once more and left a megabyte of garbage, a third of a
	// closed loop's CPU. An uncompressed batch is sealed in the buffer it
	// gathered in (encode).
	spare chan []byte
	quit  chan struct{}
	sem   chan struct{} // in-flight slots
	done  chan struct{} // the sender has stopped

	// attempt is the Client's attempt timeout on a Client of several
	// servers, 0 otherwise: batches in flight longer are watched (watch).
	attempt time.Duration
	flew    chan struct{} // a batch flew: wakes the watcher
	flights uint64        // guarded by mu: batches flown (attempt > 0)
	watched chan struct{} // the watcher has stopped
}

type pbatch struct {
	raw     []byte // hdr bytes of room for the batch header, then the messages
	hdr     int
	size    int // buffer room it takes: see add
	futures []*Future
	timer   *time.Timer
	done    chan struct{}
	headers bool // its messages carry header sections

	// Set when sealed, or by the sender.
	seq      uint64
	batch    []byte        // the encoded batch, made at its first send
	pid      uint64        // the producer id batch carries (idem)
	reseal   bool          // refused out of order under a pid given up since: not stored, sent again under the current one
	deadline time.Time     // its first send plus the request timeout
	sends    int           // times it was handed to a connection
	moved    bool          // put back to follow the topic's leader to another server: sent again at once
	cn       *conn         // the connection it is in flight on
	srv      *Client       // the server of cn
	answered chan struct{} // closed when its answer (or failure) is handled

	// Set by fly when the Producer watches its batches (attempt > 0).
	flown   time.Time     // when it was handed to cn
	abandon chan struct{} // closed when its server is abandoned (watch), with abandonErr set
	// abandonErr is the error it fails with once abandoned (code 30,
	// naming the new leader); set under p.mu before abandon is closed.
	abandonErr error
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
		topic: topic, o: o,
		room: make(chan struct{}),
		kick: make(chan struct{}, 1),
		quit: make(chan struct{}),
		sem:  make(chan struct{}, o.maxInFlight), spare: make(chan []byte, 2),
		done: make(chan struct{}),
	}
	p.cp.Store(c)
	if c.opts.idempotent {
		p.idem, p.pid = true, randomProducerID()
	}
	go p.sender()
	if d := c.opts.attemptTimeout; c.k != nil && c.reroute != nil && d > 0 {
		p.attempt, p.flew, p.watched = d, make(chan struct{}, 1), make(chan struct{})
		go p.watch()
	}
	return p
}

// cl is the Client of the server the batches go to now.
func (p *Producer) cl() *Client { return p.cp.Load() }

// follow, after a batch failed with err on server from of a Client of
// several, moves the Producer to the topic's leader when err says the
// server does not lead it or, for an idempotent Producer (whose batches
// a server answers once), could not be reached, is stopping, or lost the
// lead with the batch's outcome unknown (code 30, or no answer within
// the attempt timeout: watch); it reports whether it moved, or had moved
// off from already (another batch's answer, or the watcher). The batch
// is then sent again, as it was built: same producer id and sequence.
func (p *Producer) follow(ctx context.Context, from *Client, err error) bool {
	if from.reroute == nil || !(errors.Is(err, ErrNotLeader) ||
		(p.idem && (errors.Is(err, ErrConnection) || errors.Is(err, ErrShuttingDown) || errors.Is(err, ErrOutcomeUnknown)))) {
		return false
	}
	if p.cl() != from {
		return true
	}
	for {
		// reroute pauses between tries and gives up after its budget.
		s, rerr := from.reroute(ctx, p.topic, from, err)
		if rerr != nil || s == nil {
			return false
		}
		if s != from {
			return p.cp.CompareAndSwap(from, s) || p.cl() != from
		}
	}
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
		case <-p.cl().done:
			return nil, ErrClosed
		}
	}
}

// TrySend is Send that fails at once with ErrBufferFull when there is no room.
func (p *Producer) TrySend(msg []byte) (*Future, error) {
	f, _, err := p.add(msg)
	return f, err
}

// SendMessage is Send for a message with headers: m's Value and Headers
// are sent (copied). Messages with headers and without go in batches of
// their own, so a switch between the two seals the current batch.
func (p *Producer) SendMessage(ctx context.Context, m Message) (*Future, error) {
	if len(m.Headers) == 0 {
		return p.Send(ctx, m.Value)
	}
	if err := checkHeaders(m.Headers); err != nil {
		return nil, err
	}
	enc := protocol.AppendHeaders(nil, toProtocolHeaders(nil, m.Headers), m.Value)
	for {
		f, room, err := p.addEncoded(enc, true)
		if err != ErrBufferFull {
			return f, err
		}
		select {
		case <-room:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-p.cl().done:
			return nil, ErrClosed
		}
	}
}

func (p *Producer) add(msg []byte) (*Future, chan struct{}, error) {
	return p.addEncoded(msg, false)
}

// addEncoded adds msg, a message's bytes (with its header section when
// headers is set), to the current batch, and sends the batch itself when
// addBatch says so.
func (p *Producer) addEncoded(msg []byte, headers bool) (*Future, chan struct{}, error) {
	f, room, now, err := p.addBatch(msg, headers)
	if now != nil {
		p.sendNow(now)
	}
	return f, room, err
}

// addBatch is addEncoded but for the send: with no linger, it returns the
// batch sealed for the caller to send (takeLocked), or nil.
func (p *Producer) addBatch(msg []byte, headers bool) (*Future, chan struct{}, *pbatch, error) {
	if p.err != nil {
		return nil, nil, nil, p.err
	}
	size := len(msg) + 10
	if size+protocol.BatchHeaderSize > p.cl().opts.maxBatchBytes {
		return nil, nil, nil, fmt.Errorf("%w: message of %d bytes", ErrFrameTooLarge, len(msg))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil, nil, ErrClosed
	}
	if p.bufMsgs > 0 && (p.bufMsgs+1 > p.o.maxMsgs || p.bufBytes+size > p.o.maxBytes) {
		return nil, p.room, nil, ErrBufferFull
	}
	if p.cur != nil && (len(p.cur.raw)-p.cur.hdr+size+protocol.BatchHeaderSize > p.cl().opts.maxBatchBytes || p.cur.headers != headers) {
		p.sealLocked()
	}
	if p.cur == nil {
		p.cur = p.newBatchLocked(headers)
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
	if p.o.linger == 0 {
		if b := p.takeLocked(); b != nil {
			return f, nil, b, nil
		}
		// Every slot is busy, or batches wait: the message gathers in the
		// current batch, which the sender seals once it has a slot for it.
		if len(p.cur.futures) >= p.o.batchSize {
			p.sealLocked()
		} else {
			p.kickLocked()
		}
		return f, nil, nil, nil
	}
	if len(p.cur.futures) >= p.o.batchSize {
		p.sealLocked()
	}
	return f, nil, nil, nil
}

// kickLocked wakes the sender. p.mu must be held.
func (p *Producer) kickLocked() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// takeLocked seals the current batch for the caller to send itself
// (sendNow) when no batch waits to go before it, no goroutine is sending
// and an in-flight slot is free; else it returns nil. p.mu must be held.
func (p *Producer) takeLocked() *pbatch {
	if p.sending || len(p.sealed) > 0 {
		return nil
	}
	select {
	case p.sem <- struct{}{}:
	default:
		return nil
	}
	b := p.cur
	p.cur = nil
	b.seq = p.nextSeq
	p.nextSeq++
	p.open = append(p.open, b)
	p.sending = true
	return b
}

// sendNow sends b, taken by takeLocked, from the Send caller's goroutine:
// with no linger a message goes out at once, without waking the sender
// goroutine to write it (a wake-up of another thread, tens of
// microseconds on a busy machine, on every message's way). Only on a
// connection that is up, direct (conn.post: the caller writes only
// what the socket takes at once) and has nothing of this Producer's in
// flight on a broken one: else, or if the request cannot be queued, b goes
// to the sender, which dials, waits and tries again as for any batch. Send
// never waits for a dial, a backoff or the socket.
func (p *Producer) sendNow(b *pbatch) {
	defer p.endSending()
	c := p.cl()
	cn := c.liveConn(&c.main)
	if cn == nil || cn.sock == nil {
		p.handBack(b)
		return
	}
	p.encode(b)
	if p.idem && !p.mayPipeline(b, cn) {
		p.handBack(b)
		return
	}
	if !p.fly(b, c, cn) {
		p.handBack(b)
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), b.deadline)
	id, ch, err := cn.post(deadlineOf(ctx), p.request(b), nil)
	if err != nil {
		cancel()
		p.land(b)
		p.handBack(b)
		return
	}
	p.inFlight(ctx, cancel, b, cn, id, ch)
}

// mayPipeline reports whether b may go out on cn at once, behind what is
// in flight: no batch before it waits to be sent again, and every batch
// in flight is on cn, under b's producer id, which the server has
// acknowledged a batch of (staleLocked).
func (p *Producer) mayPipeline(b *pbatch, cn *conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.sealed) > 0 && p.sealed[0].seq < b.seq {
		return false
	}
	for _, x := range p.flying {
		if p.staleLocked(x, b, cn) {
			return false
		}
	}
	return true
}

// staleLocked reports whether b, about to go out on cn, must wait for
// the answer to x, in flight: x is on another connection (an earlier,
// broken one: it may be put back, to go first), or under another producer
// id than b (the server orders no two producers' batches), or b's id has
// no batch acknowledged yet (a server takes any first sequence of a
// producer it does not know), or b is sent again and x precedes it (b was
// refused, maybe for want of x: it follows x's outcome rather than be
// refused again). p.mu must be held.
func (p *Producer) staleLocked(x, b *pbatch, cn *conn) bool {
	return x.cn != cn || x.pid != b.pid || !p.confirmed || (b.sends > 0 && x.seq < b.seq)
}

// handBack puts b, taken for sendNow and not sent, among the sealed
// batches in sequence order, for the sender, and frees its slot.
func (p *Producer) handBack(b *pbatch) {
	p.mu.Lock()
	p.unsealLocked(b)
	p.mu.Unlock()
	<-p.sem
}

// unsealLocked puts b back among the sealed batches, in sequence order.
// p.mu must be held.
func (p *Producer) unsealLocked(b *pbatch) {
	i, _ := slices.BinarySearchFunc(p.sealed, b.seq, func(x *pbatch, seq uint64) int { return cmp.Compare(x.seq, seq) })
	p.sealed = slices.Insert(p.sealed, i, b)
}

// endSending ends a Send caller's turn at sending and wakes the sender if
// batches were sealed meanwhile, or, with no linger, messages gathered in
// the current batch (the sender, woken for them, left them to the caller).
func (p *Producer) endSending() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sending = false
	if len(p.sealed) > 0 || (p.o.linger == 0 && p.cur != nil) {
		p.kickLocked()
	}
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
	b.seq = p.nextSeq
	p.nextSeq++
	p.lastCount = len(b.futures)
	p.sealed = append(p.sealed, b)
	p.open = append(p.open, b)
	p.kickLocked()
}

// sender sends sealed batches in order, at most maxInFlight unanswered.
// With no linger it also sends the current batch, sealed once it has a
// slot for it: while every slot is busy, single sends gather into it.
func (p *Producer) sender() {
	defer close(p.done)
	for {
		select {
		case <-p.kick:
		case <-p.quit:
			return
		}
		for {
			p.mu.Lock()
			if p.sending || (len(p.sealed) == 0 && (p.o.linger > 0 || p.cur == nil)) {
				// A Send caller sending wakes the sender when it is done.
				p.mu.Unlock()
				break
			}
			p.sending = true
			p.mu.Unlock()
			slot := true
			select {
			case p.sem <- struct{}{}:
			case <-p.cl().done:
				slot = false
			}
			p.mu.Lock()
			if len(p.sealed) == 0 && p.o.linger == 0 && p.cur != nil {
				p.sealLocked()
			}
			var b *pbatch
			if len(p.sealed) > 0 {
				b = p.sealed[0]
				p.sealed = slices.Delete(p.sealed, 0, 1)
			}
			p.mu.Unlock()
			switch {
			case b == nil:
				if slot {
					<-p.sem
				}
			case !slot:
				p.complete(b, false, 0, ErrClosed)
			default:
				p.send(b)
			}
			p.mu.Lock()
			p.sending = false
			p.mu.Unlock()
		}
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
	if p.watched != nil {
		<-p.watched
	}
	return err
}

func deadlineOf(ctx context.Context) time.Time {
	dl, _ := ctx.Deadline()
	return dl
}
