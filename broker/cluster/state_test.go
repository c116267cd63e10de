package cluster

import (
	"errors"
	"slices"
	"testing"
)

func TestStateRules(t *testing.T) {
	s := newState()
	must := func(c Command) {
		t.Helper()
		if err := s.apply(c); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
	}
	refused := func(c Command, want error) {
		t.Helper()
		before, _ := s.Topics["t"]
		var snap Topic
		if before != nil {
			snap = *before.clone()
		}
		if err := s.apply(c); !errors.Is(err, want) {
			t.Fatalf("%+v: %v, want %v", c, err, want)
		}
		if after := s.Topics["t"]; before != nil && (after.Epoch != snap.Epoch || after.Leader != snap.Leader || len(after.ISR) != len(snap.ISR)) {
			t.Fatalf("%+v changed the topic though refused: %+v", c, after)
		}
	}
	must(Command{Op: opMembers, Members: []Member{{ID: "a"}, {ID: "b"}, {ID: "c"}}})
	refused(Command{Op: opCreate, Topic: "t", Replicas: []string{"a", "x"}}, ErrBadCommand)
	refused(Command{Op: opCreate, Topic: "t", Replicas: []string{"a", "a"}}, ErrBadCommand)
	must(Command{Op: opCreate, Topic: "t", Replicas: []string{"b", "a", "c"}})
	refused(Command{Op: opCreate, Topic: "t", Replicas: []string{"a"}}, ErrTopicExists)
	// A create applied twice (a retry of one whose first try committed)
	// succeeds the second time, changing nothing; another create of the
	// same topic, the same placement too, finds it existing.
	must(Command{Op: opCreate, Topic: "u", Replicas: []string{"a", "b"}, Proposal: "p1"})
	must(Command{Op: opCreate, Topic: "u", Replicas: []string{"a", "b"}, Proposal: "p1"})
	if tp := s.Topics["u"]; tp.Epoch != 1 || tp.Version != 1 || tp.Proposal != "p1" || !slices.Equal(tp.Replicas, []string{"a", "b"}) {
		t.Fatalf("a create applied twice: %+v", tp)
	}
	for _, p := range []string{"p2", ""} {
		if err := s.apply(Command{Op: opCreate, Topic: "u", Replicas: []string{"a", "b"}, Proposal: p}); !errors.Is(err, ErrTopicExists) {
			t.Fatalf("create of u by proposal %q: %v, want ErrTopicExists", p, err)
		}
	}
	must(Command{Op: opDelete, Topic: "u"})
	if tp := s.Topics["t"]; tp.Leader != "b" || tp.Epoch != 1 {
		t.Fatalf("created: %+v", tp)
	}
	// A leader change decided under an old epoch is refused.
	refused(Command{Op: opLeader, Topic: "t", Epoch: 0, Leader: "a", ISR: []string{"a"}}, ErrStaleEpoch)
	// The new leader must head the in-sync set, which holds only replicas.
	refused(Command{Op: opLeader, Topic: "t", Epoch: 1, Version: 1, Leader: "a", ISR: []string{"c", "a"}}, ErrBadCommand)
	refused(Command{Op: opLeader, Topic: "t", Epoch: 1, Version: 1, Leader: "a", ISR: []string{"a", "z"}}, ErrBadCommand)
	must(Command{Op: opLeader, Topic: "t", Epoch: 1, Version: 1, Leader: "a", ISR: []string{"a", "c"}})
	if tp := s.Topics["t"]; tp.Leader != "a" || tp.Epoch != 2 {
		t.Fatalf("after the leader change: %+v", tp)
	}
	// An in-sync change keeps the leader and the epoch.
	refused(Command{Op: opISR, Topic: "t", Epoch: 2, Version: 2, Leader: "c", ISR: []string{"c"}}, ErrBadCommand)
	must(Command{Op: opISR, Topic: "t", Epoch: 2, Version: 2, Leader: "a", ISR: []string{"a", "c", "b"}})
	// A second change decided on the same view is refused.
	refused(Command{Op: opISR, Topic: "t", Epoch: 2, Version: 2, Leader: "a", ISR: []string{"a"}}, ErrStaleEpoch)
	if tp := s.Topics["t"]; tp.Epoch != 2 || len(tp.ISR) != 3 {
		t.Fatalf("after the in-sync change: %+v", tp)
	}
	// No leader: the epoch moves, the set stays.
	must(Command{Op: opLeader, Topic: "t", Epoch: 2, Version: 3, Leader: "", ISR: []string{"a", "c", "b"}})
	if tp := s.Topics["t"]; tp.Leader != "" || tp.Epoch != 3 {
		t.Fatalf("offline: %+v", tp)
	}
	refused(Command{Op: opISR, Topic: "t", Epoch: 3, Version: 4, Leader: "", ISR: []string{"a"}}, ErrBadCommand)
	// A truncation: decided under the current epoch only, and the start
	// only grows; it leaves the version (leader and in-sync changes) be.
	refused(Command{Op: opStart, Topic: "t", Epoch: 2, Offset: 10}, ErrStaleEpoch)
	refused(Command{Op: opStart, Topic: "t", Epoch: 3, Offset: -1}, ErrBadCommand)
	refused(Command{Op: opStart, Topic: "u", Epoch: 3, Offset: 1}, ErrTopicNotFound)
	must(Command{Op: opStart, Topic: "t", Epoch: 3, Offset: 10})
	must(Command{Op: opStart, Topic: "t", Epoch: 3, Offset: 4})
	if tp := s.Topics["t"]; tp.Start != 10 || tp.Version != 4 {
		t.Fatalf("after truncations to 10 and 4: %+v, want start 10, version 4", tp)
	}
	if c := s.Clone().Topics["t"]; c.Start != 10 {
		t.Fatalf("a clone lost the start: %+v", c)
	}
	must(Command{Op: opDelete, Topic: "t"})
	refused(Command{Op: opDelete, Topic: "t"}, ErrTopicNotFound)
	refused(Command{Op: "nope"}, ErrBadCommand)
}

func TestAnswerRoundTrip(t *testing.T) {
	for _, e := range answerErrs[1:] {
		_, _, err := decodeAnswer(encodeAnswer(0, nil, e))
		if !errors.Is(err, e) || err.Error() != e.Error() {
			t.Fatalf("%v came back as %v", e, err)
		}
	}
	if i, res, err := decodeAnswer(encodeAnswer(42, []byte(`{"x":1}`), nil)); i != 42 || string(res) != `{"x":1}` || err != nil {
		t.Fatalf("index 42: %d, %s, %v", i, res, err)
	}
	if _, _, err := decodeAnswer(nil); err == nil {
		t.Fatal("an empty answer decoded")
	}
}

// TestStepBackKeepsTheLongestLog: replicas stepping back one after the
// other (each restarted after a crash) leave the in-sync set to the one
// whose log ends furthest, by epoch then offset, in whatever order they
// step back; the set never empties, and a leader elected forgets them.
func TestStepBackKeepsTheLongestLog(t *testing.T) {
	ends := map[string]LogEnd{"a": {Epoch: 3, End: 60}, "b": {Epoch: 3, End: 100}, "c": {Epoch: 2, End: 500}}
	for _, order := range [][]string{{"a", "b", "c"}, {"b", "a", "c"}, {"c", "b", "a"}, {"c", "a", "b"}, {"a", "c", "b"}} {
		s := newState()
		for _, id := range []string{"a", "b", "c"} {
			s.Members[id] = Member{ID: id}
		}
		if err := s.apply(Command{Op: opCreate, Topic: "t", Replicas: []string{"a", "b", "c"}}); err != nil {
			t.Fatal(err)
		}
		for _, id := range order {
			e := ends[id]
			e.Topic = "t"
			if err := s.apply(Command{Op: opStepBack, Member: id, Ends: []LogEnd{e}}); err != nil {
				t.Fatal(err)
			}
			if len(s.Topics["t"].ISR) == 0 {
				t.Fatalf("order %v: the in-sync set emptied at %s", order, id)
			}
		}
		tp := s.Topics["t"]
		if !slices.Equal(tp.ISR, []string{"b"}) || tp.Leader != "" || tp.Epoch < 2 {
			t.Fatalf("order %v: %+v, want the in-sync set [b], no leader, a new epoch", order, tp)
		}
		if err := s.apply(Command{Op: opLeader, Topic: "t", Epoch: tp.Epoch, Version: tp.Version, Leader: "b", ISR: []string{"b"}}); err != nil {
			t.Fatal(err)
		}
		if s.Topics["t"].Stepped != nil {
			t.Fatalf("a leader elected: stepped %v kept", s.Topics["t"].Stepped)
		}
	}
	// One stepping back while another leads: the leader stays, and a
	// member not in the set changes nothing.
	s := newState()
	for _, id := range []string{"a", "b", "c"} {
		s.Members[id] = Member{ID: id}
	}
	_ = s.apply(Command{Op: opCreate, Topic: "t", Replicas: []string{"a", "b", "c"}})
	_ = s.apply(Command{Op: opStepBack, Member: "b", Ends: []LogEnd{{Topic: "t", Epoch: 1, End: 9}}})
	_ = s.apply(Command{Op: opStepBack, Member: "b", Ends: []LogEnd{{Topic: "t", Epoch: 1, End: 9}, {Topic: "gone"}}})
	if tp := s.Topics["t"]; tp.Leader != "a" || tp.Epoch != 1 || !slices.Equal(tp.ISR, []string{"a", "c"}) {
		t.Fatalf("a follower stepping back: %+v", tp)
	}
	if err := s.apply(Command{Op: opStepBack}); err == nil {
		t.Fatal("a step back naming no member applied")
	}
}
