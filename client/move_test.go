package client_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
)

// TestMoveTopic moves a topic truncated inside a batch, with batches
// appended at different times and a group's committed offset, to another
// server: offsets, messages, append times (OffsetAt) and the group's
// offset are the same there, a reader goes on from the offset it had,
// and the old server no longer has the topic. A destination whose topic
// holds produced messages refuses, and the source stays.
func TestMoveTopic(t *testing.T) {
	ctx := testCtx(t)
	s1, s2 := brokertest.Start(t, 1), brokertest.Start(t, 2)
	a, err := client.Dial(ctx, s1.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := client.Dial(ctx, s2.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := range 6 {
		if _, err := a.Produce(ctx, "m", []byte{'a' + byte(i)}, []byte{'A' + byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Truncate(ctx, "m", 3); err != nil { // inside the second batch
		t.Fatal(err)
	}
	if err := a.CommitOffset(ctx, "g", "m", 7); err != nil {
		t.Fatal(err)
	}
	before, err := a.Consume(ctx, "m", 3, 0)
	if err != nil || len(before) != 9 || before[0].Offset != 3 {
		t.Fatalf("before: %v, %v", before, err)
	}
	want := map[time.Time]int64{}
	for _, m := range before {
		for _, d := range []time.Duration{-time.Millisecond, 0, time.Nanosecond} {
			off, err := a.OffsetAt(ctx, "m", m.Time.Add(d))
			if err != nil {
				t.Fatal(err)
			}
			want[m.Time.Add(d)] = off
		}
	}
	// A consumer that has read [3, 7) on the old server.
	got, readerAt, err := a.ConsumeInto(ctx, nil, "m", 3, 4)
	if err != nil || len(got) != 4 || readerAt != 7 {
		t.Fatal(got, readerAt, err)
	}

	// Refused while the destination holds produced messages of the topic.
	if _, err := b.Produce(ctx, "m", []byte("mine")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.MoveTopic(ctx, "m", b); !errors.Is(err, client.ErrImportRefused) || !strings.Contains(err.Error(), s2.Addr) {
		t.Fatalf("move onto a produced topic: %v, want ErrImportRefused naming %s", err, s2.Addr)
	}
	if _, err := a.TopicInfo(ctx, "m"); err != nil {
		t.Fatalf("source after a refused move: %v", err)
	}
	if err := b.DeleteTopic(ctx, "m"); err != nil {
		t.Fatal(err)
	}

	res, err := a.MoveTopic(ctx, "m", b)
	if err != nil || res.Oldest != 3 || res.Next != 12 || res.Groups != 1 || res.Batches != 5 {
		t.Fatalf("MoveTopic = %+v, %v", res, err)
	}
	if _, err := a.TopicInfo(ctx, "m"); !errors.Is(err, client.ErrTopicNotFound) {
		t.Fatalf("old server after the move: %v, want ErrTopicNotFound", err)
	}
	after, err := b.Consume(ctx, "m", 3, 0)
	if err != nil || !slices.EqualFunc(after, before, func(x, y client.Message) bool {
		return x.Offset == y.Offset && x.Time.Equal(y.Time) && string(x.Value) == string(y.Value)
	}) {
		t.Fatalf("after the move: %v, %v; want %v", after, err, before)
	}
	for at, off := range want {
		if got, err := b.OffsetAt(ctx, "m", at); err != nil || got != off {
			t.Fatalf("OffsetAt(%v) on the new server: %d, %v; want %d", at, got, err, off)
		}
	}
	if g, err := b.FetchOffset(ctx, "g", "m"); err != nil || g.Committed != 7 {
		t.Fatalf("group on the new server: %+v, %v", g, err)
	}
	r, err := b.NewReader("m", readerAt)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, err := r.Next(ctx); err != nil || len(got) == 0 || got[0].Offset != readerAt {
		t.Fatalf("reader on the new server from %d: %v, %v", readerAt, got, err)
	}
	// The moved topic takes produces at its next offset.
	if off, err := b.Produce(ctx, "m", []byte("new")); err != nil || off != 12 {
		t.Fatalf("produce after the move: %d, %v", off, err)
	}
}
