package client_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/auth"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/storage"
)

// TestOffsetAt: the first offset appended at or after a time, before the
// oldest, after the newest, and in a missing topic.
func TestOffsetAt(t *testing.T) {
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	if _, err := c.Produce(ctx, "t", []byte("a"), []byte("b")); err != nil {
		t.Fatal(err)
	}
	mid := time.Now()
	if _, err := c.Produce(ctx, "t", []byte("c")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		at   time.Time
		want int64
	}{
		{mid, 2},
		{time.Time{}, 0},         // year 1: before any int64 of nanoseconds
		{mid.Add(-time.Hour), 0}, // before the oldest
		{mid.Add(time.Hour), 3},  // after the newest: the next offset
		{time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), 3},
	} {
		if got, err := c.OffsetAt(ctx, "t", tc.at); err != nil || got != tc.want {
			t.Errorf("OffsetAt(%s): %d %v, want %d", tc.at, got, err, tc.want)
		}
	}
	msgs, err := c.Consume(ctx, "t", 2, 10)
	if err != nil || len(msgs) != 1 || string(msgs[0].Value) != "c" {
		t.Fatalf("consume from OffsetAt(mid): %v %v", msgs, err)
	}
	if _, err := c.OffsetAt(ctx, "missing", mid); !errors.Is(err, client.ErrTopicNotFound) {
		t.Fatalf("OffsetAt in a missing topic: %v, want ErrTopicNotFound", err)
	}
}

// TestOffsetAtNeedsConsume: with tokens, OffsetAt needs the consume right.
func TestOffsetAtNeedsConsume(t *testing.T) {
	rules, err := auth.Parse(strings.NewReader(hashHex("writer")+" produce t\n"+hashHex("reader")+" consume t\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	a := auth.New(rules)
	srv := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) { c.Auth = a })
	ctx := testCtx(t)
	w := dial(t, srv.Addr, client.WithToken("writer"))
	if _, err := w.Produce(ctx, "t", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.OffsetAt(ctx, "t", time.Now()); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("OffsetAt with a produce token: %v, want ErrForbidden", err)
	}
	r := dial(t, srv.Addr, client.WithToken("reader"))
	if got, err := r.OffsetAt(ctx, "t", time.Time{}); err != nil || got != 0 {
		t.Fatalf("OffsetAt with a consume token: %d %v, want 0", got, err)
	}
}
