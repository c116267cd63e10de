package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/haraqa/haraqa/protocol"
)

// Produce sends msgs to topic as one batch in one round trip and returns
// the offset of the first; the others follow in order. With auto-create on
// (the default) a missing topic is created. A produce that fails on a
// broken connection after it was sent is not retried (it may have been
// stored): the error says ErrConnection and the caller decides.
func (c *Client) Produce(ctx context.Context, topic string, msgs ...[]byte) (int64, error) {
	if len(msgs) == 0 {
		return 0, fmt.Errorf("%w: no messages", ErrBadBatch)
	}
	batch := encodeBatch(nil, c.opts.codec, msgs)
	if len(batch) > c.opts.maxBatchBytes {
		return 0, fmt.Errorf("%w: batch of %d bytes, max %d", ErrFrameTooLarge, len(batch), c.opts.maxBatchBytes)
	}
	return c.produceBatch(ctx, topic, batch, len(msgs))
}

func (c *Client) produceBatch(ctx context.Context, topic string, batch []byte, count int) (int64, error) {
	var flags protocol.ProduceFlags
	if c.opts.autoCreate {
		flags = protocol.ProduceCreateTopic
	}
	c.stats.msgsSent.Add(int64(count))
	c.stats.bytesSent.Add(int64(len(batch)))
	c.stats.inFlight.Add(1)
	defer c.stats.inFlight.Add(-1)
	p, err := c.do(ctx, protocol.OpProduce, 0, false, func(dst []byte, id uint32) []byte {
		return protocol.AppendProduceRequest(dst, id, topic, flags, batch)
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
	c.stats.bytesAcked.Add(int64(len(batch)))
	return r.BaseOffset, nil
}
