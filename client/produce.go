package client

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/haraqa/haraqa/protocol"
)

// Produce sends msgs to topic as one batch in one round trip and returns
// the offset of the first; the others follow in order. With auto-create on
// (the default) a missing topic is created. A produce that fails on a
// broken connection after it was sent is not retried (it may have been
// stored): the error says ErrConnection and the caller decides.
func (c *Client) Produce(ctx context.Context, topic string, msgs ...[]byte) (int64, error) {
	if c.cl != nil {
		var base int64
		err := c.cl.onTopic(ctx, topic, c.opts.autoCreate, func(s *Client) (err error) { base, err = s.Produce(ctx, topic, msgs...); return err })
		return base, err
	}
	if len(msgs) == 0 {
		return 0, fmt.Errorf("%w: no messages", ErrBadBatch)
	}
	if len(msgs) > protocol.MaxBatchMessages {
		return 0, fmt.Errorf("%w: %d messages, at most %d in one batch (protocol.MaxBatchMessages)", ErrBadBatch, len(msgs), protocol.MaxBatchMessages)
	}
	if c.opts.codec == protocol.CodecNone {
		// Encode the batch straight into the request frame: one copy of
		// the messages, no intermediate batch.
		size := protocol.BatchHeaderSize + protocol.MessagesSize(msgs...)
		if size > c.opts.maxBatchBytes {
			return 0, fmt.Errorf("%w: a batch of %d bytes, over the client's limit of %d (WithMaxBatchBytes, to match the server's -max-frame): produce fewer or smaller messages at a time", ErrFrameTooLarge, size, c.opts.maxBatchBytes)
		}
		return c.produce(ctx, topic, len(msgs), size, func(dst []byte) []byte {
			return protocol.AppendBatch(dst, msgs...)
		})
	}
	batch := protocol.AppendBatchCodec(nil, c.opts.codec, msgs...)
	if len(batch) > c.opts.maxBatchBytes {
		return 0, fmt.Errorf("%w: a batch of %d bytes, over the client's limit of %d (WithMaxBatchBytes, to match the server's -max-frame): produce fewer or smaller messages at a time", ErrFrameTooLarge, len(batch), c.opts.maxBatchBytes)
	}
	return c.produce(ctx, topic, len(msgs), len(batch), func(dst []byte) []byte {
		return append(dst, batch...)
	})
}

// produce sends one produce request whose batch, size bytes of count
// messages, appendBatch appends.
func (c *Client) produce(ctx context.Context, topic string, count, size int, appendBatch func(dst []byte) []byte) (int64, error) {
	var flags protocol.ProduceFlags
	if c.opts.autoCreate {
		flags = protocol.ProduceCreateTopic
	}
	c.stats.msgsSent.Add(int64(count))
	c.stats.bytesSent.Add(int64(size))
	c.stats.inFlight.Add(1)
	defer c.stats.inFlight.Add(-1)
	p, err := c.do(ctx, protocol.OpProduce, 0, false, func(dst []byte, id uint32) []byte {
		dst = slices.Grow(dst, protocol.HeaderSize+16+len(topic)+size)
		dst = protocol.AppendProduceRequestHeader(dst, id, topic, flags, size)
		return appendBatch(dst)
	})
	if err != nil {
		return 0, err
	}
	r, err := protocol.ParseProduceResponse(p)
	if err != nil {
		return 0, err
	}
	if int(r.Count) != count {
		return 0, errors.New("client: the server acknowledged another message count")
	}
	c.stats.msgsAcked.Add(int64(count))
	c.stats.bytesAcked.Add(int64(size))
	return r.BaseOffset, nil
}
