package client

import (
	"context"
	"fmt"

	"github.com/haraqa/haraqa/protocol"
)

// MoveResult tells what MoveTopic copied.
type MoveResult struct {
	Oldest, Next int64 // the topic's offsets, the same on both servers
	Batches      int   // batches copied
	Bytes        int64 // batch bytes copied
	Groups       int   // consumer groups whose committed offsets were copied
}

// maxMoveRounds bounds the rounds MoveTopic copies in while the source
// keeps growing.
const maxMoveRounds = 10

// MoveTopic copies topic from its server (c's, or for a client of several
// servers the one it lives on) to the server of dst, keeping every
// batch's offset and append time (op 16, import), copies the committed
// offsets of its consumer groups, checks that both servers have the same
// oldest and next offsets, and then deletes topic from its server. The
// destination creates the topic if it does not have it; one that holds
// produced messages refuses (ErrImportRefused), and nothing is deleted.
//
// Consumers may go on reading the old server while it runs. Producers
// should be stopped or pointed at the destination first: a message
// produced to the old server after the last check is deleted with it.
// Leases are not copied; group members take them again on the new
// server. An error names the server it came from; the source is deleted
// only after everything else succeeded.
func (c *Client) MoveTopic(ctx context.Context, topic string, dst *Client) (MoveResult, error) {
	if dst.cl != nil {
		return MoveResult{}, fmt.Errorf("%w: move to one server, not %s", ErrSeveralServers, dst.addr)
	}
	src := c
	if c.cl != nil {
		s, _, err := c.cl.route(ctx, topic, false)
		if err != nil {
			return MoveResult{}, err
		}
		src = s
	}
	if src.addr == dst.addr {
		return MoveResult{}, fmt.Errorf("%w: topic %q is on %s already", ErrInvalidArgument, topic, dst.addr)
	}
	res, err := src.copyTopic(ctx, topic, dst)
	if err != nil {
		return res, err
	}
	if err := src.DeleteTopic(ctx, topic); err != nil {
		return res, fmt.Errorf("client: topic %q copied to %s, but not deleted: %w", topic, dst.addr, wrapAddr(src, err))
	}
	if c.cl != nil {
		c.cl.forget(topic, src)
	}
	return res, nil
}

// copyTopic is MoveTopic up to the deletion, c being the source server.
func (c *Client) copyTopic(ctx context.Context, topic string, dst *Client) (MoveResult, error) {
	var res MoveResult
	info, err := c.TopicInfo(ctx, topic)
	if err != nil {
		return res, wrapAddr(c, err)
	}
	off, first := info.Oldest, true
	for round := 0; ; round++ {
		for {
			resp, err := c.consumeRaw(ctx, topic, off)
			if err != nil {
				return res, wrapAddr(c, err)
			}
			if len(resp.Batches) == 0 && !first {
				break
			}
			r, err := dst.Import(ctx, topic, off, resp.Batches)
			if err != nil {
				return res, wrapAddr(dst, err)
			}
			first = false
			res.Oldest, res.Next = r.OldestOffset, r.NextOffset
			res.Bytes += int64(len(resp.Batches))
			for b := resp.Batches; len(b) > 0; res.Batches++ {
				_, n, _ := protocol.ParseBatch(b) // parsed by consumeRaw
				b = b[n:]
			}
			off = r.NextOffset
			if off >= resp.NextOffset {
				break
			}
		}
		if info, err = c.TopicInfo(ctx, topic); err != nil {
			return res, wrapAddr(c, err)
		}
		if info.Next == off {
			break
		}
		if round == maxMoveRounds {
			return res, fmt.Errorf("client: topic %q on %s keeps growing (next offset %d, copied to %d): stop its producers and move it again", topic, c.addr, info.Next, off)
		}
	}
	if info.Oldest > res.Oldest { // truncated meanwhile
		if res.Oldest, err = dst.Truncate(ctx, topic, info.Oldest); err != nil {
			return res, wrapAddr(dst, err)
		}
	}
	groups, err := c.ListGroups(ctx, topic)
	if err != nil {
		return res, wrapAddr(c, err)
	}
	for _, g := range groups {
		if g.Committed == NoOffset {
			continue // a lease only
		}
		if err := dst.CommitOffset(ctx, g.Group, topic, g.Committed); err != nil {
			return res, wrapAddr(dst, fmt.Errorf("group %q: %w", g.Group, err))
		}
		res.Groups++
	}
	dinfo, err := dst.TopicInfo(ctx, topic)
	if err != nil {
		return res, wrapAddr(dst, err)
	}
	if dinfo.Oldest != info.Oldest || dinfo.Next != info.Next {
		return res, fmt.Errorf("client: topic %q: %s has offsets [%d, %d), %s has [%d, %d): not deleted from %s",
			topic, c.addr, info.Oldest, info.Next, dst.addr, dinfo.Oldest, dinfo.Next, c.addr)
	}
	return res, nil
}

// consumeRaw reads whole stored batches of topic from offset on, checking
// every CRC, as they are to be imported elsewhere.
func (c *Client) consumeRaw(ctx context.Context, topic string, offset int64) (protocol.ConsumeResponse, error) {
	p, err := c.do(ctx, protocol.OpConsume, 0, true, func(b []byte, id uint32) []byte {
		return protocol.AppendConsumeRequest(b, id, topic, offset, 0, c.opts.consumeBytes(), 0)
	})
	if err != nil {
		return protocol.ConsumeResponse{}, err
	}
	r, err := protocol.ParseConsumeResponse(p)
	if err != nil {
		return r, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	for b := r.Batches; len(b) > 0; {
		bt, n, _ := protocol.ParseBatch(b) // ParseConsumeResponse parsed them
		if err := bt.Verify(); err != nil {
			return r, fmt.Errorf("%w: batch at offset %d: %w", ErrCorrupt, bt.BaseOffset, err)
		}
		b = b[n:]
	}
	return r, nil
}

// ImportResult is the topic's offsets after an Import.
type ImportResult = protocol.ImportResponse

// Import stores batches, whole batches as another server stored them
// (concatenated, their base offsets and append times stamped), at their
// own offsets on c's server, creating topic if it is missing (op 16; it
// needs the admin right). offset is where the import goes on from: into
// a topic that holds nothing yet any offset >= 0, which becomes its
// oldest (the first batch must hold it); else the topic's next offset
// (ErrOffsetMismatch). A topic that holds produced messages refuses it
// (ErrImportRefused). MoveTopic is built on it. It is not sent again
// after a connection failure that may have reached the server: read the
// topic's next offset and go on from there.
func (c *Client) Import(ctx context.Context, topic string, offset int64, batches []byte) (ImportResult, error) {
	if c.cl != nil {
		return ImportResult{}, fmt.Errorf("%w: import to one server", ErrSeveralServers)
	}
	p, err := c.do(ctx, protocol.OpImport, 0, false, func(dst []byte, id uint32) []byte {
		return protocol.AppendImportRequest(dst, id, topic, protocol.ImportCreateTopic, offset, batches)
	})
	if err != nil {
		return ImportResult{}, err
	}
	r, err := protocol.ParseImportResponse(p)
	if err != nil {
		return ImportResult{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return r, nil
}
