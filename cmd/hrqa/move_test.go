package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
)

// topics move copies a truncated topic with its offsets and a group to
// another server and deletes it from the first; errors name the server.
func TestTopicsMove(t *testing.T) {
	t.Parallel()
	from, c := server(t)
	to, d := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	produce(t, c, "orders", "a", "b", "c")
	produce(t, c, "orders", "d", "e")
	if _, err := c.Truncate(ctx, "orders", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.CommitOffset(ctx, "billing", "orders", 4); err != nil {
		t.Fatal(err)
	}
	want := ok(t, from, "", "consume", "orders", "-offset", "1", "-format", "json")

	if r := hrqa(t, from, "", "topics", "move", "orders"); r.code != 2 || !strings.Contains(r.stderr, "-to") {
		t.Errorf("move without -to: %+v, want a usage error", r)
	}
	fails(t, from, "", `topic "missing" does not exist on `+from, "topics", "move", "missing", "-to", to)
	produce(t, d, "orders", "theirs")
	fails(t, from, "", to+" already holds messages of topic \"orders\"", "topics", "move", "orders", "-to", to)
	if err := d.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}

	out := ok(t, from, "", "topics", "move", "orders", "-to", to)
	if out != "moved orders to "+to+": offsets 1 to 5, 2 batches, 1 group\n" {
		t.Errorf("topics move printed %q", out)
	}
	fails(t, from, "", `topic "orders" does not exist`, "topics", "info", "orders")
	if got := ok(t, to, "", "consume", "orders", "-offset", "1", "-format", "json"); got != want {
		t.Errorf("consume on the new server: %q, want %q", got, want)
	}
	if g, err := d.FetchOffset(ctx, "billing", "orders"); err != nil || g.Committed != 4 {
		t.Errorf("group on the new server: %+v, %v", g, err)
	}

	// The destination is down: the error names it, the source stays.
	produce(t, c, "left", "x")
	s := brokertest.Start(t, 1)
	gone := s.Addr
	s.Close()
	r := hrqa(t, from, "", "topics", "move", "left", "-to", gone)
	if r.code != 1 || !strings.Contains(r.stderr, gone) {
		t.Errorf("move to a stopped server: %+v, want an error naming %s", r, gone)
	}
	if _, err := c.TopicInfo(ctx, "left"); err != nil {
		t.Errorf("source after a failed move: %v", err)
	}
}
