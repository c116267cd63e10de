package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	defer m.dropClient(leader, rt.name)
	pause := 20 * time.Millisecond
	for ctx.Err() == nil {
		err := m.followOnce(ctx, rt, leader, epoch)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, client.ErrConnection) || errors.Is(err, client.ErrClosed) || errors.Is(err, storage.ErrReadOnly) {
			// A copy that turned read-only fetches no more (followOnce):
			// its connection closed, the leader drops it from the
			// in-sync set at once (FetchGone), not after the lag time,
			// which acks=all would wait for.
			m.dropClient(leader, rt.name)
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
	if err := m.store.ReadOnly(rt.name); err != nil {
		// A copy that turned read-only takes nothing until a restart
		// reopens it: fetching nothing, it never looks in sync.
		return err
	}
	if err := m.repair(rt.name); err != nil {
		return err
	}
	c, err := m.client(ctx, leader, rt.name)
	if err != nil {
		return err
	}
	if err := m.truncate(ctx, c, rt.name); err != nil {
		return err
	}
	asked := map[uint64]bool{} // producers whose owners the leader was asked for (bindOwners)
	// Every answer is read into buf, which the batches stored from it
	// leave free: at a few fetches per produce, a buffer allocated per
	// answer would make the follower's garbage collector run dozens of
	// times a second under load. One that outgrew maxKeptBuf (an answer
	// whose first batch was larger than FetchBytes) is not kept.
	var buf []byte
	maxKeptBuf := int(m.cfg.FetchBytes) + 1<<20
	for ctx.Err() == nil {
		info, err := m.store.Info(rt.name)
		if err != nil {
			return err
		}
		r, err := c.ReplicaFetch(ctx, client.ReplicaFetch{Topic: rt.name, Follower: m.cfg.Self, Epoch: epoch,
			Offset: info.Next, MaxBytes: m.cfg.FetchBytes, Wait: m.cfg.FetchWait, Buf: &buf})
		if err != nil {
			return err
		}
		next := info.Next
		if len(r.Batches) > 0 {
			if next, err = m.store1(ctx, c, rt.name, r, asked); err != nil {
				return err
			}
			m.stats.fetchedBytes.Add(int64(len(r.Batches)))
		}
		if cap(buf) > maxKeptBuf {
			buf = nil
		}
		rt.mu.Lock()
		calls := rt.raise(min(r.HighWater, next))
		rt.mu.Unlock()
		calls.run()
	}
	return ctx.Err()
}

// store1 stores the batches of a fetch, binds their new producers to
// the owners the leader binds them to (bindOwners), and returns the next
// offset.
func (m *Manager) store1(ctx context.Context, c *client.Client, topic string, r client.ReplicaFetched, asked map[uint64]bool) (int64, error) {
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
	if err := m.restartAt(topic, first); err != nil {
		return 0, err
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
	next, err := m.store.Replicate(topic, batches)
	if err != nil {
		return 0, err
	}
	return next, m.bindOwners(ctx, c, topic, batches, asked)
}

// repair cuts this replica's log of topic before its first range that
// recovery found corrupted on every volume, so that the rest is copied
// again from the leader, batch for batch with the leader's bytes: a copy
// with a hole would otherwise look caught up (the follow loop looks only
// at the log's end), count toward acks=all and be eligible to lead while
// it cannot serve those offsets.
func (m *Manager) repair(topic string) error {
	from, bad, err := m.store.FirstUnreadable(topic)
	if err != nil || !bad {
		return err
	}
	info, err := m.store.Info(topic)
	if err != nil {
		return err
	}
	m.log.Warn("replica: offsets unreadable on every volume here: cutting the log there to copy it again from the leader",
		"topic", topic, "from", from, "to", info.Next)
	if err := m.cutTo(topic, from); err != nil {
		return err
	}
	m.stats.repairs.Add(1)
	return nil
}

// restartAt empties this replica's log of topic when the leader's log
// goes on from first, past its end: the leader no longer holds what
// follows this one's end (retention or a truncation dropped it), so
// nothing here can be continued (Kafka's follower does the same on an
// offset out of range). Replicate then starts the log at first.
func (m *Manager) restartAt(topic string, first int64) error {
	info, err := m.store.Info(topic)
	if err != nil || first <= info.Next {
		return err
	}
	if _, err := m.store.TruncateAfter(topic, info.Oldest); err != nil {
		return fmt.Errorf("replica: topic %q: emptying the log to start again at the leader's %d: %w", topic, first, err)
	}
	if info.Next > info.Oldest {
		m.stats.truncations.Add(1)
	}
	m.log.Info("replica: the leader's log starts past this one's end: started again there", "topic", topic,
		"dropped_from", info.Oldest, "dropped_to", info.Next, "leader_from", first)
	return nil
}

// bindOwners asks the leader, through c, for the owners of the producers
// of batches that this replica holds bound to none, and binds them here,
// before the next fetch tells the leader the batches are held: so that a
// failover does not let another token take a producer id. Each producer
// is asked about once while following one leader (asked): one the leader
// binds to none (no auth) stays so here, even if a token's batch binds
// it there later (which only a producer first used without a token, on
// a server given -auth-file since, does).
func (m *Manager) bindOwners(ctx context.Context, c *client.Client, topic string, batches [][]byte, asked map[uint64]bool) error {
	ids, err := m.store.UnboundProducers(topic, batches)
	if err != nil {
		return err
	}
	ids = slices.DeleteFunc(ids, func(id uint64) bool { return asked[id] })
	if len(ids) == 0 {
		return nil
	}
	owners, err := c.ProducerOwners(ctx, topic, ids)
	if err != nil {
		return fmt.Errorf("replica: topic %q: the owners of %d producers: %w", topic, len(ids), err)
	}
	if len(asked) > 4*protocol.MaxOwnerQuery {
		clear(asked) // a bound: those unbound are asked about again
	}
	for _, id := range ids {
		asked[id] = true
	}
	if len(owners) == 0 {
		return nil
	}
	return m.store.BindProducers(topic, owners)
}

// epochEnds answers where a leader's log of an epoch ends (protocol op
// 18); *client.Client is one.
type epochEnds interface {
	EpochEnd(ctx context.Context, topic string, epoch int64) (found, end int64, err error)
}

// maxCutRounds bounds truncate's questions: each round but the last
// asks about a lower epoch of the follower's, and a log holds few.
const maxCutRounds = 64

// truncate cuts the follower's log back to where the leader's log of
// the follower's last epoch ends (KIP-101). When the leader never had
// that epoch it answers with the largest it had below it; if the
// follower has that one too, both logs agree up to the lower of their
// ends of it, and the log is cut there. If the follower never had it
// either, the follower cuts to the end of its own largest epoch below
// it and asks again about that one (KIP-279, as Kafka's fetcher does):
// its entries past that point were written by another leader than the
// one the answer speaks of, and may differ from the leader's at the same
// offsets. A log with no recorded epoch is cut to its start: nothing in
// it can be matched against the leader's. Epochs recorded at or past the
// cut are forgotten with it, even when no batch goes, so the epochs of
// the batches copied next are recorded as the leader's. The high-water
// mark plays no part.
func (m *Manager) truncate(ctx context.Context, leader epochEnds, topic string) error {
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
	if len(epochs) == 0 {
		return m.cutTo(topic, info.Oldest)
	}
	ask := epochs[len(epochs)-1].Epoch
	for range maxCutRounds {
		found, end, err := leader.EpochEnd(ctx, topic, ask)
		if err != nil {
			return err
		}
		if found == ask || found < 0 { // found < 0: the leader holds no epoch of ours, end is its start
			return m.cutTo(topic, end)
		}
		mineEpoch, mine, err := m.store.EpochEnd(topic, found)
		if err != nil {
			return err
		}
		if mineEpoch == found || mineEpoch < 0 {
			return m.cutTo(topic, min(mine, end))
		}
		// Neither the leader's answer nor anything after this
		// follower's epoch mineEpoch can be matched: cut there and ask
		// about mineEpoch.
		if err := m.cutTo(topic, mine); err != nil {
			return err
		}
		ask = mineEpoch
	}
	return fmt.Errorf("replica: topic %q: %w after %d questions to the leader", topic, ErrNoAgreedEpoch, maxCutRounds)
}

// ErrNoAgreedEpoch: a follower's truncation found no epoch its log and
// its leader's agree on within maxCutRounds questions.
var ErrNoAgreedEpoch = errors.New("replica: no leader epoch agreed with the leader")

// cutTo cuts topic's log at offset (TruncateAfter), counting and logging
// a cut that removed batches.
func (m *Manager) cutTo(topic string, offset int64) error {
	info, err := m.store.Info(topic)
	if err != nil {
		return err
	}
	next, err := m.store.TruncateAfter(topic, offset)
	if err != nil {
		return fmt.Errorf("replica: topic %q: truncating to %d: %w", topic, offset, err)
	}
	if next < info.Next {
		m.stats.truncations.Add(1)
		m.log.Info("replica: truncated to the leader's log", "topic", topic, "from", info.Next, "to", next)
	}
	return nil
}

// client returns the client this member follows topic with on the
// member at addr, dialing it once. Each followed topic has a connection
// of its own: a leader answers a connection's requests in order, and a
// fetch parked at one topic's end (up to FetchWait) would hold back the
// fetches of the others behind it.
func (m *Manager) client(ctx context.Context, addr, topic string) (*client.Client, error) {
	key := addr + " " + topic
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, storage.ErrClosed
	}
	c := m.clients[key]
	m.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err := m.cfg.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		c.Close()
		return nil, storage.ErrClosed
	}
	if old := m.clients[key]; old != nil {
		c.Close()
		return old, nil
	}
	m.clients[key] = c
	return c, nil
}

// dropClient closes the client following topic on addr.
func (m *Manager) dropClient(addr, topic string) {
	key := addr + " " + topic
	m.mu.Lock()
	c := m.clients[key]
	delete(m.clients, key)
	m.mu.Unlock()
	if c != nil {
		c.Close()
	}
}
