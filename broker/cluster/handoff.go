package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// handOffCommandTimeout bounds each change of a hand-off: a member that
// stops after its group lost its quorum waits no longer for it.
const handOffCommandTimeout = time.Second

// HandOff gives the others, before this member stops, what they would
// otherwise take from it only once its heartbeats had failed for
// MemberTimeout (Kafka's controlled shutdown): the lead of each topic it
// leads goes to the next member of the topic's in-sync set, under the
// next epoch, and it leaves the in-sync set of each topic it follows in
// sync, so that acks=all stops waiting for it. A topic whose in-sync set
// is this member alone is left as it is (the last replica standing). If
// this member leads the Raft group, that lead goes to another voter too.
//
// Each change is an ordinary one, decided on the topic's epoch and
// version as committed when the hand-off begins (a barrier first): one
// the metadata moved past meanwhile is refused as stale, and decided
// again (up to handOffPasses times). The caller stops following its
// leaders first, so that no leader adds it back to an in-sync set. It
// returns the first failure (no leader, no quorum); the member stops
// either way, and the controller finishes what is left.
func (n *Node) HandOff(ctx context.Context) error {
	for range handOffPasses {
		// Decide on the metadata as committed now, not as last applied
		// here: a member back moments ago may not have applied its own
		// return to an in-sync set yet, and a change decided on a view
		// the metadata had moved past is refused as stale.
		sctx, cancel := context.WithTimeout(ctx, handOffCommandTimeout)
		err := n.Sync(sctx)
		cancel()
		if err != nil {
			return fmt.Errorf("cluster: handing off: %w", err)
		}
		stale, err := n.handOffOnce(ctx)
		if err != nil {
			return err
		}
		if !stale {
			break
		}
	}
	if n.IsLeader() && n.voterCount() > 1 {
		if err := n.raft.LeadershipTransfer().Error(); err != nil {
			return fmt.Errorf("cluster: handing off the Raft lead: %w", err)
		}
	}
	return nil
}

// handOffPasses bounds the passes of a hand-off whose changes the
// metadata moved past.
const handOffPasses = 3

// handOffOnce proposes the hand-off's changes as this member sees the
// metadata, and reports whether one was refused as stale. It stops at the
// first other failure: no leader, or no quorum to commit (the others are
// down), which the rest would wait for as long.
func (n *Node) handOffOnce(ctx context.Context) (stale bool, err error) {
	for _, c := range n.handOffs() {
		cctx, cancel := context.WithTimeout(ctx, handOffCommandTimeout)
		err := n.Propose(cctx, c)
		cancel()
		switch {
		case err == nil:
			n.log.Info("cluster: handed off", "topic", c.Topic, "op", c.Op, "leader", c.Leader, "isr", c.ISR)
		case errors.Is(err, ErrStaleEpoch):
			stale = true
		case errors.Is(err, ErrTopicNotFound):
		default:
			return stale, fmt.Errorf("cluster: handing off topic %q: %w", c.Topic, err)
		}
	}
	return stale, nil
}

// handOffs returns the changes of a hand-off as this member has applied
// the metadata.
func (n *Node) handOffs() []Command {
	self := n.cfg.Self.ID
	var cmds []Command
	n.fsm.read(func(s *State) {
		for _, name := range sortedTopics(s) {
			t := s.Topics[name]
			if t.Leader == "" || !t.InSync(self) {
				continue
			}
			rest := slices.DeleteFunc(slices.Clone(t.ISR), func(id string) bool { return id == self })
			switch {
			case len(rest) == 0:
			case t.Leader == self:
				cmds = append(cmds, Command{Op: opLeader, Topic: name, Epoch: t.Epoch, Version: t.Version, Leader: rest[0], ISR: rest})
			default:
				cmds = append(cmds, Command{Op: opISR, Topic: name, Epoch: t.Epoch, Version: t.Version, Leader: t.Leader, ISR: rest})
			}
		}
	})
	return cmds
}

// voterCount counts the Raft group's voters, 0 if the configuration cannot be
// read.
func (n *Node) voterCount() int {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	k := 0
	for _, sv := range f.Configuration().Servers {
		if sv.Suffrage == raft.Voter {
			k++
		}
	}
	return k
}
