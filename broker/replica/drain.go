package replica

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/haraqa/haraqa/storage"
)

// drainPoll is how often Drain looks at the followers' positions.
const drainPoll = 2 * time.Millisecond

// Drain is the first step of a graceful stop on a leader: it refuses new
// produces to the replicated topics this member leads (not leader, so
// that clients look for the next one) and waits, until ctx ends, for the
// in-sync followers of each to hold everything appended there. A lead
// handed off after it goes to a replica that holds every batch this one
// acknowledged, those answered with acks=leader included; without it the
// batches the followers had not fetched yet when the leader stopped
// serving them were lost with the change. A produce appended while it
// runs (it passed the leader check just before) waits for the followers
// whatever its acks, and every produce waiting for them is answered as
// they catch up (or fails with the stop, never acknowledged uncopied).
// It returns ctx's error, naming a topic not yet copied, if ctx ends
// first; the caller stops either way.
func (m *Manager) Drain(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.draining.Store(true)
	m.mu.Unlock()
	if behind := m.waitCopied(ctx, m.held()); behind != "" {
		return fmt.Errorf("replica: draining: topic %q not yet held by every in-sync follower: %w", behind, cmp.Or(ctx.Err(), storage.ErrClosed))
	}
	return nil
}

// waitCopied waits, looking every drainPoll, until every in-sync
// follower of each of logs holds what this member appended (copied),
// ctx ends or the manager closes. It returns a topic not yet copied
// then, "" once all are.
func (sh *shared) waitCopied(ctx context.Context, logs []*replicaLog) string {
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for {
		behind := ""
		for _, rl := range logs {
			if !rl.copied() {
				behind = rl.name
				break
			}
		}
		if behind == "" {
			return ""
		}
		select {
		case <-ctx.Done():
			return behind
		case <-sh.done:
			return behind
		case <-tick.C:
		}
	}
}

// copied reports whether every in-sync follower of rl holds what this
// member appended, or this member does not lead rl.
func (rl *replicaLog) copied() bool {
	info, err := rl.info()
	if err != nil {
		return true // deleted meanwhile, or the store is failing: nothing to wait for
	}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if !rl.leading() {
		return true
	}
	for _, id := range rl.meta.ISR {
		if id == rl.sh.cfg.Self {
			continue
		}
		if f := rl.fol[id]; f == nil || f.leo < info.Next {
			return false
		}
	}
	return true
}
