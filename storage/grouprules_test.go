package storage

import (
	"errors"
	"testing"
	"time"
)

// TestGroupRules: the rules both the store and a cluster's replicated
// topics apply: a live lease refuses others (any one for a deletion), an
// expired one no one; a conditional commit compares; a view starts within
// the topic's offsets.
func TestGroupRules(t *testing.T) {
	now := time.Unix(100, 0)
	leased := GroupState{Committed: 5, Member: "m1", Until: now.Add(time.Second)}
	if err := leased.Busy("t", "g", "m1", now); err != nil {
		t.Fatalf("the holder refused: %v", err)
	}
	if err := leased.Busy("t", "g", "m2", now); !errors.Is(err, ErrGroupBusy) {
		t.Fatalf("another member: %v, want ErrGroupBusy", err)
	}
	if err := leased.Busy("t", "g", "", now); !errors.Is(err, ErrGroupBusy) {
		t.Fatalf("a deletion: %v, want ErrGroupBusy", err)
	}
	if err := leased.Busy("t", "g", "m2", now.Add(time.Second)); err != nil {
		t.Fatalf("an expired lease refused: %v", err)
	}
	if err := NoGroup.Busy("t", "g", "m2", now); err != nil {
		t.Fatalf("no group refused: %v", err)
	}
	if err := leased.Conflict("t", "g", Commit{Compare: true, Expect: 4}); !errors.Is(err, ErrCommitConflict) {
		t.Fatalf("compare 4 with 5: %v, want ErrCommitConflict", err)
	}
	if err := NoGroup.Conflict("t", "g", Commit{Compare: true, Expect: NoOffset}); err != nil {
		t.Fatalf("compare none with none: %v", err)
	}
	if err := CheckCommit("t", "g", Commit{Offset: -1}); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("a negative offset: %v", err)
	}
	if err := CommitPastNext("t", "g", 8, 7); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("past next: %v", err)
	}
	if o := leased.View("g", now, 6, 9); o.Start != 6 || o.Member != "m1" || o.LeaseLeft != time.Second || o.Committed != 5 {
		t.Fatalf("view %+v", o)
	}
	if o := NoGroup.View("g", now, 2, 9); o.Start != 2 || o.Member != "" || o.Committed != NoOffset {
		t.Fatalf("view of no group %+v", o)
	}
	leaseOnly := GroupState{Committed: NoOffset, Member: "m1", Until: now.Add(time.Second)}
	if leaseOnly.Lapsed(now) || !leaseOnly.Lapsed(now.Add(time.Second)) || leased.Lapsed(now.Add(time.Hour)) {
		t.Fatal("lapsed: want only a lease-only group past its lease")
	}
}
