package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// NoOffset is the committed offset of a group that has none.
const NoOffset = protocol.NoOffset

// GroupOffset is the state of a consumer group on a topic.
type GroupOffset struct {
	Group string
	// Committed is the offset the group committed last: the offset it
	// reads next. NoOffset when it has not committed.
	Committed int64
	// Start is where the group reads from: Committed, raised to the
	// topic's oldest offset when a truncation went past it, or the oldest
	// offset when the group has no commit. (ListGroups leaves it 0.)
	Start int64
	// Next is the topic's next offset; Next - Start is the group's lag.
	Next int64
	// Lease is the time left on the lease a member holds (0: none); from
	// a lease request, the lease granted.
	Lease time.Duration
}

// CommitOffset sets the committed offset of group on topic to offset,
// the offset the group reads next: one past the last message it
// processed. It returns once the server holds it on every volume. It
// fails with ErrGroupBusy while a member holds the group's lease: a
// GroupReader commits for itself.
func (c *Client) CommitOffset(ctx context.Context, group, topic string, offset int64) error {
	return c.commit(ctx, group, topic, "", offset, false, 0)
}

// CommitOffsetIf is CommitOffset applied only while the committed offset
// is prev (NoOffset: the group has none), else ErrCommitConflict, so two
// writers cannot silently overwrite each other.
func (c *Client) CommitOffsetIf(ctx context.Context, group, topic string, offset, prev int64) error {
	return c.commit(ctx, group, topic, "", offset, true, prev)
}

func (c *Client) commit(ctx context.Context, group, topic, member string, offset int64, compare bool, prev int64) error {
	if c.cl != nil { // a group lives with its topic
		return c.cl.onTopic(ctx, topic, false, func(s *Client) error {
			return s.commit(ctx, group, topic, member, offset, compare, prev)
		})
	}
	req := protocol.CommitRequest{Offset: offset, Expect: prev, Topic: []byte(topic), Group: []byte(group), Member: []byte(member)}
	if compare {
		req.Flags = protocol.CommitCompare
	}
	_, err := c.do(ctx, protocol.OpCommitOffset, 0, true, func(dst []byte, id uint32) []byte {
		return protocol.AppendCommitRequest(dst, id, req)
	})
	if compare && errors.Is(err, ErrCommitConflict) {
		// A commit retried after its answer was lost finds itself: the
		// group is where the caller wanted it.
		if o, ferr := c.FetchOffset(ctx, group, topic); ferr == nil && o.Committed == offset {
			return nil
		}
	}
	return err
}

// FetchOffset returns the state of group on topic. A group that never
// committed has Committed NoOffset and starts at the topic's oldest offset.
func (c *Client) FetchOffset(ctx context.Context, group, topic string) (GroupOffset, error) {
	if c.cl != nil {
		var o GroupOffset
		err := c.cl.onTopic(ctx, topic, false, func(s *Client) (err error) { o, err = s.FetchOffset(ctx, group, topic); return err })
		return o, err
	}
	p, err := c.do(ctx, protocol.OpFetchOffset, 0, true, func(dst []byte, id uint32) []byte {
		return protocol.AppendGroupRequest(dst, protocol.OpFetchOffset, id, topic, group)
	})
	return groupOffset(group, p, err)
}

func groupOffset(group string, p []byte, err error) (GroupOffset, error) {
	if err != nil {
		return GroupOffset{}, err
	}
	r, err := protocol.ParseGroupOffsetResponse(p)
	if err != nil {
		return GroupOffset{}, err
	}
	return GroupOffset{Group: group, Committed: r.Committed, Start: r.Start, Next: r.Next,
		Lease: time.Duration(r.LeaseMs) * time.Millisecond}, nil
}

// ListGroups returns the groups of topic that have committed or hold a
// lease, by name, and the topic's next offset in each.
func (c *Client) ListGroups(ctx context.Context, topic string) ([]GroupOffset, error) {
	if c.cl != nil {
		var gs []GroupOffset
		err := c.cl.onTopic(ctx, topic, false, func(s *Client) (err error) { gs, err = s.ListGroups(ctx, topic); return err })
		return gs, err
	}
	p, err := c.do(ctx, protocol.OpListGroups, 0, true, func(dst []byte, id uint32) []byte {
		return protocol.AppendListGroupsRequest(dst, id, topic)
	})
	if err != nil {
		return nil, err
	}
	r, err := protocol.ParseListGroupsResponse(p)
	if err != nil {
		return nil, err
	}
	out := make([]GroupOffset, 0, r.Count)
	for e := range r.Groups() {
		start := r.Oldest
		if e.Committed != NoOffset {
			start = min(max(e.Committed, r.Oldest), r.Next)
		}
		out = append(out, GroupOffset{Group: string(e.Group), Committed: e.Committed, Start: start, Next: r.Next,
			Lease: time.Duration(e.LeaseMs) * time.Millisecond})
	}
	return out, nil
}

// DeleteGroup forgets group on topic. A group that does not exist is not
// an error; one whose lease a member holds is ErrGroupBusy.
func (c *Client) DeleteGroup(ctx context.Context, group, topic string) error {
	if c.cl != nil {
		return c.cl.onTopic(ctx, topic, false, func(s *Client) error { return s.DeleteGroup(ctx, group, topic) })
	}
	_, err := c.do(ctx, protocol.OpDeleteGroup, 0, true, func(dst []byte, id uint32) []byte {
		return protocol.AppendGroupRequest(dst, protocol.OpDeleteGroup, id, topic, group)
	})
	return err
}

// lease takes (or renews) or releases member's lease on (group, topic).
func (c *Client) lease(ctx context.Context, group, topic, member string, action protocol.LeaseAction, ttl time.Duration) (GroupOffset, error) {
	if c.cl != nil {
		var o GroupOffset
		err := c.cl.onTopic(ctx, topic, false, func(s *Client) (err error) { o, err = s.lease(ctx, group, topic, member, action, ttl); return err })
		return o, err
	}
	req := protocol.LeaseRequest{Action: action, TTLMs: uint32(min(ttl.Milliseconds(), protocol.MaxLeaseMs)),
		Topic: []byte(topic), Group: []byte(group), Member: []byte(member)}
	p, err := c.do(ctx, protocol.OpGroupLease, 0, true, func(dst []byte, id uint32) []byte {
		return protocol.AppendLeaseRequest(dst, id, req)
	})
	return groupOffset(group, p, err)
}

// ValidGroup reports whether name is a valid group name: 1 to 255 bytes
// of [A-Za-z0-9._-], not "." or "..". The error matches ErrInvalidArgument.
func ValidGroup(name string) error {
	if err := protocol.ValidGroup(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return nil
}
