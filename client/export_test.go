package client

import "context"

// MainConnBroken reports whether c's shared connection is gone or failed,
// so that its next request dials again: for tests that break the network
// and must not race the client noticing it.
func MainConnBroken(c *Client) bool {
	s := &c.main
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn == nil || s.conn.dead()
}

// HoldProduceSlots takes every produce slot of topic on c, as unanswered
// requests would, so that Produce calls to it combine until free answers
// them, which sends the batch gathered.
func HoldProduceSlots(c *Client, topic string) (free func()) {
	m := &c.comb
	m.mu.Lock()
	m.topic(topic).inFlight += combineSlots
	m.mu.Unlock()
	return func() {
		for range combineSlots {
			if b := c.answered(topic); b != nil {
				go c.sendCombined(topic, b)
			}
		}
	}
}

// CombineWaiting reports how many messages wait in topic's gathering
// batch on c.
func CombineWaiting(c *Client, topic string) int {
	m := &c.comb
	m.mu.Lock()
	defer m.mu.Unlock()
	if ct := m.topics[topic]; ct != nil && ct.open != nil {
		return ct.open.n
	}
	return 0
}

// CombineIdle reports whether c's combiner holds nothing: no topic with a
// request in flight or a batch gathering.
func CombineIdle(c *Client) bool {
	m := &c.comb
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.topics) == 0
}

// FollowTo makes the Producers of from, a Client of one server, move to
// to when a batch is refused as not leader (or, idempotent, its server
// cannot be reached), as a Client of several servers moves to the
// topic's new leader.
func FollowTo(from, to *Client) {
	from.reroute = func(context.Context, string, *Client, error) (*Client, error) { return to, nil }
}
