package cluster

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// controller runs on every member and acts only while its member leads
// the Raft group. It records the member list once, and moves topic
// leadership off members whose Raft heartbeats fail for MemberTimeout:
// the library's failure detection (FailedHeartbeatObservation), no other.
//
// A topic whose leader is down gets the live member of its in-sync set
// whose log ends furthest as leader (elect.go; the first one when none
// tells), under the next epoch; the down member leaves the set. When no
// in-sync member is live the topic is left without a leader, its in-sync
// set as it was ("last replica standing", KIP-966): only a member that
// held everything acknowledged may lead it again, and the first of them
// to come back does. A live leader's followers that are down leave the
// in-sync set under the same epoch.
type controller struct {
	n      *Node
	obs    chan raft.Observation
	pokeCh chan struct{}

	failing map[string]time.Time // member -> when its heartbeats began failing (or its last contact)
	down    map[string]bool
	// downView: a copy of down, with since when, published for the
	// cluster status (down.go); nil while this member does not lead.
	downView atomic.Pointer[map[string]time.Time]
	// ready: topic -> since when its move could end with a new leader
	// (finish).
	ready map[string]time.Time

	// reached: member -> when its cluster port last answered a check
	// (reach), which runs apart from the loop; reaching: checks under way.
	// unreached: when a failed check was last logged.
	reachMu            sync.Mutex
	reached, unreached map[string]time.Time
	reaching           map[string]bool

	// starvedLog: when the warning that this member is out of
	// descriptors was last logged.
	starvedLog time.Time

	// followed is the Raft leader this member last followed and when it
	// last heard from it; suspect is that leader once this member took
	// over the Raft group, until a member timeout after (failingSince).
	followed, suspect leaderContact
}

// leaderContact is a Raft leader and when this member last heard from it.
type leaderContact struct {
	id      string
	contact time.Time
	until   time.Time // suspect: when the earlier contact stops counting
}

func newController(n *Node) *controller {
	return &controller{n: n, obs: make(chan raft.Observation, 256), pokeCh: make(chan struct{}, 1),
		failing: map[string]time.Time{}, down: map[string]bool{},
		reached: map[string]time.Time{}, unreached: map[string]time.Time{}, reaching: map[string]bool{}}
}

// observe registers the controller's observer of the node's Raft group,
// once the group is made (the controller is made before it, since the
// group applies commands, which poke it, from its start).
func (c *controller) observe() {
	c.n.raft.RegisterObserver(raft.NewObserver(c.obs, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation, raft.LeaderObservation:
			return true
		}
		return false
	}))
}

// reachable reports whether m's cluster port answered a check within the
// last member timeout. If not, it starts one, which pokes the controller
// when it succeeds: a blackholed address must not hold up the loop.
func (c *controller) reachable(m Member) bool {
	c.reachMu.Lock()
	defer c.reachMu.Unlock()
	if t, ok := c.reached[m.ID]; ok && time.Since(t) < c.n.cfg.MemberTimeout {
		return true
	}
	if !c.reaching[m.ID] {
		c.reaching[m.ID] = true
		go func() {
			err := c.n.layer.reach(m.Raft, reachTimeout)
			c.reachMu.Lock()
			delete(c.reaching, m.ID)
			warn := false
			if err == nil {
				c.reached[m.ID] = time.Now()
			} else if time.Since(c.unreached[m.ID]) >= refusalLogEvery {
				c.unreached[m.ID] = time.Now()
				warn = true
			}
			c.reachMu.Unlock()
			if err != nil {
				if !warn {
					return
				}
				c.n.log.Warn("cluster: a member not added to the Raft group yet: its cluster port does not answer", "member", m.ID, "raft", m.Raft, "err", err)
				return
			}
			c.poke()
		}()
	}
	return false
}

// poke asks for a reconcile (after a change was applied).
func (c *controller) poke() {
	select {
	case c.pokeCh <- struct{}{}:
	default:
	}
}

// run is the controller's loop: it takes in the Raft group's heartbeat
// and leader observations, and after each wake-up (one of those, a
// poke, or a tick of an eighth of the member timeout) decides, while
// its member leads the group, who is down and what to change.
func (c *controller) run() {
	tick := time.NewTicker(c.n.cfg.MemberTimeout / 8)
	defer tick.Stop()
	leading := false
	for {
		select {
		case <-c.n.done:
			return
		case o := <-c.obs:
			c.observed(o)
		case <-tick.C:
		case <-c.pokeCh:
		}
		if isLeader := c.n.IsLeader(); isLeader != leading {
			leading = isLeader
			c.leadChanged(leading)
		}
		if !leading {
			c.publishDown(false)
			if lc := c.n.raft.LastContact(); c.followed.id != "" && lc.After(c.followed.contact) {
				c.followed.contact = lc
			}
			continue
		}
		c.markDown(time.Now())
		c.publishDown(true)
		c.reconcile()
	}
}

// observed records what the Raft group observed: a member's heartbeats
// failing or resumed, a new leader.
func (c *controller) observed(o raft.Observation) {
	switch d := o.Data.(type) {
	case raft.FailedHeartbeatObservation:
		id := string(d.PeerID)
		if _, ok := c.failing[id]; !ok {
			since := c.failingSince(id, d.LastContact, time.Now())
			c.failing[id] = since
			// Decide once it has failed for the member timeout, not at
			// the tick after.
			time.AfterFunc(time.Until(since.Add(c.n.cfg.MemberTimeout)), c.poke)
		}
	case raft.ResumedHeartbeatObservation:
		id := string(d.PeerID)
		delete(c.failing, id)
		if c.down[id] {
			delete(c.down, id)
			c.n.log.Info("cluster: member back", "member", id)
		}
	case raft.LeaderObservation:
		// A new term: start the view of who is down afresh.
		clear(c.failing)
		clear(c.down)
		clear(c.ready)
		if id := string(d.LeaderID); id != "" && id != c.n.cfg.Self.ID {
			c.followed = leaderContact{id: id, contact: c.n.raft.LastContact()}
		}
	}
}

// leadChanged starts the view of who is down afresh when this member
// takes or loses the Raft group's lead; taking it, the leader it
// followed is a suspect for one member timeout.
func (c *controller) leadChanged(leading bool) {
	clear(c.failing)
	clear(c.down)
	clear(c.ready)
	if leading {
		c.suspect, c.followed = c.followed, leaderContact{}
		c.suspect.until = time.Now().Add(c.n.cfg.MemberTimeout)
	}
}

// markDown takes as down each member whose heartbeats have failed for
// the member timeout by now, unless this member's own dials fail for
// want of descriptors.
func (c *controller) markDown(now time.Time) {
	if c.n.layer.starvedWithin(c.n.cfg.MemberTimeout, now) {
		// This member's own dials fail for want of descriptors: the
		// members whose heartbeats fail may be well. Nobody is taken as
		// down until its dials go through again.
		if now.Sub(c.starvedLog) >= refusalLogEvery {
			c.starvedLog = now
			c.n.log.Warn("cluster: this server is out of file descriptors: members whose heartbeats fail are not taken as down while its own connections cannot be opened",
				"failing", len(c.failing))
		}
		for id := range c.failing {
			c.failing[id] = now
		}
	}
	for id, since := range c.failing {
		if !c.down[id] && now.Sub(since) >= c.n.cfg.MemberTimeout {
			c.down[id] = true
			c.n.log.Warn("cluster: member down", "member", id, "failing_for", now.Sub(since).Round(time.Millisecond))
		}
	}
}

// failingSince returns since when member id counts as failing, its
// heartbeat having failed at now: since its last contact with the Raft
// leader (lastContact, zero when it never had one), and for the leader
// this member took the Raft group over from, whose heartbeats fail within
// a member timeout of that, since this member last heard from it, before
// the election: so that a dead Raft leader's topics move a member timeout
// after it went silent, not after the election that followed too.
// Heartbeats that fail later start from now: a leader that handed the
// group over and lost contact later is not taken as down early.
func (c *controller) failingSince(id string, lastContact, now time.Time) time.Time {
	since := now
	if !lastContact.IsZero() && lastContact.Before(since) {
		since = lastContact
	}
	if s := c.suspect; id == s.id && now.Before(s.until) && !s.contact.IsZero() && s.contact.Before(since) {
		since = s.contact
	}
	return since
}

// reconcile makes the changes the controller owes: the member list
// first (and the Raft group's voters after it, membership.go), then each
// topic whose leader or in-sync set holds a down member or that has no
// leader while an in-sync member is up, then the topics to move. An
// election among several live in-sync members waits up to
// logEndsTimeout for their logs' ends (preferLongest).
func (c *controller) reconcile() {
	var members int
	var cmds []Command
	var elect []int // those of cmds that elect a leader among several live in-sync members
	c.n.fsm.read(func(s *State) {
		members = len(s.Members)
		for _, name := range sortedTopics(s) {
			if cmd, ok := c.decide(s.Topics[name]); ok {
				if cmd.Op == opLeader && cmd.Leader != "" && len(cmd.ISR) > 1 {
					elect = append(elect, len(cmds))
				}
				cmds = append(cmds, cmd)
			}
		}
		cmds = append(cmds, c.moves(s)...)
	})
	c.preferLongest(cmds, elect) // asks the members: not under the fsm's lock
	ctx, cancel := context.WithTimeout(context.Background(), applyTimeout)
	defer cancel()
	if members == 0 {
		if _, _, err := c.n.applyLocal(Command{Op: opMembers, Members: c.n.cfg.Peers}.encode()); err != nil {
			c.n.log.Warn("cluster: recording the member list", "err", err)
		}
	}
	if members > 0 {
		c.voters()
	}
	for _, cmd := range cmds {
		if ctx.Err() != nil || !c.n.IsLeader() {
			return
		}
		_, _, err := c.n.applyLocal(cmd.encode())
		switch {
		case err == nil:
			c.n.log.Info("cluster: topic moved", "topic", cmd.Topic, "op", cmd.Op, "leader", cmd.Leader, "isr", cmd.ISR, "decided_under_epoch", cmd.Epoch)
		case errors.Is(err, ErrStaleEpoch), errors.Is(err, ErrTopicNotFound):
			// changed meanwhile: the next pass decides again
		default:
			c.n.log.Warn("cluster: moving a topic", "topic", cmd.Topic, "err", err)
		}
	}
}

// decide returns the change topic t needs, if any.
func (c *controller) decide(t *Topic) (Command, bool) {
	live := func(id string) bool { return !c.down[id] }
	switch {
	case t.Leader == "" || c.down[t.Leader]:
		cands := slices.DeleteFunc(slices.Clone(t.ISR), func(id string) bool { return id == t.Leader || !live(id) })
		if t.Leader == "" {
			cands = slices.DeleteFunc(slices.Clone(t.ISR), func(id string) bool { return !live(id) })
		}
		if len(cands) == 0 {
			if t.Leader == "" {
				return Command{}, false // stays offline until an in-sync member is back
			}
			// Last replica standing: no leader, the in-sync set kept.
			return Command{Op: opLeader, Topic: t.Name, Epoch: t.Epoch, Version: t.Version, Leader: "", ISR: t.ISR}, true
		}
		return Command{Op: opLeader, Topic: t.Name, Epoch: t.Epoch, Version: t.Version, Leader: cands[0], ISR: cands}, true
	case slices.ContainsFunc(t.ISR, func(id string) bool { return !live(id) }):
		isr := slices.DeleteFunc(slices.Clone(t.ISR), func(id string) bool { return !live(id) })
		return Command{Op: opISR, Topic: t.Name, Epoch: t.Epoch, Version: t.Version, Leader: t.Leader, ISR: isr}, true
	}
	return Command{}, false
}
