package replica

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/storage"
)

// This file: what a member may not do with its replicated logs after a
// restart (noteBoot): leave the in-sync sets its copies may have fallen
// out of (stepBack), and lead again only under a new epoch (relead).

// mustRelead reports whether this member must not lead topic t under its
// epoch: the cluster had it lead under that epoch when it started. Its
// log may then end before what its followers copied (batches in its page
// cache, not yet fsynced, lost with its machine), and batches it took at
// the same offsets under the same epoch would contradict theirs: a
// follower that fetched from past them would keep its own. It asks for
// the lead under a new epoch instead (relead), as Kafka's controller
// elects every leader under a new one; its followers then cut their logs
// back to its end of the old epoch before they copy on (KIP-101). Until
// then it takes no batch (writable: not ready).
func (m *Manager) mustRelead(topic string, t cluster.Topic) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stepping[topic] {
		return true // not until this member is out of the in-sync set (stepBack)
	}
	epoch, ok := m.bootLead[topic]
	if !ok {
		return false
	}
	if epoch != t.Epoch {
		delete(m.bootLead, topic)
		return false
	}
	if !m.releading[topic] && !m.closed {
		m.releading[topic] = true
		m.wg.Add(1)
		go m.relead(topic, t)
	}
	return true
}

// noteBoot, at the first reconcile after the start, notes what this
// member may not do with the replicated topics it holds a copy of (meta:
// the metadata then). If the store's last stop was not clean (a crash, a
// kill -9, a power loss), or recovery found a range of a copy corrupted on
// every volume, that copy may lack batches the in-sync replicas hold and
// acknowledged: it leaves the in-sync set of each such topic (stepBack,
// KIP-966; where it is the last of the set, the set goes to the replica
// that stepped back holding the most), and leads none of them before. A
// damaged copy is cut before its first unreadable offset and copied again
// from the leader (session.setup). The topics it led under an epoch it
// still holds after that are led again only under a new epoch (relead).
func (m *Manager) noteBoot(meta map[string]cluster.Topic) {
	clean := m.store.CleanStart()
	var step []cluster.LogEnd
	m.mu.Lock()
	for name, t := range meta {
		rl := m.logs[name]
		if len(t.Replicas) < 2 || rl == nil {
			continue
		}
		l, err := rl.handle()
		if err != nil {
			continue // none here: a copy created since the start holds nothing lost
		}
		_, damaged, err := l.FirstUnreadable()
		if err != nil {
			continue
		}
		if damaged {
			m.repairing[name] = true
		}
		if (!clean || damaged) && t.InSync(m.cfg.Self) {
			end, err := logEnd(l)
			if err != nil {
				m.log.Error("replica: reading a copy's end after a restart", "topic", name, "err", err)
				continue
			}
			m.stepping[name] = true
			step = append(step, end)
		}
		if t.Leader == m.cfg.Self {
			m.bootLead[name] = t.Epoch
		}
	}
	if len(step) > 0 && !m.closed {
		slices.SortFunc(step, func(a, b cluster.LogEnd) int { return strings.Compare(a.Topic, b.Topic) })
		m.wg.Add(1)
		go m.stepBack(step, clean)
	}
	m.mu.Unlock()
}

// logEnd returns where log l ends: the last epoch it holds batches of
// (0: none recorded) and its next offset.
func logEnd(l *storage.Log) (cluster.LogEnd, error) {
	info, err := l.Info()
	if err != nil {
		return cluster.LogEnd{}, err
	}
	epochs, err := l.Epochs()
	if err != nil {
		return cluster.LogEnd{}, err
	}
	end := cluster.LogEnd{Topic: l.Name(), End: info.Next}
	if len(epochs) > 0 {
		end.Epoch = epochs[len(epochs)-1].Epoch
	}
	return end, nil
}

// stepBack takes this member out of the in-sync sets of topics, its
// logs' ends (cluster.Node.StepBack), trying again until that is
// recorded or the manager closes, then lets it lead them again (once
// back in the in-sync set, or when it is the replica that the last
// member stepping back found holding the most).
func (m *Manager) stepBack(topics []cluster.LogEnd, clean bool) {
	defer m.wg.Done()
	m.log.Warn("replica: leaving the in-sync sets of the replicated topics whose copy here may lack acknowledged batches, until it has caught up",
		"clean_stop", clean, "topics", len(topics))
	pause := 50 * time.Millisecond
	for {
		ctx, cancel := m.untilClosed(createTimeout)
		err := m.node.Load().StepBack(ctx, topics)
		cancel()
		if err == nil {
			break
		}
		m.log.Warn("replica: leaving the in-sync sets after a restart", "err", err)
		select {
		case <-m.done:
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
	m.mu.Lock()
	for _, e := range topics {
		delete(m.stepping, e.Topic)
	}
	m.mu.Unlock()
	m.Poke()
}

// relead asks the Raft group for topic t's lead under its next epoch,
// then has the manager apply the outcome (a failure is asked again on the
// next reconcile).
func (m *Manager) relead(topic string, t cluster.Topic) {
	defer m.wg.Done()
	ctx, cancel := m.untilClosed(createTimeout)
	defer cancel()
	isr := append([]string{m.cfg.Self}, slices.DeleteFunc(slices.Clone(t.ISR), func(id string) bool { return id == m.cfg.Self })...)
	var err error
	if n := m.node.Load(); n == nil {
		err = errStarting
	} else {
		err = n.SetLeader(ctx, topic, t.Epoch, t.Version, m.cfg.Self, isr)
	}
	m.mu.Lock()
	delete(m.releading, topic)
	m.mu.Unlock()
	switch {
	case err == nil:
		m.log.Info("replica: leading again after a restart, under a new epoch", "topic", topic, "was", t.Epoch)
	case errors.Is(err, cluster.ErrStaleEpoch):
		// The topic moved on meanwhile (a failover): the next reconcile
		// applies that.
	default:
		m.log.Warn("replica: asking to lead again after a restart, under a new epoch", "topic", topic, "epoch", t.Epoch, "err", err)
	}
	m.Poke()
}
