package storage

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// TestExpiredLeasesFreeSlots: one client takes 65,536 leases
// over its own 64 topics, every group of the server (the review's were of
// 100 ms; 2 s here, so that they still live while the test looks). While they
// live they are listed, and another topic's new group is refused naming
// MaxGroups; once they expired, that group's commit and lease succeed at
// once, and the expired leases are neither listed nor counted.
func TestExpiredLeasesFreeSlots(t *testing.T) {
	if testing.Short() {
		t.Skip("65,536 leases")
	}
	s := mustOpen(t, recOpts(t, 1))
	const topics = MaxGroups / MaxGroupsPerTopic
	for i := 0; i <= topics; i++ {
		if err := s.CreateTopic(fmt.Sprintf("t%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := lg(t, s, "t64").Append(protocol.AppendBatch(nil, []byte("m")), AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	start := time.Now()
	for i := 0; i < topics; i++ {
		for j := 0; j < MaxGroupsPerTopic; j++ {
			if _, err := lg(t, s, fmt.Sprintf("t%02d", i)).Lease(fmt.Sprint("g", j), "m", ttl); err != nil {
				t.Fatalf("lease %d on topic %d: %v", j, i, err)
			}
		}
	}
	expiry := time.Now().Add(ttl)
	if time.Since(start) < ttl/2 {
		// The leases still live: they hold their slots, and show.
		if gs, err := lg(t, s, "t00").ListGroups(); err != nil || len(gs) != MaxGroupsPerTopic {
			t.Fatalf("live leases listed: %d, %v", len(gs), err)
		}
		err := lg(t, s, "t64").CommitOffset("victim", Commit{Offset: 1})
		if !errors.Is(err, ErrTooManyGroups) || !strings.Contains(err.Error(), "MaxGroups") {
			t.Fatalf("a group past MaxGroups while every slot is leased: %v", err)
		}
	} else {
		t.Logf("the leases took %s: not checked while live", time.Since(start))
	}
	time.Sleep(time.Until(expiry)) // the leases' own end
	if err := lg(t, s, "t64").CommitOffset("victim", Commit{Offset: 1}); err != nil {
		t.Fatalf("commit after every lease expired: %v", err)
	}
	if _, err := lg(t, s, "t64").Lease("victim2", "m", time.Second); err != nil {
		t.Fatalf("lease after every lease expired: %v", err)
	}
	if gs, err := lg(t, s, "t00").ListGroups(); err != nil || len(gs) != 0 {
		t.Fatalf("expired leases listed: %+v, %v", gs, err)
	}
	stats := s.GroupStats()
	if len(stats) != 1 || len(stats["t64"]) != 2 {
		t.Fatalf("group stats after expiry: %d topics", len(stats))
	}
	if n := s.groupCount.Load(); n != 2 {
		t.Fatalf("%d groups counted, want the 2 live ones", n)
	}
}

// TestPerTokenQuota: a token holds at most MaxGroupsPerToken
// groups (commits and leases, over all topics); past it a new group is
// refused naming -max-groups-per-token, while another token and the
// token's own existing groups go on. The owners of committed groups are
// in the groups file, so a reopen keeps the quota; deleting a group, or
// a lease ending, frees its slot.
func TestPerTokenQuota(t *testing.T) {
	opts := recOpts(t, 2)
	opts.MaxGroupsPerToken = 8
	s := mustOpen(t, opts)
	for _, name := range []string{"a1", "a2", "b"} {
		if err := s.CreateTopic(name); err != nil {
			t.Fatal(err)
		}
		if _, err := lg(t, s, name).Append(protocol.AppendBatch(nil, []byte("m")), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const a, b = "owner-a", "owner-b"
	for i := 0; i < 6; i++ {
		if err := lg(t, s, []string{"a1", "a2"}[i%2]).CommitOffset(fmt.Sprint("c", i), Commit{Offset: 1, Owner: a}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		if _, err := lg(t, s, "a1").LeaseFor(a, fmt.Sprint("l", i), "m", MinLease); err != nil {
			t.Fatal(err)
		}
	}
	leased := time.Now().Add(MinLease)
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrTooManyGroups) || !strings.Contains(err.Error(), "-max-groups-per-token") {
			t.Fatalf("%s past the quota: %v", what, err)
		}
	}
	refused("commit", lg(t, s, "b").CommitOffset("more", Commit{Offset: 1, Owner: a}))
	_, err := lg(t, s, "b").LeaseFor(a, "more", "m", time.Second)
	refused("lease", err)
	// Its own groups go on; another token is not touched.
	if err := lg(t, s, "a1").CommitOffset("c0", Commit{Offset: 0, Owner: a}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		if err := lg(t, s, "b").CommitOffset(fmt.Sprint("b", i), Commit{Offset: 1, Owner: b}); err != nil {
			t.Fatalf("the other token's group %d: %v", i, err)
		}
	}
	// A's leases end: their slots are free again.
	time.Sleep(time.Until(leased))
	if err := lg(t, s, "b").CommitOffset("more", Commit{Offset: 1, Owner: a}); err != nil {
		t.Fatalf("after A's leases expired: %v", err)
	}
	if n := s.ownerGroups(a); n != 7 {
		t.Fatalf("A holds %d groups, want 7", n)
	}
	mustClose(t, s)

	// Reopened: A's 7 committed groups are still its own.
	s = mustOpen(t, opts)
	if n := s.ownerGroups(a); n != 7 {
		t.Fatalf("A holds %d groups after reopen, want 7", n)
	}
	if err := lg(t, s, "a2").CommitOffset("x", Commit{Offset: 1, Owner: a}); err != nil {
		t.Fatal(err)
	}
	refused("commit after reopen", lg(t, s, "a2").CommitOffset("y", Commit{Offset: 1, Owner: a}))
	if err := lg(t, s, "a1").DeleteGroup("c0"); err != nil {
		t.Fatal(err)
	}
	if err := lg(t, s, "a2").CommitOffset("y", Commit{Offset: 1, Owner: a}); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
	// Without a token only MaxGroups applies.
	for i := 0; i < 20; i++ {
		if err := lg(t, s, "b").CommitOffset(fmt.Sprint("anon", i), Commit{Offset: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// Deleting the topic returns its groups to their owners' quotas.
	if err := s.DeleteTopic("b"); err != nil {
		t.Fatal(err)
	}
	if na, nb := s.ownerGroups(a), s.ownerGroups(b); na != 7 || nb != 0 {
		t.Fatalf("after deleting topic b: A %d, B %d groups", na, nb)
	}
}
