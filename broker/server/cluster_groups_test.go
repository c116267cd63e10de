package server_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
)

// TestClusterGroupsSurviveFailover: a replicated topic's group offsets
// and lease are the cluster's, not its leader's: with the leader
// stopped, the new leader has the group's commit, the member keeps its
// lease (another member is still refused), and the member's GroupReader
// goes on reading and committing where it was, every message once.
func TestClusterGroupsSurviveFailover(t *testing.T) {
	tc := startTestCluster(t, 3, 3, 2)
	c := dialAll(t, tc.addrs, client.WithIdempotence(true))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const topic, group = "jobs", "workers"
	if err := c.CreateTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	produced := 0
	produce := func(n int) {
		t.Helper()
		for range n {
			if _, err := c.Produce(ctx, topic, fmt.Appendf(nil, "j%04d", produced)); err != nil {
				t.Fatalf("produce %d: %v", produced, err)
			}
			produced++
		}
	}
	produce(100)
	st := waitTopic(t, dialOne(t, tc.addrs[0]), topic, "100 messages on three replicas", func(st topicStatus) bool {
		return st.Leader != "" && len(st.ISR) == 3 && st.HighWater == 100
	})

	gr, err := c.NewGroupReader(group, topic, client.WithLeaseDuration(8*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer gr.Close()
	var got []string
	read := func(upTo int) {
		t.Helper()
		for len(got) < upTo {
			msgs, err := gr.Next(ctx)
			if err != nil {
				t.Fatalf("after %d messages: %v", len(got), err)
			}
			for _, m := range msgs {
				got = append(got, string(m.Value))
			}
		}
	}
	read(40)
	if err := gr.CommitTo(ctx, 40); err != nil {
		t.Fatal(err)
	}
	other := dialAll(t, tc.addrs)
	busy := func(when string) {
		t.Helper()
		g2, err := other.NewGroupReader(group, topic, client.WithoutLeaseWait())
		if err != nil {
			t.Fatal(err)
		}
		defer g2.Close()
		if _, err := g2.Start(ctx); !errors.Is(err, client.ErrGroupBusy) {
			t.Fatalf("%s: another member started on a leased group: %v", when, err)
		}
	}
	busy("before the failover")

	old := st.Leader
	tc.stop(tc.index(old))
	var live string
	for _, a := range tc.addrs {
		if a != old {
			live = a
		}
	}
	waitTopic(t, dialOne(t, live), topic, "a new leader", func(st topicStatus) bool { return st.Leader != old && st.Leader != "" })
	o, err := other.FetchOffset(ctx, group, topic)
	if err != nil || o.Committed != 40 || o.Lease <= 0 {
		t.Fatalf("on the new leader the group is %+v, %v: want its commit 40 and a lease", o, err)
	}
	busy("after the failover")

	// The member goes on: its reader follows the new leader, its commit
	// and renewals go to it.
	produce(50)
	read(produced)
	if err := gr.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if want := fmt.Sprintf("j%04d", i); v != want {
			t.Fatalf("message %d is %q, want %q (read %d)", i, v, want, len(got))
		}
	}
	if len(got) != produced {
		t.Fatalf("read %d messages, produced %d", len(got), produced)
	}
	if o, err = other.FetchOffset(ctx, group, topic); err != nil || o.Committed != int64(produced) {
		t.Fatalf("after the commit: %+v, %v", o, err)
	}
	// Released, the lease is another's, at the committed offset.
	if err := gr.Close(); err != nil {
		t.Fatal(err)
	}
	g3, err := other.NewGroupReader(group, topic, client.WithoutLeaseWait())
	if err != nil {
		t.Fatal(err)
	}
	defer g3.Close()
	if o, err := g3.Start(ctx); err != nil || o.Start != int64(produced) {
		t.Fatalf("a second member after the release: %+v, %v", o, err)
	}
	gs, err := other.ListGroups(ctx, topic)
	if err != nil || len(gs) != 1 || gs[0].Group != group || gs[0].Committed != int64(produced) {
		t.Fatalf("groups listed: %+v, %v", gs, err)
	}
}
