package cluster

import (
	"testing"
	"time"
)

// TestFailingSince: a member whose heartbeat fails counts as failing
// from its last contact; the Raft leader this member took over from, if
// its heartbeats fail within a member timeout of the take-over, from when
// this member last heard from it, before the election; later, or for
// another member, that earlier contact does not count.
func TestFailingSince(t *testing.T) {
	now := time.Now()
	heard := now.Add(-900 * time.Millisecond) // the old leader, last heard before the election
	c := &controller{suspect: leaderContact{id: "old", contact: heard, until: now.Add(time.Second)}}
	for _, tc := range []struct {
		what        string
		id          string
		lastContact time.Time
		at          time.Time
		want        time.Time
	}{
		{"the old leader, no contact as leader", "old", time.Time{}, now, heard},
		{"the old leader, a later contact", "old", now.Add(-100 * time.Millisecond), now, heard},
		{"the old leader, past the window", "old", time.Time{}, now.Add(2 * time.Second), now.Add(2 * time.Second)},
		{"another member", "b", time.Time{}, now, now},
		{"another member with a contact", "b", now.Add(-200 * time.Millisecond), now, now.Add(-200 * time.Millisecond)},
	} {
		if got := c.failingSince(tc.id, tc.lastContact, tc.at); !got.Equal(tc.want) {
			t.Errorf("%s: since %v, want %v", tc.what, got.Sub(now), tc.want.Sub(now))
		}
	}
	c.suspect = leaderContact{}
	if got := c.failingSince("old", time.Time{}, now); !got.Equal(now) {
		t.Errorf("no suspect: since %v, want now", got.Sub(now))
	}
}
