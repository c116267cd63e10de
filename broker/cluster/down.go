package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"
)

// This file: which members are down, as the Raft leader's controller
// sees them (no heartbeat within the member timeout), for the cluster
// status. The controller's maps belong to its goroutine; it publishes a
// copy after each pass (publishDown), which Down reads on the leader and
// a query forwarded to the leader (opDownQuery) reads for the others.

// opDownQuery asks the Raft leader which members are down. It is
// answered, never committed: serveForward takes it before the commands.
const opDownQuery = "down?"

// downQueryTimeout bounds a member's question to the Raft leader.
const downQueryTimeout = 2 * time.Second

// publishDown stores the members taken as down, each with since when
// (its last contact), for Down; nil while this member does not lead.
func (c *controller) publishDown(leading bool) {
	if !leading {
		if c.downView.Load() != nil {
			c.downView.Store(nil)
		}
		return
	}
	m := make(map[string]time.Time, len(c.down))
	for id := range c.down {
		m[id] = c.failing[id]
	}
	if old := c.downView.Load(); old != nil && maps.Equal(*old, m) {
		return
	}
	c.downView.Store(&m)
}

// downLocal is the published view, ok when this member's controller
// leads (its first pass as leader done).
func (n *Node) downLocal() (map[string]time.Time, bool) {
	p := n.ctl.downView.Load()
	if p == nil {
		return nil, false
	}
	return maps.Clone(*p), true
}

// Down returns the members the Raft leader takes as down (no heartbeat
// within the member timeout), each with since when it has not been
// heard from: its own view when this member leads, else the leader's,
// asked over the cluster port within ctx and downQueryTimeout.
func (n *Node) Down(ctx context.Context) (map[string]time.Time, error) {
	if n.IsLeader() {
		if m, ok := n.downLocal(); ok {
			return m, nil
		}
		return map[string]time.Time{}, nil // just elected: nobody taken as down yet
	}
	addr, id := n.raft.LeaderWithID()
	if id == "" {
		return nil, ErrNoLeader
	}
	timeout := downQueryTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	b, _ := json.Marshal(Command{Op: opDownQuery})
	ans, err := n.fwd.do(ctx, string(addr), timeout, b)
	if err != nil {
		return nil, fmt.Errorf("asking the Raft leader %s: %w", id, err)
	}
	_, res, err := decodeAnswer(ans)
	if err != nil {
		return nil, fmt.Errorf("asking the Raft leader %s: %w", id, err)
	}
	m := map[string]time.Time{}
	if err := json.Unmarshal(res, &m); err != nil {
		return nil, fmt.Errorf("the Raft leader %s's answer: %w", id, err)
	}
	return m, nil
}

// answerDown answers opDownQuery, on the Raft leader only.
func (n *Node) answerDown() []byte {
	if !n.IsLeader() {
		return encodeAnswer(0, nil, ErrNotLeader)
	}
	m, _ := n.downLocal()
	if m == nil {
		m = map[string]time.Time{}
	}
	b, _ := json.Marshal(m)
	return encodeAnswer(0, b, nil)
}
