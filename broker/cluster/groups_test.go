package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/haraqa/haraqa/storage"
)

// groupState is a State with three members and topic "t" on them.
func groupState(t *testing.T) *State {
	t.Helper()
	s := newState()
	for _, c := range []Command{
		{Op: opMembers, Members: []Member{{ID: "a"}, {ID: "b"}, {ID: "c"}}},
		{Op: opCreate, Topic: "t", Replicas: []string{"a", "b", "c"}},
	} {
		if err := s.apply(c); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestGroupRules(t *testing.T) {
	s := groupState(t)
	do := func(c Command, want error) {
		t.Helper()
		c.Topic = "t"
		if c.Group == "" {
			c.Group = "g"
		}
		if err := s.apply(c); !errors.Is(err, want) || (want == nil) != (err == nil) {
			t.Fatalf("%+v: %v, want %v", c, err, want)
		}
	}
	get := func() Group {
		t.Helper()
		g := s.Groups["t"]["g"]
		if g == nil {
			t.Fatal("group g is gone")
		}
		return *g
	}
	// A lease at time 1000 for 500 ms: another member is refused until
	// 1500 by the command's time, whatever the clock of the member
	// applying it.
	do(Command{Op: opGroupLease, Member: "m1", Now: 1000, TTL: 500, Epoch: 1}, nil)
	do(Command{Op: opGroupLease, Member: "m2", Now: 1499, TTL: 500}, storage.ErrGroupBusy)
	do(Command{Op: opGroupCommit, Member: "m2", Offset: 3, Now: 1200}, storage.ErrGroupBusy)
	do(Command{Op: opGroupCommit, Offset: 3, Now: 1200}, storage.ErrGroupBusy) // no member while one holds it
	do(Command{Op: opGroupDelete, Member: "m1", Now: 1200}, storage.ErrGroupBusy)
	do(Command{Op: opGroupCommit, Member: "m1", Offset: 3, Now: 1200}, nil)
	do(Command{Op: opGroupCommit, Member: "m1", Offset: 5, Compare: true, Expect: 4, Now: 1200}, storage.ErrCommitConflict)
	do(Command{Op: opGroupCommit, Member: "m1", Offset: 5, Compare: true, Expect: 3, Now: 1200, Proposal: "p1"}, nil)
	// The same conditional commit tried again (its first answer lost)
	// succeeds; another one from 3 is a conflict.
	do(Command{Op: opGroupCommit, Member: "m1", Offset: 5, Compare: true, Expect: 3, Now: 1201, Proposal: "p1"}, nil)
	do(Command{Op: opGroupCommit, Member: "m1", Offset: 5, Compare: true, Expect: 3, Now: 1201, Proposal: "p2"}, storage.ErrCommitConflict)
	do(Command{Op: opGroupCommit, Member: "m1", Offset: 5, Compare: true, Expect: 3, Now: 1201}, storage.ErrCommitConflict)
	if g := get(); g.Committed != 5 || g.LeasedBy(1499) != "m1" || g.LeasedBy(1500) != "" {
		t.Fatalf("after the commits: %+v", g)
	}
	// Expired, the lease is anyone's; a renewal moves its end.
	do(Command{Op: opGroupLease, Member: "m2", Now: 1500, TTL: 500}, nil)
	do(Command{Op: opGroupLease, Member: "m2", Now: 1900, TTL: 500}, nil)
	if g := get(); g.Member != "m2" || g.Until != 2400 {
		t.Fatalf("after the renewal: %+v", g)
	}
	// Another member's release does nothing; the holder's frees it and
	// keeps the commit.
	do(Command{Op: opGroupRelease, Member: "m1", Now: 2000}, nil)
	do(Command{Op: opGroupCommit, Member: "m1", Offset: 6, Now: 2000}, storage.ErrGroupBusy)
	do(Command{Op: opGroupRelease, Member: "m2", Now: 2000}, nil)
	if g := get(); g.Committed != 5 || g.LeasedBy(2000) != "" {
		t.Fatalf("after the release: %+v", g)
	}
	// A group with only a lease goes with its release.
	do(Command{Op: opGroupLease, Group: "lone", Member: "m3", Now: 2000, TTL: 500}, nil)
	do(Command{Op: opGroupRelease, Group: "lone", Member: "m3", Now: 2000}, nil)
	if _, ok := s.Groups["t"]["lone"]; ok {
		t.Fatal("a released lease-only group stayed")
	}
	// A deposed leader's change, asked under an older epoch, is refused.
	if err := s.apply(Command{Op: opLeader, Topic: "t", Epoch: 1, Version: 1, Leader: "b", ISR: []string{"b", "c"}}); err != nil {
		t.Fatal(err)
	}
	do(Command{Op: opGroupCommit, Offset: 9, Now: 2100, Epoch: 1}, ErrStaleEpoch)
	do(Command{Op: opGroupCommit, Offset: 9, Now: 2100, Epoch: 2}, nil)
	do(Command{Op: opGroupDelete, Now: 2100}, nil)
	if _, ok := s.Groups["t"]["g"]; ok {
		t.Fatal("a deleted group stayed")
	}
	do(Command{Op: opGroupCommit, Topic: "t", Now: 2100, Group: "h", Offset: 1}, nil)
	if err := s.apply(Command{Op: opGroupCommit, Topic: "x", Group: "g", Now: 1}); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("a group of an unknown topic: %v", err)
	}
	// A topic's deletion takes its groups.
	if err := s.apply(Command{Op: opDelete, Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	if len(s.Groups["t"]) != 0 {
		t.Fatalf("groups outlived their topic: %v", s.Groups["t"])
	}
}

func TestGroupLimits(t *testing.T) {
	s := groupState(t)
	for i := range storage.MaxGroupsPerTopic {
		c := Command{Op: opGroupCommit, Topic: "t", Group: fmt.Sprint("g", i), Now: 1, Owner: "x"}
		if i%2 == 1 {
			c = Command{Op: opGroupLease, Topic: "t", Group: fmt.Sprint("g", i), Member: "m", Now: 1, TTL: 100, Owner: "y"}
		}
		if err := s.apply(c); err != nil {
			t.Fatalf("group %d: %v", i, err)
		}
	}
	if err := s.apply(Command{Op: opGroupCommit, Topic: "t", Group: "one-more", Now: 2}); !errors.Is(err, storage.ErrTooManyGroups) {
		t.Fatalf("past the topic's limit: %v", err)
	}
	// The leases expire: their groups make room.
	if err := s.apply(Command{Op: opGroupCommit, Topic: "t", Group: "one-more", Now: 101}); err != nil {
		t.Fatalf("after the leases expired: %v", err)
	}
	// The owner's quota counts its groups over the topics.
	if err := s.apply(Command{Op: opCreate, Topic: "u", Replicas: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.apply(Command{Op: opGroupCommit, Topic: "u", Group: "g", Now: 101, Owner: "x", Limit: 512}); !errors.Is(err, storage.ErrTooManyGroups) {
		t.Fatalf("owner x holds 512 groups, its limit: %v", err)
	}
	if err := s.apply(Command{Op: opGroupCommit, Topic: "u", Group: "g", Now: 101, Owner: "x", Limit: 513}); err != nil {
		t.Fatal(err)
	}
}

// TestGroupsSnapshot: the groups go through a snapshot and its restore,
// as a member that joins late or restarts gets them.
func TestGroupsSnapshot(t *testing.T) {
	f := &fsm{st: groupState(t)}
	for _, c := range []Command{
		{Op: opGroupCommit, Topic: "t", Group: "g", Offset: 7, Owner: "o", Now: 1},
		{Op: opGroupLease, Topic: "t", Group: "g", Member: "m", Now: 1, TTL: 60000},
	} {
		if err, ok := f.Apply(&raft.Log{Index: 1, Data: c.encode()}).(error); ok {
			t.Fatal(err)
		}
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := snap.Persist(&sink{Writer: &buf}); err != nil {
		t.Fatal(err)
	}
	g := &fsm{st: newState()}
	if err := g.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(g.st.Groups)
	want, _ := json.Marshal(f.st.Groups)
	if !bytes.Equal(got, want) || g.st.Groups["t"]["g"].Until != 60001 {
		t.Fatalf("restored %s, want %s", got, want)
	}
}

type sink struct{ io.Writer }

func (sink) ID() string    { return "test" }
func (sink) Cancel() error { return nil }
func (sink) Close() error  { return nil }
