package replica

import (
	"context"
	"fmt"

	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/protocol"
)

// This file: where the members' logs end, which the cluster's controller
// asks the in-sync replicas of a topic whose leader died before it elects
// one (cluster.Config.LogEnds; op 23 between the servers).

// LogEnds implements service.Followers: where this member's logs of
// topics end, protocol.LogEndNone for those it does not hold.
func (a followerAPI) LogEnds(topics []string) []protocol.LogEnd {
	ends := make([]protocol.LogEnd, len(topics))
	for i, t := range topics {
		var e cluster.LogEnd
		l, err := a.m.store.Log(t)
		if err == nil {
			e, err = logEnd(l)
		}
		if err != nil {
			ends[i] = protocol.LogEndNone
			continue
		}
		ends[i] = protocol.LogEnd{Epoch: e.Epoch, Next: e.End}
	}
	return ends
}

// LogEndsOf returns where member's logs of topics end, for the cluster's
// controller (cluster.Config.LogEnds): this member's from its own store,
// another's asked over a connection of its own to its binary port
// (Config.Dial), closed after, in requests of at most
// protocol.MaxLogEndsQuery topics. The topics member does not hold are
// left out.
func (m *Manager) LogEndsOf(ctx context.Context, member string, topics []string) (map[string]cluster.LogEnd, error) {
	out := make(map[string]cluster.LogEnd, len(topics))
	add := func(topics []string, ends []protocol.LogEnd) {
		for i, e := range ends {
			if e != protocol.LogEndNone {
				out[topics[i]] = cluster.LogEnd{Topic: topics[i], Epoch: e.Epoch, End: e.Next}
			}
		}
	}
	if member == m.cfg.Self {
		add(topics, followerAPI{m}.LogEnds(topics))
		return out, nil
	}
	c, err := m.cfg.Dial(ctx, member)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	for len(topics) > 0 {
		part := topics[:min(len(topics), protocol.MaxLogEndsQuery)]
		topics = topics[len(part):]
		ends, err := c.LogEnds(ctx, part)
		if err != nil {
			return out, fmt.Errorf("replica: log ends of %s: %w", member, err)
		}
		add(part, ends)
	}
	return out, nil
}
