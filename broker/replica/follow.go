package replica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// follow copies topic rt from its leader at epoch until ctx ends: first
// it cuts its log back to where the leader's log of its last epoch ends,
// then it fetches from its end, storing each batch as the leader stored
// it, and takes the leader's high-water mark as its own (up to its end).
// Any error starts over after a pause, truncation included.
func (m *Manager) follow(ctx context.Context, rt *rtopic, leader string, epoch int64, stopped chan struct{}) {
	defer close(stopped)
	pause := 20 * time.Millisecond
	for ctx.Err() == nil {
		err := m.followOnce(ctx, rt, leader, epoch)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, client.ErrConnection) || errors.Is(err, client.ErrClosed) {
			m.dropClient(leader)
		}
		m.log.Debug("replica: following", "topic", rt.name, "leader", leader, "epoch", epoch, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// followOnce truncates and fetches until an error.
func (m *Manager) followOnce(ctx context.Context, rt *rtopic, leader string, epoch int64) error {
	c, err := m.client(leader)
	if err != nil {
		return err
	}
	if err := m.truncate(ctx, c, rt.name); err != nil {
		return err
	}
	for ctx.Err() == nil {
		info, err := m.store.Info(rt.name)
		if err != nil {
			return err
		}
		r, err := c.ReplicaFetch(ctx, client.ReplicaFetch{Topic: rt.name, Follower: m.cfg.Self, Epoch: epoch,
			Offset: info.Next, MaxBytes: m.cfg.FetchBytes, Wait: m.cfg.FetchWait})
		if err != nil {
			return err
		}
		next := info.Next
		if len(r.Batches) > 0 {
			if next, err = m.store1(rt.name, r); err != nil {
				return err
			}
			m.stats.fetchedBytes.Add(int64(len(r.Batches)))
		}
		rt.mu.Lock()
		calls := rt.raise(min(r.HighWater, next))
		rt.mu.Unlock()
		calls.run()
	}
	return ctx.Err()
}

// store1 stores the batches of a fetch and returns the next offset.
func (m *Manager) store1(topic string, r client.ReplicaFetched) (int64, error) {
	var batches [][]byte
	var first int64 = -1
	for rest := r.Batches; len(rest) > 0; {
		bt, n, err := protocol.ParseBatch(rest)
		if err != nil {
			return 0, fmt.Errorf("replica: topic %q: a batch from the leader: %w", topic, err)
		}
		if first < 0 {
			first = bt.BaseOffset
		}
		batches = append(batches, rest[:n:n])
		rest = rest[n:]
	}
	epochs, err := m.store.Epochs(topic)
	if err != nil {
		return 0, err
	}
	if r.BatchEpoch > 0 && (len(epochs) == 0 || epochs[len(epochs)-1].Epoch < r.BatchEpoch) {
		if err := m.store.SetEpoch(topic, r.BatchEpoch, first); err != nil {
			return 0, err
		}
	}
	return m.store.Replicate(topic, batches)
}

// truncate cuts the follower's log back to where the leader's log of
// the follower's last epoch ends (KIP-101). When the leader never had
// that epoch it answers with the largest it had below it, and the log is
// cut to the lower of the two logs' ends of that epoch (KIP-279). A log
// with no recorded epoch is cut to its start: nothing in it can be
// matched against the leader's. The high-water mark plays no part.
func (m *Manager) truncate(ctx context.Context, c *client.Client, topic string) error {
	info, err := m.store.Info(topic)
	if err != nil {
		return err
	}
	if info.Next == info.Oldest {
		return nil // nothing to cut
	}
	epochs, err := m.store.Epochs(topic)
	if err != nil {
		return err
	}
	cut := info.Oldest
	if len(epochs) > 0 {
		last := epochs[len(epochs)-1].Epoch
		found, end, err := c.EpochEnd(ctx, topic, last)
		if err != nil {
			return err
		}
		switch {
		case found == last:
			cut = end
		case found < 0:
			cut = end // the leader holds no epoch of ours: from its start
		default:
			_, mine, err := m.store.EpochEnd(topic, found)
			if err != nil {
				return err
			}
			cut = min(mine, end)
		}
	}
	if cut >= info.Next {
		return nil
	}
	next, err := m.store.TruncateAfter(topic, cut)
	if err != nil {
		return fmt.Errorf("replica: topic %q: truncating to %d: %w", topic, cut, err)
	}
	m.stats.truncations.Add(1)
	m.log.Info("replica: truncated to the leader's log", "topic", topic, "from", info.Next, "to", next)
	return nil
}

// client returns the client of the member at addr, dialing it once.
func (m *Manager) client(addr string) (*client.Client, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, storage.ErrClosed
	}
	c := m.clients[addr]
	m.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err := m.cfg.Dial(addr)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		c.Close()
		return nil, storage.ErrClosed
	}
	if old := m.clients[addr]; old != nil {
		c.Close()
		return old, nil
	}
	m.clients[addr] = c
	return c, nil
}

func (m *Manager) dropClient(addr string) {
	m.mu.Lock()
	c := m.clients[addr]
	delete(m.clients, addr)
	m.mu.Unlock()
	if c != nil {
		c.Close()
	}
}
