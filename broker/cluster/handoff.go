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
	if err := n.proposeAll(ctx, "handed off", n.stepBacks); err != nil {
		return fmt.Errorf("cluster: handing off: %w", err)
	}
	if n.IsLeader() && n.voterCount() > 1 {
		if err := n.raft.LeadershipTransfer().Error(); err != nil {
			return fmt.Errorf("cluster: handing off the Raft lead: %w", err)
		}
	}
	return nil
}

// StepBack takes this member out of the in-sync set of each topic of
// ends (its logs' ends), because its copy cannot vouch for everything
// acknowledged: it restarted after a crash (its log may have lost a tail
// it had copied or acknowledged) or recovery found a range of it
// corrupted on every volume. A topic it leads is left without a leader,
// under the next epoch, for the controller to elect a live member of the
// in-sync set (KIP-966: a replica that restarted uncleanly is not
// eligible while one that holds everything is). Where it is the last of
// the set, the replica that stepped back with the log that ends furthest
// becomes the set (State.applyStepBack). The member joins the sets again
// as any follower does, once it has caught up. One command, applied
// atomically, so that members stepping back at once cannot each leave
// another as the last.
func (n *Node) StepBack(ctx context.Context, ends []LogEnd) error {
	if err := n.Propose(ctx, Command{Op: opStepBack, Member: n.cfg.Self.ID, Ends: ends}); err != nil {
		return fmt.Errorf("cluster: stepping back: %w", err)
	}
	n.log.Info("cluster: stepped back from the in-sync sets", "topics", len(ends))
	return nil
}

// proposeAll proposes the changes decide returns on the metadata as
// committed (a barrier first), deciding again while one is refused as
// stale, up to handOffPasses times. what names them in the log.
func (n *Node) proposeAll(ctx context.Context, what string, decide func() []Command) error {
	for range handOffPasses {
		// Decide on the metadata as committed now, not as last applied
		// here: a member back moments ago may not have applied its own
		// return to an in-sync set yet, and a change decided on a view
		// the metadata had moved past is refused as stale.
		sctx, cancel := context.WithTimeout(ctx, handOffCommandTimeout)
		err := n.Sync(sctx)
		cancel()
		if err != nil {
			return err
		}
		stale, err := n.proposeOnce(ctx, what, decide())
		if err != nil {
			return err
		}
		if !stale {
			break
		}
	}
	return nil
}

// handOffPasses bounds the passes of a hand-off whose changes the
// metadata moved past.
const handOffPasses = 3

// proposeOnce proposes cmds, and reports whether one was refused as
// stale. It stops at the first other failure: no leader, or no quorum to
// commit (the others are down), which the rest would wait for as long.
func (n *Node) proposeOnce(ctx context.Context, what string, cmds []Command) (stale bool, err error) {
	for _, c := range cmds {
		cctx, cancel := context.WithTimeout(ctx, handOffCommandTimeout)
		err := n.Propose(cctx, c)
		cancel()
		switch {
		case err == nil:
			n.log.Info("cluster: "+what, "topic", c.Topic, "op", c.Op, "leader", c.Leader, "isr", c.ISR)
		case errors.Is(err, ErrStaleEpoch):
			stale = true
		case errors.Is(err, ErrTopicNotFound):
		default:
			return stale, fmt.Errorf("topic %q: %w", c.Topic, err)
		}
	}
	return stale, nil
}

// stepBacks returns the changes of a hand-off as this member has
// applied the metadata: the lead of each topic it leads goes to the next
// member of its in-sync set (it stops gracefully: its log holds
// everything it acknowledged, and its followers copied it, drained), and
// it leaves the in-sync set of each topic it follows in sync.
func (n *Node) stepBacks() []Command {
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
