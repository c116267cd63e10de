package client

import (
	"context"
	"sync"

	"github.com/haraqa/haraqa/protocol"
)

// Produce calls to one topic from many goroutines of one Client combine
// under load, as a Kafka producer's records do: while combineSlots of the
// topic's produce requests are unanswered, the calls that come meanwhile
// gather into one batch, sent when one of those is answered. A lone call,
// or a few at once, goes out at once and alone; past combineSlots, one
// request, one batch check, one write on the server and one fsync carry
// what many goroutines sent, instead of one round of each per goroutine.
//
// Each call's messages stay together and in order in the batch, so each
// still gets consecutive offsets from its own first. The combined batch
// succeeds or fails as one: every call in it gets its error. It is sent
// under the client's request timeout, not a caller's context: a caller
// whose context ends while its messages wait in a batch returns at once
// with the context's error, and its messages are sent with the others,
// as a request already written would be.

// combineSlots is how many produce requests of one topic a Client has
// unanswered before further Produce calls to the topic combine. Measured
// with 4 to 64 goroutines producing 100 B one at a time on one Client, with
// and without fsync (docs/benchmarks.md, "Produce calls combined"): with
// 2, a combined batch waits for an answer that 4 goroutines under fsync
// always would not have waited for (a third less); 8 leaves many
// goroutines without fsync smaller batches and a third less.
const combineSlots = 4

// combineMaxBytes: a call whose messages encode to more goes alone,
// uncounted: its batch is big enough by itself, and copying it into a
// combined one would cost more than the round trip it saves.
const combineMaxBytes = 64 << 10 // a batch's size, its header included

// combiner is a Client's produce requests in flight and batches
// gathering, per topic.
type combiner struct {
	mu     sync.Mutex
	topics map[string]*combineTopic // guarded by mu; a topic with nothing in flight has no entry
}

type combineTopic struct {
	inFlight int           // requests sent and unanswered, lone calls and batches
	open     *combineBatch // the batch gathering, sent when a request is answered
}

// combineBatch is Produce calls' messages combined into one batch.
type combineBatch struct {
	raw  []byte // the messages, encoded (protocol.AppendMessage)
	n    int    // how many
	done chan struct{}
	base int64 // set before done is closed
	err  error // set before done is closed
}

// topic returns topic's entry, created empty. m.mu must be held.
func (m *combiner) topic(topic string) *combineTopic {
	if m.topics == nil {
		m.topics = make(map[string]*combineTopic)
	}
	ct := m.topics[topic]
	if ct == nil {
		ct = new(combineTopic)
		m.topics[topic] = ct
	}
	return ct
}

// produceCombined is Produce (no expected offset) of msgs, a batch of
// size bytes uncompressed, through c's combiner. A combined batch is
// compressed whole with the client's codec.
func (c *Client) produceCombined(ctx context.Context, topic string, msgs [][]byte, size int) (int64, error) {
	if size > combineMaxBytes {
		return c.produceAlone(ctx, topic, -1, msgs, size)
	}
	m := &c.comb
	m.mu.Lock()
	ct := m.topic(topic)
	if ct.inFlight < combineSlots {
		ct.inFlight++
		m.mu.Unlock()
		base, err := c.produceAlone(ctx, topic, -1, msgs, size)
		if b := c.answered(topic); b != nil {
			go c.sendCombined(topic, b)
		}
		return base, err
	}
	b := ct.open
	if b != nil && (b.n+len(msgs) > protocol.MaxBatchMessages || len(b.raw)+size > c.opts.maxBatchBytes) {
		// Full: it goes now, past the slots, and this call starts the next.
		ct.open = nil
		ct.inFlight++
		go c.sendCombined(topic, b)
		b = nil
	}
	if b == nil {
		b = &combineBatch{done: make(chan struct{})}
		ct.open = b
	}
	first := b.n
	for _, msg := range msgs {
		b.raw = protocol.AppendMessage(b.raw, msg)
	}
	b.n += len(msgs)
	m.mu.Unlock()
	select {
	case <-b.done:
		if b.err != nil {
			return 0, b.err
		}
		return b.base + int64(first), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// sendCombined sends b, then each batch that gathered meanwhile, in the
// slot it holds; it frees the slot when none is left.
func (c *Client) sendCombined(topic string, b *combineBatch) {
	for b != nil {
		b.base, b.err = c.produceRaw(context.Background(), topic, false, -1, b.n, b.raw)
		close(b.done)
		b = c.answered(topic)
	}
}

// answered records that a produce request of topic was answered: it
// returns the batch gathering, for the caller to send in the request's
// slot, or frees the slot (always while full batches sent past the slots
// keep more than combineSlots in flight).
func (c *Client) answered(topic string) *combineBatch {
	m := &c.comb
	m.mu.Lock()
	defer m.mu.Unlock()
	ct := m.topics[topic]
	if b := ct.open; b != nil && ct.inFlight <= combineSlots {
		ct.open = nil
		return b
	}
	if ct.inFlight--; ct.inFlight == 0 {
		delete(m.topics, topic)
	}
	return nil
}
