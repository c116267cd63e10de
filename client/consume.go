package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// Message is one message read from a topic, or to produce
// (ProduceMessages, Producer.SendMessage: only Value and Headers count).
type Message struct {
	Offset  int64
	Time    time.Time // when the server appended it
	Value   []byte
	Headers []Header // nil when the message has none
}

// Header is one message header: a key of 1 to 255 bytes
// (protocol.MaxHeaderKeyLen) and a value of at most 64 KiB, at most 64 per
// message (protocol.MaxHeaders). Keys need not be unique; order is kept.
type Header struct {
	Key   string
	Value []byte
}

// consumeMaxBytes is the most batch bytes asked for per consume request.
const consumeMaxBytes = 4 << 20

// consumeBytes is the batch bytes a consume request asks for:
// consumeMaxBytes, or what a response within WithMaxResponseBytes holds
// after its header, if less. A single batch larger than that is still sent
// whole by the server (a response holds at least one), and fails with
// ErrResponseTooLarge.
func (o *options) consumeBytes() int32 {
	return int32(max(1, min(consumeMaxBytes, o.responseLimit()-protocol.ConsumeResponseHeaderSize)))
}

// Consume returns exactly the messages [offset, offset+limit) that exist
// (fewer at the end of the topic, none past it). A negative offset counts
// back from the end: -1 is the last message. limit <= 0 means as many as
// one response holds. Every batch's CRC is checked and compressed batches
// are decompressed.
func (c *Client) Consume(ctx context.Context, topic string, offset int64, limit int) ([]Message, error) {
	msgs, _, err := c.ConsumeInto(ctx, nil, topic, offset, limit)
	return msgs, err
}

// ConsumeInto is Consume appending to dst (reset it with dst[:0] to reuse
// it). It also returns the offset to read from next. Message values borrow
// from the responses, which are not reused. A limit larger than one
// response holds takes several requests.
func (c *Client) ConsumeInto(ctx context.Context, dst []Message, topic string, offset int64, limit int) ([]Message, int64, error) {
	if c.cl != nil {
		var next int64
		err := c.cl.onTopic(ctx, topic, false, func(s *Client) (err error) {
			dst, next, err = s.ConsumeInto(ctx, dst, topic, offset, limit)
			return err
		})
		return dst, next, err
	}
	n0 := len(dst)
	for {
		var got int
		var next, end int64
		var err error
		remaining := 0
		if limit > 0 {
			remaining = limit - (len(dst) - n0)
		}
		before := len(dst)
		dst, next, end, err = c.consume(ctx, &c.main, dst, topic, offset, remaining, 0)
		if err != nil {
			return dst, offset, err
		}
		got = len(dst) - before
		offset = next
		if limit <= 0 || got == 0 || next >= end || len(dst)-n0 >= limit {
			return dst, next, nil
		}
	}
}

// consume makes one request for [offset, offset+limit), waiting up to wait
// for data, on slot's connection. It returns the next offset to read and
// the topic's end.
func (c *Client) consume(ctx context.Context, s *connSlot, dst []Message, topic string, offset int64, limit int, wait time.Duration) ([]Message, int64, int64, error) {
	want := int32(0)
	if limit > 0 {
		want = int32(min(limit, 1<<31-1))
	}
	p, err := c.doOn(ctx, s, protocol.OpConsume, wait, true, nil, func(b []byte, id uint32) []byte {
		return protocol.AppendConsumeRequest(b, id, topic, offset, want, c.opts.consumeBytes(), int32(wait/time.Millisecond))
	})
	if err != nil {
		return dst, offset, 0, err
	}
	r, err := protocol.ParseConsumeResponse(p)
	if err != nil {
		return dst, offset, 0, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	start := r.StartOffset
	end := int64(-1)
	if limit > 0 {
		end = start + int64(limit)
	}
	n0 := len(dst)
	dst, err = c.splitBatches(dst, r.Batches, start, end)
	if err != nil {
		return dst[:n0], offset, 0, err
	}
	next := start
	if len(dst) > n0 {
		next = dst[len(dst)-1].Offset + 1
	}
	return dst, next, r.NextOffset, nil
}

// splitBatches checks every batch's CRC, decodes its body and appends its
// messages with offsets in [start, end) (end < 0: no end) to dst. Values
// borrow from batches.
func (c *Client) splitBatches(dst []Message, batches []byte, start, end int64) ([]Message, error) {
	n0 := len(dst)
	for b := batches; len(b) > 0; {
		bt, n, err := protocol.ParseBatch(b)
		if err != nil {
			return dst, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		b = b[n:]
		if err := bt.Verify(); err != nil {
			return dst, fmt.Errorf("%w: batch at offset %d: %w", ErrCorrupt, bt.BaseOffset, err)
		}
		body, err := batchBody(&bt, c.opts.maxDecoded())
		if err != nil {
			return dst, err
		}
		t := time.Unix(0, bt.AppendTime)
		headers := bt.Flags&protocol.FlagHeaders != 0
		err = protocol.Messages(body, bt.Count, bt.BaseOffset, func(off int64, m []byte) error {
			if off < start || (end >= 0 && off >= end) {
				return nil
			}
			if !headers {
				dst = append(dst, Message{Offset: off, Time: t, Value: m})
				return nil
			}
			hs, v, err := splitHeaders(m)
			if err != nil {
				return err
			}
			dst = append(dst, Message{Offset: off, Time: t, Value: v, Headers: hs})
			return nil
		})
		if err != nil {
			return dst, fmt.Errorf("%w: batch at offset %d: %w", ErrCorrupt, bt.BaseOffset, err)
		}
	}
	c.stats.received.Add(int64(len(dst) - n0))
	return dst, nil
}

// splitHeaders splits a message of a batch with headers into its headers
// (nil when it has none; values borrow from m) and value.
func splitHeaders(m []byte) ([]Header, []byte, error) {
	var scratch [4]protocol.Header
	ph, v, err := protocol.SplitHeaders(scratch[:0], m)
	if err != nil || len(ph) == 0 {
		return nil, v, err
	}
	hs := make([]Header, len(ph))
	for i, h := range ph {
		hs[i] = Header{Key: string(h.Key), Value: h.Value}
	}
	return hs, v, nil
}

// followWait is the long-poll wait of each request Messages makes.
const followWait = 10 * time.Second

// Messages follows topic from offset from (negative counts back from the
// end), yielding every message in order, and waits for new ones with long
// polls (no busy loop when idle), until ctx ends (the loop then just stops)
// or the client is closed (it yields ErrClosed). Broken connections are
// retried; other errors are yielded, and the loop goes on if the caller
// keeps ranging.
func (c *Client) Messages(ctx context.Context, topic string, from int64) iter.Seq2[Message, error] {
	if c.cl != nil {
		return c.cl.messages(ctx, topic, from)
	}
	return func(yield func(Message, error) bool) {
		slot, release, err := c.pollSlot()
		if err != nil {
			yield(Message{}, err)
			return
		}
		defer release()
		var buf []Message
		bo := c.newBackoff(0) // constant: the WithRetries backoff after each error yielded
		for ctx.Err() == nil {
			var err error
			var next int64
			buf, next, _, err = c.consume(ctx, slot, buf[:0], topic, from, 0, followWait)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				if errors.Is(err, ErrClosed) {
					yield(Message{}, err)
					return
				}
				if !yield(Message{}, err) {
					return
				}
				if err := bo.wait(ctx); err != nil && ctx.Err() != nil {
					return
				} // closed: the next attempt reports ErrClosed
				continue
			}
			for _, m := range buf {
				if !yield(m, nil) {
					return
				}
			}
			if len(buf) > 0 || from < 0 {
				from = next
			}
		}
	}
}
