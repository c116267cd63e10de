package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/haraqa/haraqa/broker/peer"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// follow copies rl from its leader at epoch until ctx ends: it
// joins the session that copies the topics this member follows from
// that leader (session.go), which first cuts its log back to where the
// leader's log of its last epoch ends, then fetches from its end,
// storing each batch as the leader stored it, and takes the leader's
// high-water mark as its own (up to its end). Any error sets the topic
// up again after a pause, truncation included.
func (m *Manager) follow(ctx context.Context, rl *replicaLog, leader string, epoch int64, stopped chan struct{}) {
	defer close(stopped)
	s, ft := m.join(ctx, leader, rl, epoch)
	if s == nil {
		return // closed
	}
	<-ctx.Done()
	s.leave(ft)
}

// storeFetched stores the batches of a fetch in l, rl's log, binds
// their new producers to the owners the leader binds them to
// (bindOwners), and returns the next offset.
func (rl *replicaLog) storeFetched(ctx context.Context, c *peer.Conn, l *storage.Log, r protocol.ReplicaFetchResponse, asked map[uint64]bool) (int64, error) {
	topic := l.Name()
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
	if err := rl.restartAt(l, first); err != nil {
		return 0, err
	}
	epochs, err := l.Epochs()
	if err != nil {
		return 0, err
	}
	if r.BatchEpoch > 0 && (len(epochs) == 0 || epochs[len(epochs)-1].Epoch < r.BatchEpoch) {
		if err := l.SetEpoch(r.BatchEpoch, first); err != nil {
			return 0, err
		}
	}
	next, err := l.Replicate(batches)
	if err != nil {
		return 0, err
	}
	return next, rl.bindOwners(ctx, c, l, batches, asked)
}

// repair cuts this replica's log of topic before its first range that
// recovery found corrupted on every volume, so that the rest is copied
// again from the leader, batch for batch with the leader's bytes: a copy
// with a hole would otherwise look caught up (the follow loop looks only
// at the log's end), count toward acks=all and be eligible to lead while
// it cannot serve those offsets.
func (rl *replicaLog) repair(l *storage.Log) error {
	from, bad, err := l.FirstUnreadable()
	if err != nil || !bad {
		return err
	}
	info, err := l.Info()
	if err != nil {
		return err
	}
	rl.sh.log.Warn("replica: offsets unreadable on every volume here: cutting the log there to copy it again from the leader",
		"topic", l.Name(), "from", from, "to", info.Next)
	if err := rl.cutTo(l, from); err != nil {
		return err
	}
	rl.sh.stats.repairs.Add(1)
	return nil
}

// restartAt empties this replica's log of topic when the leader's log
// goes on from first, past its end: the leader no longer holds what
// follows this one's end (retention or a truncation dropped it), so
// nothing here can be continued (Kafka's follower does the same on an
// offset out of range). Replicate then starts the log at first.
func (rl *replicaLog) restartAt(l *storage.Log, first int64) error {
	topic := l.Name()
	info, err := l.Info()
	if err != nil || first <= info.Next {
		return err
	}
	if _, err := l.TruncateAfter(info.Oldest); err != nil {
		return fmt.Errorf("replica: topic %q: emptying the log to start again at the leader's %d: %w", topic, first, err)
	}
	if info.Next > info.Oldest {
		rl.sh.stats.truncations.Add(1)
	}
	rl.sh.log.Info("replica: the leader's log starts past this one's end: started again there", "topic", topic,
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
func (rl *replicaLog) bindOwners(ctx context.Context, c *peer.Conn, l *storage.Log, batches [][]byte, asked map[uint64]bool) error {
	topic := l.Name()
	ids, err := l.UnboundProducers(batches)
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
	return l.BindProducers(owners)
}

// epochEnds answers where a leader's log of an epoch ends (protocol op
// 18); *peer.Conn is one.
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
func (rl *replicaLog) truncate(ctx context.Context, leader epochEnds, l *storage.Log) error {
	topic := l.Name()
	info, err := l.Info()
	if err != nil {
		return err
	}
	if info.Next == info.Oldest {
		return nil // nothing to cut
	}
	epochs, err := l.Epochs()
	if err != nil {
		return err
	}
	if len(epochs) == 0 {
		return rl.cutTo(l, info.Oldest)
	}
	ask := epochs[len(epochs)-1].Epoch
	for range maxCutRounds {
		found, end, err := leader.EpochEnd(ctx, topic, ask)
		if err != nil {
			return err
		}
		if found == ask || found < 0 { // found < 0: the leader holds no epoch of ours, end is its start
			return rl.cutTo(l, end)
		}
		mineEpoch, mine, err := l.EpochEnd(found)
		if err != nil {
			return err
		}
		if mineEpoch == found || mineEpoch < 0 {
			return rl.cutTo(l, min(mine, end))
		}
		// Neither the leader's answer nor anything after this
		// follower's epoch mineEpoch can be matched: cut there and ask
		// about mineEpoch.
		if err := rl.cutTo(l, mine); err != nil {
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
func (rl *replicaLog) cutTo(l *storage.Log, offset int64) error {
	topic := l.Name()
	info, err := l.Info()
	if err != nil {
		return err
	}
	next, err := l.TruncateAfter(offset)
	if err != nil {
		return fmt.Errorf("replica: topic %q: truncating to %d: %w", topic, offset, err)
	}
	if next < info.Next {
		rl.sh.stats.truncations.Add(1)
		rl.sh.log.Info("replica: truncated to the leader's log", "topic", topic, "from", info.Next, "to", next)
	}
	return nil
}
