package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/haraqa/haraqa/protocol"
	"github.com/hashicorp/raft"
)

// This file: adding and removing members, and moving topics between
// them. A new server starts with -cluster-join (Config.Join: it does not
// bootstrap) and is added with AddMember: it joins the member list, then
// the Raft group as a voter. RemoveMember marks a member as leaving. The
// controller then moves topics so that each lives where rendezvous
// hashing over the members that are not leaving places it
// (protocol.PlaceN, as at creation): a topic to move gets a Target; its new
// replicas copy the leader's log as followers and join the in-sync set
// once caught up; when every one of the Target is in it, the Target
// becomes the replicas (the leader too, under the next epoch, if the old
// one is not among them), and the members no longer holding it delete
// their copy. A leaving member holding no replica leaves the list, then
// the Raft group. At most maxMoving topics move at a time.

// maxMoving bounds the topics moving at once: each new replica copies a
// whole log from its leader.
const maxMoving = 4

func isMembershipOp(op string) bool {
	switch op {
	case opJoin, opLeave, opForget, opMove, opMoved, opHTTP:
		return true
	}
	return false
}

// ErrMemberBusy: a member that still holds replicas cannot be forgotten.
var ErrMemberBusy = errors.New("cluster: member holds replicas")

// applyMembership applies a membership or move command to s.
func (s *State) applyMembership(c Command) error {
	switch c.Op {
	case opJoin:
		if len(c.Members) != 1 || c.Members[0].ID == "" || c.Members[0].Raft == "" {
			return fmt.Errorf("%w: a join names one member, with an ID and a Raft address", ErrBadCommand)
		}
		m := c.Members[0]
		if old, ok := s.Members[m.ID]; ok {
			if old.Raft != m.Raft || old.HTTP != m.HTTP {
				return fmt.Errorf("%w: member %q is there with other addresses (%s, %s)", ErrBadCommand, m.ID, old.Raft, old.HTTP)
			}
			return nil // joined before
		}
		m.Leaving = false
		s.Members[m.ID] = m
		return nil
	case opHTTP:
		if len(c.Members) != 1 {
			return fmt.Errorf("%w: an HTTP URL change names one member", ErrBadCommand)
		}
		m, ok := s.Members[c.Members[0].ID]
		if !ok {
			return fmt.Errorf("%w: %q is not a member", ErrBadCommand, c.Members[0].ID)
		}
		m.HTTP = c.Members[0].HTTP
		s.Members[m.ID] = m
		return nil
	case opLeave, opForget:
		m, ok := s.Members[c.Member]
		if !ok {
			return fmt.Errorf("%w: %q is not a member", ErrBadCommand, c.Member)
		}
		if c.Op == opLeave {
			if !m.Leaving && s.staying() == 1 {
				return fmt.Errorf("%w: %q is the last member staying", ErrNotEnoughMembers, c.Member)
			}
			m.Leaving = true
			s.Members[c.Member] = m
			return nil
		}
		for _, t := range s.Topics {
			if t.IsReplica(c.Member) || slices.Contains(t.Target, c.Member) {
				return fmt.Errorf("%w: %q still holds topic %q", ErrMemberBusy, c.Member, t.Name)
			}
		}
		delete(s.Members, c.Member)
		return nil
	}
	t, ok := s.Topics[c.Topic]
	if !ok {
		return fmt.Errorf("%w: %q", ErrTopicNotFound, c.Topic)
	}
	if c.Epoch != t.Epoch || c.Version != t.Version {
		return fmt.Errorf("%w: topic %q is at epoch %d version %d, the move was decided at epoch %d version %d", ErrStaleEpoch, c.Topic, t.Epoch, t.Version, c.Epoch, c.Version)
	}
	if c.Op == opMove {
		return s.startMove(t, c.Replicas)
	}
	return t.finishMove(c)
}

// startMove gives t the target replicas: the replicas become the old
// ones followed by the new.
func (s *State) startMove(t *Topic, target []string) error {
	if len(target) == 0 {
		return fmt.Errorf("%w: topic %q: an empty target", ErrBadCommand, t.Name)
	}
	for i, r := range target {
		if m, ok := s.Members[r]; !ok || m.Leaving || slices.Contains(target[:i], r) {
			return fmt.Errorf("%w: topic %q: %q in the target", ErrBadCommand, t.Name, r)
		}
	}
	kept := slices.DeleteFunc(slices.Clone(t.Replicas), func(r string) bool {
		// A replica a previous move added, that this one drops and
		// that has not caught up, holds nothing worth keeping.
		return !slices.Contains(target, r) && !t.InSync(r)
	})
	for _, r := range target {
		if !slices.Contains(kept, r) {
			kept = append(kept, r)
		}
	}
	t.Replicas, t.Target = kept, slices.Clone(target)
	t.Version++
	return nil
}

// finishMove makes t's target its replicas, with c's leader and in-sync
// set (within the target, the leader first); a new leader bumps the
// epoch.
func (t *Topic) finishMove(c Command) error {
	if len(t.Target) == 0 {
		return fmt.Errorf("%w: topic %q is not moving", ErrBadCommand, t.Name)
	}
	if len(c.ISR) == 0 || c.Leader != c.ISR[0] {
		return fmt.Errorf("%w: topic %q: a move ends with a leader heading the in-sync set", ErrBadCommand, t.Name)
	}
	for i, r := range c.ISR {
		if !slices.Contains(t.Target, r) || !t.InSync(r) || slices.Contains(c.ISR[:i], r) {
			return fmt.Errorf("%w: topic %q: %q in the in-sync set after the move", ErrBadCommand, t.Name, r)
		}
	}
	if c.Leader != t.Leader {
		t.Epoch++
	}
	t.Replicas, t.Target = t.Target, nil
	t.Leader, t.ISR = c.Leader, slices.Clone(c.ISR)
	t.Version++
	return nil
}

// AddMember adds m to the cluster: to the member list, then to the Raft
// group as a voter (started with Config.Join, it waits for that). The
// controller then moves topics onto it.
func (n *Node) AddMember(ctx context.Context, m Member) error {
	return n.Propose(ctx, Command{Op: opJoin, Members: []Member{m}})
}

// SetReplicas moves a topic to n replicas, placed as CreateTopic places
// a new topic's (rendezvous hashing over the members not leaving), so
// that the controller keeps them there (ErrTopicMoving while it moves,
// or while maxMoving topics do: each move copies a whole log): its new replicas copy the
// leader's log and join the in-sync set, then the target becomes its
// replicas and the members it left delete their copies. It returns the
// topic as recorded once the move is (nothing to move: as it is).
func (n *Node) SetReplicas(ctx context.Context, name string, replicas int) (Topic, error) {
	if err := n.waitMembers(ctx); err != nil {
		return Topic{}, err
	}
	for try := 0; ; try++ {
		var t Topic
		var want []string
		var err error
		n.fsm.read(func(s *State) {
			tp, ok := s.Topics[name]
			if !ok {
				err = fmt.Errorf("%w: %q", ErrTopicNotFound, name)
				return
			}
			t = *tp.clone()
			if len(t.Target) > 0 {
				err = fmt.Errorf("%w: topic %q moves to %s: change it again once that ends", ErrTopicMoving, name, strings.Join(t.Target, ","))
				return
			}
			var active []string
			for _, id := range s.MemberIDs() {
				if !s.Members[id].Leaving {
					active = append(active, id)
				}
			}
			if replicas > len(active) {
				err = fmt.Errorf("%w: %d replicas asked for topic %q, the cluster has %d members", ErrNotEnoughMembers, replicas, name, len(active))
				return
			}
			for _, i := range protocol.PlaceN(name, active, replicas) {
				want = append(want, active[i])
			}
			moving := 0
			for _, o := range s.Topics {
				if len(o.Target) > 0 {
					moving++
				}
			}
			if moving >= maxMoving && !sameSet(want, t.Replicas) {
				err = fmt.Errorf("%w: %d topics move already, at most %d at once: retry once one has moved", ErrTopicMoving, moving, maxMoving)
			}
		})
		if err != nil || sameSet(want, t.Replicas) {
			return t, err
		}
		err = n.Propose(ctx, Command{Op: opMove, Topic: name, Epoch: t.Epoch, Version: t.Version, Replicas: want})
		if errors.Is(err, ErrStaleEpoch) && try < 3 {
			continue // a leader or in-sync change came first: decide again
		}
		if err != nil {
			return t, err
		}
		t, _ = n.Topic(name)
		return t, nil
	}
}

// RecordHTTP records this member's HTTP URL as it is configured now
// where the Raft group holds another: a member recorded at the cluster's
// first start without TLS, restarted with a certificate (https), or on
// another HTTP port. Redirects to it (307 to a topic's leader) then use
// it. It changes nothing for a member not in the list yet.
func (n *Node) RecordHTTP(ctx context.Context) error {
	self := n.cfg.Self
	var rec Member
	var ok bool
	n.fsm.read(func(s *State) { rec, ok = s.Members[self.ID] })
	if !ok || rec.HTTP == self.HTTP {
		return nil
	}
	if err := n.Propose(ctx, Command{Op: opHTTP, Members: []Member{{ID: self.ID, HTTP: self.HTTP}}}); err != nil {
		return err
	}
	n.log.Info("cluster: this member's HTTP URL recorded anew", "was", rec.HTTP, "now", self.HTTP)
	return nil
}

// RemoveMember marks member id as leaving: the controller moves its
// topics to the others, then drops it from the list and the Raft group.
// The cluster must keep as many members as a topic has replicas.
func (n *Node) RemoveMember(ctx context.Context, id string) error {
	var err error
	n.fsm.read(func(s *State) {
		m, ok := s.Members[id]
		if !ok {
			err = fmt.Errorf("%w: %q is not a member", ErrBadCommand, id)
			return
		}
		staying := s.staying()
		if !m.Leaving {
			staying--
		}
		if staying == 0 {
			err = fmt.Errorf("%w: %q is the last member staying", ErrNotEnoughMembers, id)
			return
		}
		for _, t := range s.Topics {
			need := len(t.Replicas)
			if len(t.Target) > 0 {
				need = len(t.Target)
			}
			if need > staying {
				err = fmt.Errorf("%w: topic %q has %d replicas, %d members would stay", ErrNotEnoughMembers, t.Name, need, staying)
				return
			}
		}
	})
	if err != nil {
		return err
	}
	return n.Propose(ctx, Command{Op: opLeave, Member: id})
}

// staying counts the members not leaving.
func (s *State) staying() int {
	n := 0
	for _, m := range s.Members {
		if !m.Leaving {
			n++
		}
	}
	return n
}

// moves returns the commands that move topics where they belong: the
// moves under way that can finish, and new ones up to maxMoving. It is
// the controller's, on the Raft leader, under the fsm's read lock.
func (c *controller) moves(s *State) []Command {
	var active []string
	for _, id := range s.MemberIDs() {
		if !s.Members[id].Leaving {
			active = append(active, id)
		}
	}
	var cmds []Command
	moving := 0
	for _, name := range sortedTopics(s) {
		t := s.Topics[name]
		if len(t.Target) > 0 {
			moving++
			if cmd, ok := c.finish(t); ok {
				cmds = append(cmds, cmd)
			}
			continue
		}
		if len(active) < len(t.Replicas) {
			continue // nowhere to go
		}
		var want []string
		for _, i := range protocol.PlaceN(name, active, len(t.Replicas)) {
			want = append(want, active[i])
		}
		if sameSet(want, t.Replicas) || moving >= maxMoving {
			continue
		}
		moving++
		cmds = append(cmds, Command{Op: opMove, Topic: name, Epoch: t.Epoch, Version: t.Version, Replicas: want})
	}
	for name := range c.ready {
		if t, ok := s.Topics[name]; !ok || len(t.Target) == 0 {
			delete(c.ready, name)
		}
	}
	return cmds
}

// moveWait is how long the controller leaves the end of a move whose
// live leader is not in the target to that leader, which drains the
// topic first (package replica) so that the new leader holds every batch
// it acknowledged; then the controller ends the move itself.
const moveWait = 10 * time.Second

// finish returns the command that ends t's move, once every replica of
// its target is in its in-sync set: the leader stays if it is in the
// target, else the first live in-sync member of it leads (after
// moveWait, if the leader is live: it ends the move itself before).
func (c *controller) finish(t *Topic) (Command, bool) {
	for _, r := range t.Target {
		if !t.InSync(r) {
			delete(c.ready, t.Name)
			return Command{}, false
		}
	}
	isr := slices.DeleteFunc(slices.Clone(t.ISR), func(r string) bool { return !slices.Contains(t.Target, r) })
	leader := t.Leader
	if !slices.Contains(t.Target, leader) || c.down[leader] {
		if leader != "" && !c.down[leader] {
			if c.ready == nil {
				c.ready = map[string]time.Time{}
			}
			since, ok := c.ready[t.Name]
			if !ok {
				c.ready[t.Name] = time.Now()
				return Command{}, false
			}
			if time.Since(since) < moveWait {
				return Command{}, false
			}
		}
		delete(c.ready, t.Name)
		leader = ""
		for _, r := range isr {
			if !c.down[r] {
				leader = r
				break
			}
		}
		if leader == "" {
			return Command{}, false
		}
	}
	isr = append([]string{leader}, slices.DeleteFunc(isr, func(r string) bool { return r == leader })...)
	return Command{Op: opMoved, Topic: t.Name, Epoch: t.Epoch, Version: t.Version, Leader: leader, ISR: isr}, true
}

// voters brings the Raft configuration in line with the member list:
// a member missing from it is added as a voter, a voter no longer a
// member (forgotten) removed; and a leaving member that holds no
// replica is forgotten first. It runs on the Raft leader.
func (c *controller) voters() {
	f := c.n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	inRaft := map[string]bool{}
	for _, sv := range f.Configuration().Servers {
		inRaft[string(sv.ID)] = true
	}
	var add []Member
	var forget []string
	c.n.fsm.read(func(s *State) {
		for _, id := range s.MemberIDs() {
			m := s.Members[id]
			if !inRaft[id] && !m.Leaving {
				add = append(add, m)
			}
			if m.Leaving && !slices.ContainsFunc(sortedTopics(s), func(name string) bool {
				t := s.Topics[name]
				return t.IsReplica(id) || slices.Contains(t.Target, id)
			}) {
				forget = append(forget, id)
			}
		}
		for id := range inRaft {
			if _, ok := s.Members[id]; !ok && len(s.Members) > 0 {
				forget = append(forget, id)
			}
		}
	})
	for _, m := range add {
		if !c.reachable(m) {
			// A voter that cannot be reached would count toward every
			// quorum and answer none: with as many as the others, no
			// command would commit any more.
			continue
		}
		if err := c.n.raft.AddVoter(raft.ServerID(m.ID), raft.ServerAddress(m.Raft), 0, applyTimeout).Error(); err != nil {
			c.n.log.Warn("cluster: adding a member to the Raft group", "member", m.ID, "err", err)
			continue
		}
		c.n.log.Info("cluster: member added", "member", m.ID, "raft", m.Raft)
	}
	for _, id := range forget {
		if _, _, err := c.n.applyLocal(Command{Op: opForget, Member: id}.encode()); err != nil && !errors.Is(err, ErrBadCommand) {
			c.n.log.Warn("cluster: forgetting a member that left", "member", id, "err", err)
			continue
		}
		if !inRaft[id] {
			continue
		}
		if err := c.n.raft.RemoveServer(raft.ServerID(id), 0, applyTimeout).Error(); err != nil {
			c.n.log.Warn("cluster: removing a member from the Raft group", "member", id, "err", err)
			continue
		}
		c.n.log.Info("cluster: member removed", "member", id)
	}
}

func sortedTopics(s *State) []string {
	names := make([]string, 0, len(s.Topics))
	for name := range s.Topics {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}
