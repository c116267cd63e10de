package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/storage"
)

func produceN(t *testing.T, c *client.Client, topic string, from, n int) {
	t.Helper()
	msgs := make([][]byte, n)
	for i := range msgs {
		msgs[i] = []byte(fmt.Sprint(from + i))
	}
	if _, err := c.Produce(testCtx(t), topic, msgs...); err != nil {
		t.Fatal(err)
	}
}

// readN reads until it has n messages, and returns their values.
func readN(t *testing.T, g *client.GroupReader, n int) []string {
	t.Helper()
	var out []string
	for len(out) < n {
		msgs, err := g.Next(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			out = append(out, string(m.Value))
		}
	}
	return out
}

func TestGroupOffsetMethods(t *testing.T) {
	s := brokertest.Start(t, 2)
	c := dial(t, s.Addr, client.WithAutoCreate(true))
	ctx := testCtx(t)
	produceN(t, c, "work", 0, 10)
	o, err := c.FetchOffset(ctx, "g", "work")
	if err != nil || o.Committed != client.NoOffset || o.Start != 0 || o.Next != 10 {
		t.Fatalf("new group: %+v, %v", o, err)
	}
	if err := c.CommitOffset(ctx, "g", "work", 4); err != nil {
		t.Fatal(err)
	}
	if err := c.CommitOffsetIf(ctx, "g", "work", 6, 3); !errors.Is(err, client.ErrCommitConflict) {
		t.Fatalf("stale commit: %v", err)
	}
	if err := c.CommitOffsetIf(ctx, "g", "work", 6, 4); err != nil {
		t.Fatal(err)
	}
	if err := c.CommitOffsetIf(ctx, "other", "work", 1, client.NoOffset); err != nil {
		t.Fatal(err)
	}
	gs, err := c.ListGroups(ctx, "work")
	if err != nil || len(gs) != 2 || gs[0].Group != "g" || gs[0].Committed != 6 || gs[1].Group != "other" || gs[0].Next != 10 {
		t.Fatalf("list: %+v, %v", gs, err)
	}
	if err := c.DeleteGroup(ctx, "g", "work"); err != nil {
		t.Fatal(err)
	}
	if o, _ := c.FetchOffset(ctx, "g", "work"); o.Committed != client.NoOffset {
		t.Fatalf("after delete: %+v", o)
	}
	if err := c.CommitOffset(ctx, "bad/name", "work", 1); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("bad group: %v", err)
	}
}

// TestGroupReaderContinues: a reader commits on Commit and on Close; the
// next one continues from there; Close without a Commit keeps only what
// was processed (handed out before the last Next).
func TestGroupReaderContinues(t *testing.T) {
	s := brokertest.Start(t, 1)
	c := dial(t, s.Addr, client.WithAutoCreate(true))
	produceN(t, c, "work", 0, 10)
	g, err := c.NewGroupReader("billing", "work")
	if err != nil {
		t.Fatal(err)
	}
	got := readN(t, g, 1)
	if got[0] != "0" {
		t.Fatalf("first message %q", got[0])
	}
	if err := g.CommitTo(testCtx(t), 3); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	g2, _ := c.NewGroupReader("billing", "work")
	if o, err := g2.Start(testCtx(t)); err != nil || o.Start != 3 || o.Committed != 3 {
		t.Fatalf("second reader: %+v, %v", o, err)
	}
	if got := readN(t, g2, 7); got[0] != "3" || got[6] != "9" {
		t.Fatalf("second reader read %v", got)
	}
	// Closed without Commit after one Next: nothing it handed out was
	// processed, so nothing more is committed: at-least-once.
	if err := g2.Close(); err != nil {
		t.Fatal(err)
	}
	if o, _ := c.FetchOffset(testCtx(t), "billing", "work"); o.Committed != 3 {
		t.Fatalf("after close: %+v", o)
	}
}

// TestGroupReaderSecondMember: a second member is refused at once with
// WithoutLeaseWait, and by default waits, taking over from the last
// commit once the first closes; a crashed first member (its lease not
// renewed) is taken over once the lease expires.
func TestGroupReaderSecondMember(t *testing.T) {
	s := brokertest.Start(t, 1)
	c := dial(t, s.Addr, client.WithAutoCreate(true))
	produceN(t, c, "work", 0, 10)
	first, _ := c.NewGroupReader("g", "work")
	readN(t, first, 1)
	if err := first.CommitTo(testCtx(t), 5); err != nil {
		t.Fatal(err)
	}
	busy, _ := c.NewGroupReader("g", "work", client.WithoutLeaseWait())
	if _, err := busy.Start(testCtx(t)); !errors.Is(err, client.ErrGroupBusy) {
		t.Fatalf("second member: %v", err)
	}
	if err := c.CommitOffset(testCtx(t), "g", "work", 0); !errors.Is(err, client.ErrGroupBusy) {
		t.Fatalf("commit from outside the group while leased: %v", err)
	}
	standby, _ := c.NewGroupReader("g", "work")
	done := make(chan []string, 1)
	go func() {
		msgs, err := standby.Next(context.Background())
		if err != nil {
			done <- []string{err.Error()}
			return
		}
		done <- []string{string(msgs[0].Value)}
	}()
	select {
	case v := <-done:
		t.Fatalf("the standby read %v while the lease was held", v)
	case <-time.After(300 * time.Millisecond):
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-done:
		if v[0] != "5" {
			t.Fatalf("standby took over at %v, want 5", v)
		}
	case <-time.After(ioTimeout):
		t.Fatal("the standby did not take over")
	}
	standby.Close()
}

// TestGroupLeaseExpiry: a member that stops renewing (its client gone
// without a Close) loses the group once its lease expires; the next
// member reads from the last commit, and the old member's late commit is
// refused.
func TestGroupLeaseExpiry(t *testing.T) {
	s := brokertest.Start(t, 1)
	c := dial(t, s.Addr, client.WithAutoCreate(true))
	produceN(t, c, "work", 0, 10)
	crashed := dial(t, s.Addr)
	g1, _ := crashed.NewGroupReader("g", "work", client.WithLeaseDuration(300*time.Millisecond))
	readN(t, g1, 1)
	if err := g1.CommitTo(testCtx(t), 2); err != nil {
		t.Fatal(err)
	}
	crashed.Close() // no renewals from here on, no release
	start := time.Now()
	g2, _ := c.NewGroupReader("g", "work")
	if got := readN(t, g2, 1); got[0] != "2" {
		t.Fatalf("took over at %q, want 2", got[0])
	}
	if d := time.Since(start); d > ioTimeout {
		t.Fatalf("takeover took %s", d)
	}
	if err := g2.CommitTo(testCtx(t), 4); err != nil {
		t.Fatal(err)
	}
	g2.Close()
	if o, _ := c.FetchOffset(testCtx(t), "g", "work"); o.Committed != 4 {
		t.Fatalf("after takeover: %+v", o)
	}
}

// TestGroupReaderAutoCommit: with WithAutoCommit, what was processed is
// committed by a later Next.
func TestGroupReaderAutoCommit(t *testing.T) {
	s := brokertest.Start(t, 1)
	c := dial(t, s.Addr, client.WithAutoCreate(true))
	produceN(t, c, "work", 0, 3)
	g, _ := c.NewGroupReader("g", "work", client.WithAutoCommit(time.Nanosecond))
	defer g.Close()
	readN(t, g, 3)
	produceN(t, c, "work", 3, 1)
	readN(t, g, 1)
	if o, _ := c.FetchOffset(testCtx(t), "g", "work"); o.Committed != 3 {
		t.Fatalf("auto commit: %+v", o)
	}
}

// TestGroupAfterTruncate: a group whose committed offset a truncation
// passed reads from the oldest offset.
func TestGroupAfterTruncate(t *testing.T) {
	s := brokertest.Start(t, 1, func(o *storage.Options, _ *broker.Config) { o.Entries = 5 })
	c := dial(t, s.Addr, client.WithAutoCreate(true))
	for i := 0; i < 4; i++ {
		produceN(t, c, "work", i*5, 5)
	}
	if err := c.CommitOffset(testCtx(t), "g", "work", 2); err != nil {
		t.Fatal(err)
	}
	oldest, err := c.Truncate(testCtx(t), "work", 10)
	if err != nil || oldest != 10 {
		t.Fatalf("truncate: %d, %v", oldest, err)
	}
	g, _ := c.NewGroupReader("g", "work")
	defer g.Close()
	if got := readN(t, g, 1); got[0] != "10" {
		t.Fatalf("read %q after the truncation, want 10", got[0])
	}
}
