package server_test

import (
	"slices"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
)

// memberLiveness is what cluster status tells of the members' liveness.
type memberLiveness struct {
	RaftLeader string `json:"raft_leader"`
	Members    []struct {
		ID        string `json:"id"`
		Down      bool   `json:"down"`
		DownSince string `json:"down_since"`
	} `json:"members"`
	DownUnknown string `json:"down_unknown"`
}

// down returns the members st shows as down.
func (st memberLiveness) down() []string {
	var ids []string
	for _, m := range st.Members {
		if m.Down {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// TestClusterStatusShowsDownMember: a stopped member shows as down, with
// since when, in the status of the Raft leader and of a member that asks
// the leader; restarted, it is a member again on both.
func TestClusterStatusShowsDownMember(t *testing.T) {
	tc := startTestCluster(t, 3, 3, 2)
	c0 := dialOne(t, tc.addrs[0])
	waitInStep(t, c0)
	leader := waitStatus(t, c0, "a Raft leader", func(st memberLiveness) bool { return st.RaftLeader != "" }).RaftLeader
	li := tc.index(leader)
	victim, asker := (li+1)%3, (li+2)%3
	cl, ca := dialOne(t, tc.addrs[li]), dialOne(t, tc.addrs[asker])
	for _, c := range []*client.Client{cl, ca} {
		waitStatus(t, c, "three members, none down", func(st memberLiveness) bool {
			return len(st.Members) == 3 && len(st.down()) == 0 && st.DownUnknown == ""
		})
	}

	stopped := time.Now()
	tc.stop(victim)
	for name, c := range map[string]*client.Client{"the Raft leader": cl, "a member asking it": ca} {
		st := waitStatus(t, c, tc.addrs[victim]+" down", func(st memberLiveness) bool {
			return slices.Equal(st.down(), []string{tc.addrs[victim]})
		})
		for _, m := range st.Members {
			if !m.Down {
				continue
			}
			since, err := time.Parse(time.RFC3339, m.DownSince)
			if err != nil {
				t.Fatalf("%s: down_since %q: %v", name, m.DownSince, err)
			}
			if since.After(time.Now()) || since.Before(stopped.Add(-time.Minute)) {
				t.Fatalf("%s: down since %s, stopped at %s", name, since, stopped)
			}
		}
	}

	tc.start(victim)
	for _, c := range []*client.Client{cl, ca} {
		waitStatus(t, c, tc.addrs[victim]+" back", func(st memberLiveness) bool {
			return len(st.Members) == 3 && len(st.down()) == 0 && st.DownUnknown == ""
		})
	}
}
