package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/haraqa/haraqa/storage"
)

// TestGroupCommitsBatched: 640 group commits from 64 goroutines at once,
// half on the Raft leader and half forwarded by a follower, each answered
// with its own group, take fewer Raft entries than commits: those that
// arrive while an entry is in flight go into the next one together. A
// refused commit in a batch (a conditional commit that does not hold)
// leaves the others of its entry applied.
func TestGroupCommitsBatched(t *testing.T) {
	tc := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tc.eventually("a Raft leader", func(nd *Node) bool { _, ok := nd.Leader(); return ok })
	lead, _ := tc.any().Leader()
	leader := tc.nodes[tc.index(lead.ID)]
	follower := tc.nodes[(tc.index(lead.ID)+1)%3]
	top, err := leader.CreateTopic(ctx, "t", 3)
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 64, 10
	first := leader.raft.LastIndex()
	entries0, commands0 := leader.BatchStats()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		nd := leader
		if w%2 == 1 {
			nd = follower
		}
		wg.Go(func() {
			group := fmt.Sprintf("g%d", w)
			for i := range each {
				r, err := nd.CommitGroup(ctx, GroupChange{Topic: "t", Group: group, Offset: int64(i + 1), Epoch: top.Epoch})
				if err == nil && r.Group.Committed != int64(i+1) {
					err = fmt.Errorf("group %s: commit %d answered %+v", group, i+1, r)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			// A conditional commit that does not hold is refused alone.
			if _, err := nd.CommitGroup(ctx, GroupChange{Topic: "t", Group: group, Offset: 99, Compare: true, Expect: 3, Epoch: top.Epoch}); !errors.Is(err, storage.ErrCommitConflict) {
				errs <- fmt.Errorf("group %s: a commit expecting 3: %v, want a conflict", group, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	commits := int64(workers * (each + 1))
	used := int64(leader.raft.LastIndex() - first)
	entries, commands := leader.BatchStats()
	entries, commands = entries-entries0, commands-commands0
	t.Logf("%d group commits: %d Raft entries (%d through the queue, holding %d commands)", commits, used, entries, commands)
	if commands < commits || used >= commits || entries >= commands {
		t.Fatalf("%d group commits took %d Raft entries (%d through the queue holding %d commands), want fewer entries than commits", commits, used, entries, commands)
	}
	tc.eventually("every group at offset 10 on every member", func(nd *Node) bool {
		gs, err := nd.Groups(ctx, "t")
		if err != nil || len(gs) != workers {
			return false
		}
		for _, g := range gs {
			if g.Committed != each {
				return false
			}
		}
		return true
	})
}
