package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/haraqa/haraqa/protocol"
)

// Produce sends msgs to topic as one batch in one round trip and returns
// the offset of the first; the others follow in order. With auto-create on
// (the default) a missing topic is created.
//
// With idempotence on (the default, WithIdempotence), a produce that
// failed on a broken connection is sent again on a new one (WithRetries),
// even if it may have reached the server: the batch carries the client's
// producer id and a sequence number, and a server that stored it answers
// the resend with the offset it gave it then, storing nothing. Without
// idempotence a produce that fails after it was sent is not retried (it
// may have been stored): the error says ErrConnection and the caller
// decides. See the package doc for what a retry can still duplicate.
func (c *Client) Produce(ctx context.Context, topic string, msgs ...[]byte) (int64, error) {
	return c.produceMsgs(ctx, topic, -1, msgs)
}

// produceMsgs is Produce, and with expect >= 0 ProduceExpect.
func (c *Client) produceMsgs(ctx context.Context, topic string, expect int64, msgs [][]byte) (int64, error) {
	if c.cl != nil {
		var base int64
		err := c.cl.onTopicRepeat(ctx, topic, c.opts.autoCreate, false, func(s *Client) (err error) { base, err = s.produceMsgs(ctx, topic, expect, msgs); return err })
		return base, err
	}
	if len(msgs) == 0 {
		return 0, fmt.Errorf("%w: no messages", ErrBadBatch)
	}
	if len(msgs) > protocol.MaxBatchMessages {
		return 0, fmt.Errorf("%w: %d messages, at most %d in one batch (protocol.MaxBatchMessages)", ErrBadBatch, len(msgs), protocol.MaxBatchMessages)
	}
	// size is the batch's uncompressed: a compressed one is checked once
	// compressed (produceRaw).
	size := c.batchHeaderSize(false) + protocol.MessagesSize(msgs...)
	if c.opts.codec == protocol.CodecNone && size > c.opts.maxBatchBytes {
		return 0, fmt.Errorf("%w: a batch of %d bytes, over the client's limit of %d (WithMaxBatchBytes, to match the server's -max-frame): produce fewer or smaller messages at a time", ErrFrameTooLarge, size, c.opts.maxBatchBytes)
	}
	if expect < 0 {
		return c.produceCombined(ctx, topic, msgs, size)
	}
	return c.produceAlone(ctx, topic, expect, msgs, size)
}

// produceAlone sends msgs, a batch of size bytes uncompressed, as a batch
// of their own. Uncompressed, the batch is encoded straight into the
// request frame: one copy of the messages, no intermediate batch.
func (c *Client) produceAlone(ctx context.Context, topic string, expect int64, msgs [][]byte, size int) (int64, error) {
	if c.opts.codec == protocol.CodecNone {
		return c.produce(ctx, topic, len(msgs), size, false, expect, func(dst []byte, meta protocol.BatchMeta) []byte {
			return protocol.AppendBatchMeta(dst, meta, msgs...)
		})
	}
	raw := make([]byte, 0, size-c.batchHeaderSize(false))
	for _, m := range msgs {
		raw = protocol.AppendMessage(raw, m)
	}
	return c.produceRaw(ctx, topic, false, expect, len(msgs), raw)
}

// ProduceExpect is Produce that appends msgs only if the topic's next
// offset is next when the server commits them, and else fails with
// ErrOffsetMismatch, storing nothing: optimistic concurrency (NATS's
// Expected-Last-Sequence) for writers that read the topic's end
// (TopicInfo) and must not interleave with another. A missing topic is
// created when next is 0. With idempotence, a resend of a batch that was
// stored is answered with its offset, not a mismatch.
func (c *Client) ProduceExpect(ctx context.Context, topic string, next int64, msgs ...[]byte) (int64, error) {
	if next < 0 {
		return 0, fmt.Errorf("%w: expected offset %d is negative", ErrInvalidArgument, next)
	}
	return c.produceMsgs(ctx, topic, next, msgs)
}

// ProduceMessages is Produce for messages with headers: each message's
// Value and Headers are sent (Offset and Time are the server's to set).
// A batch in which no message has headers is sent as Produce sends it.
func (c *Client) ProduceMessages(ctx context.Context, topic string, msgs ...Message) (int64, error) {
	if c.cl != nil {
		var base int64
		err := c.cl.onTopicRepeat(ctx, topic, c.opts.autoCreate, false, func(s *Client) (err error) { base, err = s.ProduceMessages(ctx, topic, msgs...); return err })
		return base, err
	}
	if len(msgs) == 0 {
		return 0, fmt.Errorf("%w: no messages", ErrBadBatch)
	}
	if len(msgs) > protocol.MaxBatchMessages {
		return 0, fmt.Errorf("%w: %d messages, at most %d in one batch (protocol.MaxBatchMessages)", ErrBadBatch, len(msgs), protocol.MaxBatchMessages)
	}
	headers := false
	for _, m := range msgs {
		if err := checkHeaders(m.Headers); err != nil {
			return 0, err
		}
		headers = headers || len(m.Headers) > 0
	}
	if !headers { // as Produce sends them, combined under load
		values := make([][]byte, len(msgs))
		for i, m := range msgs {
			values[i] = m.Value
		}
		return c.produceMsgs(ctx, topic, -1, values)
	}
	var raw []byte
	var ph []protocol.Header
	for _, m := range msgs {
		ph = toProtocolHeaders(ph[:0], m.Headers)
		raw = protocol.AppendHeaderMessage(raw, ph, m.Value)
	}
	return c.produceRaw(ctx, topic, true, -1, len(msgs), raw)
}

// produceRaw produces the batch of n messages whose uncompressed body is
// raw, compressed with the client's codec (once: a retry seals the same
// body again).
func (c *Client) produceRaw(ctx context.Context, topic string, headers bool, expect int64, n int, raw []byte) (int64, error) {
	body := protocol.CompressBody(c.opts.codec, raw)
	size := c.batchHeaderSize(headers) + len(body)
	if size > c.opts.maxBatchBytes {
		return 0, fmt.Errorf("%w: a batch of %d bytes, over the client's limit of %d (WithMaxBatchBytes, to match the server's -max-frame): produce fewer or smaller messages at a time", ErrFrameTooLarge, size, c.opts.maxBatchBytes)
	}
	return c.produce(ctx, topic, n, size, headers, expect, func(dst []byte, meta protocol.BatchMeta) []byte {
		return protocol.AppendBatchBodyMeta(dst, meta, c.opts.codec, n, len(raw), body)
	})
}

// batchHeaderSize is the header size of the client's batches.
func (c *Client) batchHeaderSize(headers bool) int {
	return protocol.BatchMeta{ProducerID: c.producerID(), Headers: headers}.HeaderSize()
}

// producerID is a stand-in for the Client's producer id, which only its
// being 0 or not matters to: the header's size.
func (c *Client) producerID() uint64 {
	if c.producer == nil {
		return 0
	}
	return 1
}

// checkHeaders checks hs against the protocol's limits.
func checkHeaders(hs []Header) error {
	if len(hs) > protocol.MaxHeaders {
		return fmt.Errorf("%w: %d headers, at most %d", ErrInvalidArgument, len(hs), protocol.MaxHeaders)
	}
	for _, h := range hs {
		if len(h.Key) == 0 || len(h.Key) > protocol.MaxHeaderKeyLen {
			return fmt.Errorf("%w: header key of %d bytes, must be 1 to %d", ErrInvalidArgument, len(h.Key), protocol.MaxHeaderKeyLen)
		}
		if len(h.Value) > protocol.MaxHeaderValueLen {
			return fmt.Errorf("%w: header %q: value of %d bytes, at most %d", ErrInvalidArgument, h.Key, len(h.Value), protocol.MaxHeaderValueLen)
		}
	}
	return nil
}

func toProtocolHeaders(dst []protocol.Header, hs []Header) []protocol.Header {
	for _, h := range hs {
		dst = append(dst, protocol.Header{Key: []byte(h.Key), Value: h.Value})
	}
	return dst
}

// produce sends one produce request whose batch, size bytes of count
// messages, appendBatch appends with the meta given. With idempotence the
// batch's sequence is taken when its frame is first queued on a
// connection, under the connection's write lock, so that a connection
// carries a topic's batches in sequence order however many goroutines
// produce; a retry sends the same sequence, and is made whether or not
// the first attempt was sent.
//
// A batch refused because the server forgot the producer to make room for
// others (ErrUnknownProducer), or because another token holds its id on
// the topic (ErrProducerFenced: taken after the server forgot it), is sent
// once more under a fresh producer id when it was built only once, so
// never sent before: the server stored nothing of it. Otherwise the error
// is returned, for the batch may have been stored by an earlier attempt;
// the Client takes a fresh producer id either way, so that its next
// batches are not refused.
func (c *Client) produce(ctx context.Context, topic string, count, size int, headers bool, expect int64, appendBatch func(dst []byte, meta protocol.BatchMeta) []byte) (int64, error) {
	base, pid, builds, err := c.produceOnce(ctx, topic, count, size, headers, expect, appendBatch)
	if err != nil && pid != 0 && (errors.Is(err, ErrUnknownProducer) || errors.Is(err, ErrProducerFenced)) {
		c.producer.renew(pid)
		if builds == 1 {
			base, _, _, err = c.produceOnce(ctx, topic, count, size, headers, expect, appendBatch)
		}
	}
	return base, err
}

// produceOnce is one produce of produce: its outcome, the producer id the
// batch was sent under and how many times its frame was built.
func (c *Client) produceOnce(ctx context.Context, topic string, count, size int, headers bool, expect int64, appendBatch func(dst []byte, meta protocol.BatchMeta) []byte) (base int64, pid uint64, builds int32, err error) {
	var built atomic.Int32
	defer func() { builds = built.Load() }()
	meta := protocol.BatchMeta{Headers: headers}
	assigned := c.producer == nil
	var flags protocol.ProduceFlags
	if c.opts.autoCreate && expect <= 0 {
		flags = protocol.ProduceCreateTopic
	}
	if c.opts.acksLeader {
		flags |= protocol.ProduceAcksLeader
	}
	if expect >= 0 {
		flags |= protocol.ProduceExpectOffset
	}
	if c.producer != nil {
		if err := c.producer.admit(ctx, topic); err != nil {
			return 0, 0, 0, err
		}
		defer func() { c.producer.release(topic, meta.ProducerID, meta.Sequence, assigned) }()
	}
	c.stats.msgsSent.Add(int64(count))
	c.stats.bytesSent.Add(int64(size))
	c.stats.inFlight.Add(1)
	defer c.stats.inFlight.Add(-1)
	build := func(dst []byte, id uint32) []byte {
		built.Add(1)
		if !assigned {
			meta.ProducerID, meta.Sequence = c.producer.next(topic)
			pid = meta.ProducerID
			assigned = true
		}
		dst = slices.Grow(dst, protocol.HeaderSize+16+len(topic)+size)
		dst = protocol.AppendProduceRequestHeaderExpect(dst, id, topic, flags, expect, size)
		return appendBatch(dst, meta)
	}
	p, err := c.produceOn(ctx, topic, build)
	// On a Client of several servers, a replicated topic's produce goes
	// on to its leader: the same batch, same producer id and sequence, so
	// that one stored before the failover is answered with its offset.
	for s := c; s.reroute != nil && s.mayReroute(err, built.Load()); {
		if s, err = s.reroute(ctx, topic, s, err); s == nil {
			break
		}
		p, err = s.produceOn(ctx, topic, build)
		if err == nil {
			_, _ = s.reroute(ctx, topic, s, nil) // through: the budget starts afresh
		}
	}
	if err != nil {
		if errors.Is(err, ErrOutcomeUnknown) {
			err = fmt.Errorf("client: produce to topic %q: sending the batch again may store it twice: %w", topic, err)
		}
		return 0, pid, 0, err
	}
	r, err := protocol.ParseProduceResponse(p)
	if err != nil {
		return 0, pid, 0, err
	}
	if int(r.Count) != count {
		return 0, pid, 0, errors.New("client: the server acknowledged another message count")
	}
	c.stats.msgsAcked.Add(int64(count))
	c.stats.bytesAcked.Add(int64(size))
	return r.BaseOffset, pid, 0, nil
}

// producerSeq is an idempotent producer: a random id and, per topic, the
// next sequence and the sequences sent and not yet answered.
//
// The server remembers a producer's last seqSpan sequences on a topic; a
// retry of one below them cannot be told from a batch stored long ago and
// is refused (ErrOutOfOrderSequence). Goroutines producing on one Client
// each wait for their own answer, so one of them retrying after a cut
// could fall that far behind while the others go on. So a produce takes
// its turn first (admit): it waits while its sequence would be seqSpan
// or more above the lowest one still unanswered.
type producerSeq struct {
	id uint64

	mu      sync.Mutex
	topics  map[string]*topicSeqs // guarded by mu
	changed chan struct{}         // guarded by mu: closed, and replaced, when a topic gains room with waiting > 0
	waiting int                   // guarded by mu: admits waiting on changed
}

// topicSeqs is a producer's sequences on one topic. Every sequence taken
// and unanswered is in [lo, next), and next+admitted-lo is at most
// seqSpan, so one bit each of open holds them.
type topicSeqs struct {
	next     uint64 // the next sequence to take
	lo       uint64 // the lowest taken and unanswered; next when none is
	open     uint64 // bit i: sequence lo+i is taken and unanswered
	admitted uint64 // produces admitted that have not taken a sequence yet
}

// seqSpan is how far above the lowest unanswered sequence of a topic a
// new one may be: the server's window of remembered sequences (64), and
// the bits of topicSeqs.open.
const seqSpan = 64

// newProducerSeq returns a producer with a fresh random non-zero id.
func newProducerSeq() *producerSeq {
	return &producerSeq{id: randomProducerID(), topics: make(map[string]*topicSeqs), changed: make(chan struct{})}
}

// topic returns topic's sequences, created at 0. p.mu must be held.
func (p *producerSeq) topic(topic string) *topicSeqs {
	ts := p.topics[topic]
	if ts == nil {
		ts = new(topicSeqs)
		p.topics[topic] = ts
	}
	return ts
}

// admit waits until a produce to topic may take a sequence: until the
// sequences taken and admitted above the lowest unanswered one are fewer
// than seqSpan, or ctx ends.
func (p *producerSeq) admit(ctx context.Context, topic string) error {
	for {
		p.mu.Lock()
		ts := p.topic(topic)
		if ts.next+ts.admitted-ts.lo < seqSpan {
			ts.admitted++
			p.mu.Unlock()
			return nil
		}
		changed := p.changed
		p.waiting++
		p.mu.Unlock()
		select {
		case <-changed:
			p.mu.Lock()
			p.waiting--
			p.mu.Unlock()
		case <-ctx.Done():
			p.mu.Lock()
			p.waiting--
			p.mu.Unlock()
			return fmt.Errorf("%w: waiting for an earlier produce's answer: %w", ErrConnection, ctx.Err())
		}
	}
}

// release ends what admit began: the sequence seq taken under id (taken),
// or the admission alone (a produce that never took one). Waiting admits
// look again only when the topic gained room: its lowest unanswered
// sequence was answered, or an admission ended.
func (p *producerSeq) release(topic string, id, seq uint64, taken bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ts := p.topic(topic)
	switch {
	case !taken:
		ts.admitted--
	case id != p.id || seq < ts.lo || seq-ts.lo >= seqSpan:
		return // the old id's, renewed since
	default:
		ts.open &^= 1 << (seq - ts.lo)
		if seq != ts.lo {
			return
		}
		if ts.open == 0 {
			ts.lo = ts.next
		} else {
			k := bits.TrailingZeros64(ts.open)
			ts.lo += uint64(k)
			ts.open >>= k
		}
	}
	p.wake()
}

// wake lets the waiting admits look again. p.mu is held.
func (p *producerSeq) wake() {
	if p.waiting > 0 {
		close(p.changed)
		p.changed = make(chan struct{})
	}
}

func randomProducerID() uint64 {
	var b [8]byte
	var id uint64
	for id == 0 {
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		id = binary.LittleEndian.Uint64(b[:])
	}
	return id
}

// next returns the producer's id and the sequence of its next batch to
// topic, for a produce admit let through.
func (p *producerSeq) next(topic string) (id, seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ts := p.topic(topic)
	s := ts.next
	ts.next++
	ts.admitted--
	ts.open |= 1 << (s - ts.lo)
	return p.id, s
}

// renew gives the producer a fresh id, its sequences starting again at 0
// on every topic, unless its id is no longer old (renewed already). The
// old id's unanswered sequences no longer hold anyone back; admissions
// not yet taken stay counted.
func (p *producerSeq) renew(old uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.id == old {
		p.id = randomProducerID()
		for _, ts := range p.topics {
			ts.next, ts.lo, ts.open = 0, 0, 0
		}
		p.wake()
	}
}

// mayReroute reports whether a produce that failed with err, its frame
// built builds times, may be sent to another server: a server that is not
// the leader stored nothing; a server that could not be reached may have
// stored it only if it was sent (errNotSent says it was not), and a
// leader that lost the lead before the batch was committed (outcome
// unknown) did, both of which an idempotent producer's id and sequence
// make harmless.
func (c *Client) mayReroute(err error, builds int32) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrNotLeader):
		return true
	case errors.Is(err, ErrOutcomeUnknown):
		return c.producer != nil
	case errors.Is(err, ErrConnection):
		return c.producer != nil || builds == 0 || errors.Is(err, errNotSent)
	case errors.Is(err, ErrShuttingDown):
		return c.producer != nil // a stopping server may have stored it, waiting for its followers
	}
	return false
}
