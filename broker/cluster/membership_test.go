package cluster

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestMembershipRules(t *testing.T) {
	s := groupState(t) // members a, b, c; topic t on a, b, c led by a
	must := func(c Command) {
		t.Helper()
		if err := s.apply(c); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
	}
	refused := func(c Command, want error) {
		t.Helper()
		if err := s.apply(c); !errors.Is(err, want) {
			t.Fatalf("%+v: %v, want %v", c, err, want)
		}
	}
	refused(Command{Op: opJoin}, ErrBadCommand)
	must(Command{Op: opJoin, Members: []Member{{ID: "d", Raft: "d:1", HTTP: "http://d"}}})
	must(Command{Op: opJoin, Members: []Member{{ID: "d", Raft: "d:1", HTTP: "http://d"}}}) // again: a retry
	refused(Command{Op: opJoin, Members: []Member{{ID: "d", Raft: "d:2"}}}, ErrBadCommand)
	// A member's HTTP URL changes (a certificate added); its Raft address stays.
	refused(Command{Op: opHTTP, Members: []Member{{ID: "x", HTTP: "https://x"}}}, ErrBadCommand)
	refused(Command{Op: opHTTP}, ErrBadCommand)
	must(Command{Op: opHTTP, Members: []Member{{ID: "d", HTTP: "https://d"}}})
	if m := s.Members["d"]; m.HTTP != "https://d" || m.Raft != "d:1" {
		t.Fatalf("after the URL change: %+v", m)
	}
	must(Command{Op: opJoin, Members: []Member{{ID: "d", Raft: "d:1", HTTP: "https://d"}}}) // a retry of its join now
	// A move to d: the replicas hold the old and the new until it ends.
	tp := s.Topics["t"]
	refused(Command{Op: opMove, Topic: "t", Epoch: 1, Version: 0, Replicas: []string{"b", "c", "d"}}, ErrStaleEpoch)
	refused(Command{Op: opMove, Topic: "t", Epoch: 1, Version: 1, Replicas: []string{"b", "x", "d"}}, ErrBadCommand)
	must(Command{Op: opMove, Topic: "t", Epoch: 1, Version: 1, Replicas: []string{"b", "c", "d"}})
	if !slices.Equal(tp.Replicas, []string{"a", "b", "c", "d"}) || !slices.Equal(tp.Target, []string{"b", "c", "d"}) {
		t.Fatalf("moving: %+v", tp)
	}
	// It cannot end before d is in sync, nor with a to-be-dropped leader.
	refused(Command{Op: opMoved, Topic: "t", Epoch: 1, Version: 2, Leader: "b", ISR: []string{"b", "d"}}, ErrBadCommand)
	must(Command{Op: opISR, Topic: "t", Epoch: 1, Version: 2, Leader: "a", ISR: []string{"a", "b", "c", "d"}})
	refused(Command{Op: opMoved, Topic: "t", Epoch: 1, Version: 3, Leader: "a", ISR: []string{"a", "b"}}, ErrBadCommand)
	must(Command{Op: opMoved, Topic: "t", Epoch: 1, Version: 3, Leader: "b", ISR: []string{"b", "c", "d"}})
	if !slices.Equal(tp.Replicas, []string{"b", "c", "d"}) || tp.Target != nil || tp.Leader != "b" || tp.Epoch != 2 {
		t.Fatalf("moved: %+v", tp)
	}
	// a leaves: it holds nothing now, so it may be forgotten; c may not.
	must(Command{Op: opLeave, Member: "a"})
	if !s.Members["a"].Leaving {
		t.Fatal("a is not leaving")
	}
	refused(Command{Op: opMove, Topic: "t", Epoch: 2, Version: 4, Replicas: []string{"a", "b", "c"}}, ErrBadCommand)
	refused(Command{Op: opForget, Member: "c"}, ErrMemberBusy)
	must(Command{Op: opForget, Member: "a"})
	if _, ok := s.Members["a"]; ok {
		t.Fatal("a forgotten but listed")
	}
	refused(Command{Op: opLeave, Member: "a"}, ErrBadCommand)
	// The member list is recorded once: a list that replaced it could
	// drop every member at a stroke.
	refused(Command{Op: opMembers, Members: []Member{{ID: "evil", Raft: "evil:1", HTTP: "http://evil.example"}}}, ErrBadCommand)
	if _, ok := s.Members["evil"]; ok || len(s.Members) != 3 {
		t.Fatalf("after a second member list: %+v", s.Members)
	}
	// The last member staying cannot leave.
	must(Command{Op: opLeave, Member: "b"})
	must(Command{Op: opLeave, Member: "c"})
	refused(Command{Op: opLeave, Member: "d"}, ErrNotEnoughMembers)
}

// TestMovesPlaced: the controller moves a topic where placement over
// the members not leaving puts it, at most maxMoving at a time, and ends
// a move once its target is in sync.
func TestMovesPlaced(t *testing.T) {
	s := newState()
	if err := s.apply(Command{Op: opMembers, Members: []Member{{ID: "a"}, {ID: "b"}, {ID: "c"}}}); err != nil {
		t.Fatal(err)
	}
	names := []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"}
	for _, name := range names {
		if err := s.apply(Command{Op: opCreate, Topic: name, Replicas: []string{"a", "b"}}); err != nil {
			t.Fatal(err)
		}
	}
	c := &controller{down: map[string]bool{}}
	if err := s.apply(Command{Op: opLeave, Member: "a"}); err != nil {
		t.Fatal(err)
	}
	cmds := c.moves(s)
	if len(cmds) != maxMoving {
		t.Fatalf("%d moves started, want %d: %+v", len(cmds), maxMoving, cmds)
	}
	for _, cmd := range cmds {
		if cmd.Op != opMove || slices.Contains(cmd.Replicas, "a") || !sameSet(cmd.Replicas, []string{"b", "c"}) {
			t.Fatalf("a move off a: %+v", cmd)
		}
		if err := s.apply(cmd); err != nil {
			t.Fatal(err)
		}
	}
	if cmds := c.moves(s); len(cmds) != 0 {
		t.Fatalf("moves past the bound: %+v", cmds)
	}
	// c catches up on one: that move ends, led by b, a leading it. While
	// a is live the controller leaves the end to it (it drains the topic
	// first) for moveWait; then it ends the move itself.
	tp := s.Topics[cmds0(t, s)]
	if err := s.apply(Command{Op: opISR, Topic: tp.Name, Epoch: tp.Epoch, Version: tp.Version, Leader: tp.Leader, ISR: append(slices.Clone(tp.ISR), "c")}); err != nil {
		t.Fatal(err)
	}
	if tp.Leader != "a" {
		t.Fatalf("%s led by %q, want a", tp.Name, tp.Leader)
	}
	for range 2 {
		if done := c.moves(s); len(done) != 0 {
			t.Fatalf("the move's end while its live leader may end it: %+v", done)
		}
	}
	c.ready[tp.Name] = time.Now().Add(-moveWait)
	done := c.moves(s)
	if len(done) == 0 || done[0].Op != opMoved || done[0].Topic != tp.Name || done[0].Leader != "b" {
		t.Fatalf("the move's end: %+v", done)
	}
	if err := s.apply(done[0]); err != nil {
		t.Fatal(err)
	}
	if !sameSet(tp.Replicas, []string{"b", "c"}) || tp.Leader != "b" || tp.Epoch != 2 {
		t.Fatalf("after the move: %+v", tp)
	}
	// A leader found down cannot end its topic's move: the controller
	// ends it at once.
	tp = s.Topics[cmds0(t, s)]
	if err := s.apply(Command{Op: opISR, Topic: tp.Name, Epoch: tp.Epoch, Version: tp.Version, Leader: tp.Leader, ISR: append(slices.Clone(tp.ISR), "c")}); err != nil {
		t.Fatal(err)
	}
	c.down["a"] = true
	if done := c.moves(s); len(done) == 0 || done[0].Op != opMoved || done[0].Topic != tp.Name || done[0].Leader != "b" {
		t.Fatalf("the move's end, its leader down: %+v", done)
	}
}

// cmds0 returns the first moving topic.
func cmds0(t *testing.T, s *State) string {
	t.Helper()
	for _, name := range sortedTopics(s) {
		if len(s.Topics[name].Target) > 0 {
			return name
		}
	}
	t.Fatal("no topic moving")
	return ""
}
