package cluster

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
)

// Member is one server of the cluster.
type Member struct {
	// ID is the server's binary protocol address as clients spell it
	// (host:port): the name placement hashes, and the Raft server ID.
	ID string `json:"id"`
	// Raft is the address of its Raft transport (host:port).
	Raft string `json:"raft"`
	// HTTP is the base URL of its HTTP port ("http://host:port").
	HTTP string `json:"http"`
	// Leaving: the member is being removed (Node.RemoveMember). No new
	// topic is placed on it, its replicas move to the others, and once
	// it holds none it leaves the Raft group and the list.
	Leaving bool `json:"leaving,omitempty"`
}

// Topic is what the cluster knows of one replicated topic.
type Topic struct {
	Name string `json:"name"`
	// Replicas are the members holding the topic, in placement order
	// (the first is the preferred leader). Fixed at creation: a
	// membership change moves nothing by itself.
	Replicas []string `json:"replicas"`
	// Leader is the replica that takes produces, "" while none can lead
	// (every in-sync replica is down).
	Leader string `json:"leader"`
	// Epoch is the leader epoch: 1 at creation, one more on every
	// leader change (an offline topic counts as one). Data written under
	// an older epoch that the current leader does not hold is cut.
	Epoch int64 `json:"epoch"`
	// ISR is the in-sync set: the replicas that hold everything
	// acknowledged with acks=all, the leader first. Only they may lead.
	ISR []string `json:"isr"`
	// Version counts the topic's changes (leader or in-sync set): a
	// change must name the version it was decided on, so that of two
	// changes decided on the same view (the controller dropping a member
	// that is down, the leader adding it back) only the first applies.
	Version int64 `json:"version"`
	// Target, while the topic moves (a member joined or is leaving), is
	// the replicas it moves to. Replicas then holds the old ones and the
	// new: the new copy the leader's log as followers, join the in-sync
	// set once caught up, and when every one of Target is in it the
	// controller makes Target the replicas (moveDone).
	Target []string `json:"target,omitempty"`
	// Start is where every replica's log begins at the latest: an admin
	// truncation (opStart) on the leader, never past its high-water mark.
	// Each replica drops what it holds before it; it only grows.
	Start int64 `json:"start,omitempty"`
	// Stepped are the members that left the in-sync set since the topic
	// last had a leader because their copy may lack acknowledged batches
	// (opStepBack), with their logs' ends then. When the last member of
	// the set steps back too, the one of them whose log ends furthest
	// (by epoch, then offset) becomes the set (KIP-966's unclean
	// recovery); a leader elected, or a member back in the set, clears
	// them.
	Stepped map[string]LogEnd `json:"stepped,omitempty"`
	// Proposal is the ID of the create that recorded the topic
	// (Command.Proposal): the same create applied again, a proposer's
	// retry after its first try committed but its answer was lost,
	// succeeds rather than find the topic existing.
	Proposal string `json:"proposal,omitempty"`
}

// LogEnd is where a replica's log of a topic ends: the last leader epoch
// it holds batches of, and its next offset.
type LogEnd struct {
	Topic string `json:"topic,omitempty"`
	Epoch int64  `json:"epoch"`
	End   int64  `json:"end"`
}

// after reports whether log end e is past o: a later epoch, or the same
// one and a larger offset.
func (e LogEnd) after(o LogEnd) bool {
	return e.Epoch > o.Epoch || (e.Epoch == o.Epoch && e.End > o.End)
}

// InSync reports whether id is in the topic's in-sync set.
func (t *Topic) InSync(id string) bool { return slices.Contains(t.ISR, id) }

// IsReplica reports whether id holds the topic.
func (t *Topic) IsReplica(id string) bool { return slices.Contains(t.Replicas, id) }

func (t *Topic) clone() *Topic {
	c := *t
	c.Replicas = slices.Clone(t.Replicas)
	c.ISR = slices.Clone(t.ISR)
	c.Target = slices.Clone(t.Target)
	c.Stepped = maps.Clone(t.Stepped)
	return &c
}

// State is the cluster's metadata: the content of the Raft group. It
// holds no data of a topic, only where the topic lives.
type State struct {
	Members map[string]Member `json:"members"`
	Topics  map[string]*Topic `json:"topics"`
	// Groups are the consumer groups of the replicated topics, by topic
	// and group name (groups.go).
	Groups map[string]map[string]*Group `json:"groups,omitempty"`
}

func newState() *State {
	return &State{Members: map[string]Member{}, Topics: map[string]*Topic{}, Groups: map[string]map[string]*Group{}}
}

// Clone returns a deep copy of the members and topics; its Groups are
// empty (Node.Group and Node.Groups read them).
func (s *State) Clone() *State {
	c := newState()
	for k, m := range s.Members {
		c.Members[k] = m
	}
	for k, t := range s.Topics {
		c.Topics[k] = t.clone()
	}
	return c
}

// MemberIDs returns the members' IDs, sorted.
func (s *State) MemberIDs() []string {
	ids := make([]string, 0, len(s.Members))
	for id := range s.Members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Command ops.
const (
	opMembers  = "members"  // set the member list
	opCreate   = "create"   // create a topic on Replicas
	opDelete   = "delete"   // forget a topic
	opLeader   = "leader"   // a new leader (or none) and in-sync set, under Epoch
	opISR      = "isr"      // a new in-sync set, same leader, under Epoch
	opNoop     = "noop"     // nothing: a member's barrier (Node.Sync)
	opJoin     = "join"     // add Members[0] to the member list (membership.go)
	opLeave    = "leave"    // mark Member (an ID) as leaving
	opForget   = "forget"   // drop Member, a leaving one that holds no replica, from the list
	opMove     = "move"     // start moving Topic to Replicas (its Target), under Epoch and Version
	opMoved    = "moved"    // finish Topic's move: Leader and ISR from the Target, under Epoch and Version
	opStart    = "start"    // raise Topic's Start to Offset, decided by its leader under Epoch
	opHTTP     = "http"     // set the HTTP URL of member Members[0].ID (membership.go)
	opStepBack = "stepback" // Member leaves the in-sync sets of the topics of Ends (applyStepBack)
)

// Command is one change to the State, as the Raft log carries it (JSON).
// Leader and ISR changes carry the epoch they were decided under, and a
// stale one is refused, so that two controllers (an old Raft leader not
// yet aware it lost) cannot both move a topic.
type Command struct {
	Op       string   `json:"op"`
	Topic    string   `json:"topic,omitempty"`
	Replicas []string `json:"replicas,omitempty"`
	Leader   string   `json:"leader,omitempty"`
	ISR      []string `json:"isr,omitempty"`
	Epoch    int64    `json:"epoch,omitempty"`
	Version  int64    `json:"version,omitempty"`
	Members  []Member `json:"members,omitempty"`
	// A group command's arguments (groups.go): Now is when the topic's
	// leader was asked (Unix milliseconds), the time every member
	// judges leases by; TTL a lease's length in milliseconds; Limit the
	// groups one owner may hold.
	Group   string `json:"group,omitempty"`
	Member  string `json:"member,omitempty"`
	Owner   string `json:"owner,omitempty"`
	Offset  int64  `json:"offset,omitempty"`
	Compare bool   `json:"compare,omitempty"`
	Expect  int64  `json:"expect,omitempty"`
	Now     int64  `json:"now,omitempty"`
	TTL     int64  `json:"ttl,omitempty"`
	Limit   int    `json:"limit,omitempty"`
	// Ends are a stepping back member's log ends, by topic (opStepBack).
	Ends []LogEnd `json:"ends,omitempty"`
	// Proposal identifies one create (opCreate) or conditional commit
	// (opGroupCommit with Compare), random, the same in each of its
	// tries: the topic or group records it (Topic.Proposal,
	// Group.Proposal), so that a try after an applied one succeeds.
	Proposal string `json:"proposal,omitempty"`
}

func (c Command) encode() []byte {
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // strings and ints only
	}
	return b
}

// applyStart raises a topic's start (opStart), decided by its leader
// under the topic's current epoch.
func (s *State) applyStart(c Command) error {
	t, ok := s.Topics[c.Topic]
	if !ok {
		return fmt.Errorf("%w: %q", ErrTopicNotFound, c.Topic)
	}
	if c.Epoch != t.Epoch {
		return fmt.Errorf("%w: topic %q is at epoch %d, the truncation was decided at epoch %d", ErrStaleEpoch, c.Topic, t.Epoch, c.Epoch)
	}
	if c.Offset < 0 {
		return fmt.Errorf("%w: topic %q: a start offset of %d", ErrBadCommand, c.Topic, c.Offset)
	}
	t.Start = max(t.Start, c.Offset)
	return nil
}

// applyCreate creates topic c.Topic on c.Replicas (opCreate), led by the
// first under epoch 1, every replica in sync.
// A topic that exists is ErrTopicExists, unless this very create (its
// Proposal) recorded it: a retry of a create whose first try committed
// (Node.commit) then succeeds, changing nothing.
func (s *State) applyCreate(c Command) error {
	if t, ok := s.Topics[c.Topic]; ok {
		if c.Proposal != "" && t.Proposal == c.Proposal {
			return nil
		}
		return fmt.Errorf("%w: %q", ErrTopicExists, c.Topic)
	}
	if len(c.Replicas) == 0 {
		return fmt.Errorf("%w: topic %q with no replicas", ErrBadCommand, c.Topic)
	}
	for i, r := range c.Replicas {
		if _, ok := s.Members[r]; !ok {
			return fmt.Errorf("%w: replica %q of topic %q is not a member", ErrBadCommand, r, c.Topic)
		}
		if slices.Contains(c.Replicas[:i], r) {
			return fmt.Errorf("%w: replica %q of topic %q twice", ErrBadCommand, r, c.Topic)
		}
	}
	s.Topics[c.Topic] = &Topic{Name: c.Topic, Replicas: slices.Clone(c.Replicas),
		Leader: c.Replicas[0], Epoch: 1, ISR: slices.Clone(c.Replicas), Version: 1, Proposal: c.Proposal}
	return nil
}

// applyStepBack takes member c.Member out of the in-sync set of each
// topic of c.Ends that it is in: it restarted after a crash, or part of
// its copy is unreadable, and it may lack batches that were acknowledged
// (Node.StepBack). A topic it led, or that had no leader, is left without
// one under the next epoch, for the controller to elect a live member of
// the set. Where it is the last member of the set, the set becomes the
// one of it and the members that stepped back before it (Topic.Stepped)
// whose log ends furthest: none of them can vouch for its copy, and that
// one holds the most of what was acknowledged; the controller elects it
// under the next epoch when it is live, and the topic waits for it
// otherwise. Not fenced: leaving the set is safe under any view.
func (s *State) applyStepBack(c Command) error {
	if c.Member == "" {
		return fmt.Errorf("%w: a step back names no member", ErrBadCommand)
	}
	for _, e := range c.Ends {
		t, ok := s.Topics[e.Topic]
		if !ok || !t.InSync(c.Member) {
			continue
		}
		rest := slices.DeleteFunc(slices.Clone(t.ISR), func(id string) bool { return id == c.Member })
		if len(rest) > 0 {
			if t.Stepped == nil {
				t.Stepped = map[string]LogEnd{}
			}
			t.Stepped[c.Member] = LogEnd{Epoch: e.Epoch, End: e.End}
			t.ISR = rest
			if t.Leader == c.Member || t.Leader == "" {
				t.Leader = ""
				t.Epoch++
			}
			t.Version++
			continue
		}
		best, end := c.Member, LogEnd{Epoch: e.Epoch, End: e.End}
		for _, id := range slices.Sorted(maps.Keys(t.Stepped)) {
			if o := t.Stepped[id]; t.IsReplica(id) && o.after(end) {
				best, end = id, o
			}
		}
		t.ISR, t.Leader, t.Stepped = []string{best}, "", nil
		t.Epoch++
		t.Version++
	}
	return nil
}

// apply changes s by c, or returns why c is refused (s is then
// unchanged, but for groups holding only an expired lease, which a
// refused new group may have dropped).
func (s *State) apply(c Command) error {
	if isGroupOp(c.Op) {
		return s.applyGroup(c)
	}
	if isMembershipOp(c.Op) {
		return s.applyMembership(c)
	}
	switch c.Op {
	case opNoop:
		return nil
	case opMembers:
		if len(c.Members) == 0 {
			return fmt.Errorf("%w: an empty member list", ErrBadCommand)
		}
		if len(s.Members) > 0 {
			// Recorded once, when the cluster forms: a list that replaced
			// it could drop every member at a stroke.
			return fmt.Errorf("%w: the member list is recorded already: members join and leave one at a time", ErrBadCommand)
		}
		s.Members = map[string]Member{}
		for _, m := range c.Members {
			s.Members[m.ID] = m
		}
		return nil
	case opCreate:
		return s.applyCreate(c)
	case opDelete:
		if _, ok := s.Topics[c.Topic]; !ok {
			return fmt.Errorf("%w: %q", ErrTopicNotFound, c.Topic)
		}
		delete(s.Topics, c.Topic)
		delete(s.Groups, c.Topic)
		return nil
	case opStart:
		return s.applyStart(c)
	case opStepBack:
		return s.applyStepBack(c)
	case opLeader, opISR:
		t, ok := s.Topics[c.Topic]
		if !ok {
			return fmt.Errorf("%w: %q", ErrTopicNotFound, c.Topic)
		}
		if c.Epoch != t.Epoch || c.Version != t.Version {
			return fmt.Errorf("%w: topic %q is at epoch %d version %d, the change was decided at epoch %d version %d", ErrStaleEpoch, c.Topic, t.Epoch, t.Version, c.Epoch, c.Version)
		}
		if len(c.ISR) == 0 {
			return fmt.Errorf("%w: topic %q: an empty in-sync set", ErrBadCommand, c.Topic)
		}
		for i, r := range c.ISR {
			if !t.IsReplica(r) || slices.Contains(c.ISR[:i], r) {
				return fmt.Errorf("%w: topic %q: %q in the in-sync set", ErrBadCommand, c.Topic, r)
			}
		}
		if c.Op == opISR {
			if c.Leader != t.Leader || t.Leader == "" || c.ISR[0] != t.Leader {
				return fmt.Errorf("%w: topic %q: an in-sync set change must keep the leader %q first", ErrBadCommand, c.Topic, t.Leader)
			}
			t.ISR = slices.Clone(c.ISR)
			t.Version++
			for _, id := range t.ISR {
				delete(t.Stepped, id) // back in sync
			}
			return nil
		}
		if c.Leader != "" && c.ISR[0] != c.Leader {
			return fmt.Errorf("%w: topic %q: the new leader %q must be the first of the in-sync set", ErrBadCommand, c.Topic, c.Leader)
		}
		t.Leader, t.ISR = c.Leader, slices.Clone(c.ISR)
		t.Epoch++
		t.Version++
		if t.Leader != "" {
			t.Stepped = nil // every replica follows this leader's log from now on
		}
		return nil
	}
	return fmt.Errorf("%w: unknown op %q", ErrBadCommand, c.Op)
}
