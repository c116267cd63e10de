package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/storage"
)

func TestTopics(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	if out := ok(t, addr, "", "topics", "list"); out != "" {
		t.Errorf("list of no topics printed %q", out)
	}
	ok(t, addr, "", "topics", "create", "orders.eu")
	ok(t, addr, "", "topics", "create", "orders.us")
	ok(t, addr, "", "topics", "create", "users")
	fails(t, addr, "", `topic "users" already exists`, "topics", "create", "users")
	fails(t, addr, "", `invalid topic name "a/b"`, "topics", "create", "a/b")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"topics", "list"}, "orders.eu\norders.us\nusers\n"},
		{[]string{"topics", "list", "orders."}, "orders.eu\norders.us\n"},
		{[]string{"topics", "list", "-match", "s$"}, "orders.us\nusers\n"},
		{[]string{"topics", "list", "orders", "-match", "eu"}, "orders.eu\n"},
		{[]string{"topics", "list", "nothing"}, ""},
	} {
		if got := ok(t, addr, "", tc.args...); got != tc.want {
			t.Errorf("hrqa %s printed %q, want %q", strings.Join(tc.args, " "), got, tc.want)
		}
	}

	produce(t, c, "users", "ann", "bob", "cid")
	out := ok(t, addr, "", "topics", "info", "users")
	for _, want := range []string{"topic     users\n", "oldest    0\n", "next      3\n", "messages  3\n", "segments  1\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("info printed\n%s\nwithout %q", out, want)
		}
	}
	var info struct {
		Topic                         string
		Oldest, Next, Messages, Bytes int64
		Segments                      int
	}
	if err := json.Unmarshal([]byte(ok(t, addr, "", "topics", "info", "-format", "json", "users")), &info); err != nil {
		t.Fatal(err)
	}
	if info.Topic != "users" || info.Oldest != 0 || info.Next != 3 || info.Messages != 3 || info.Bytes <= 0 || info.Segments != 1 {
		t.Errorf("info -format json: %+v", info)
	}

	ok(t, addr, "", "topics", "delete", "users")
	fails(t, addr, "", `topic "users" does not exist`, "topics", "delete", "users")
	fails(t, addr, "", `topic "users" does not exist`, "topics", "info", "users")
	if got := ok(t, addr, "", "topics", "list"); got != "orders.eu\norders.us\n" {
		t.Errorf("list after delete printed %q", got)
	}
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	// One segment per batch, so the server can drop exactly the batches
	// before an offset or a time.
	addr, c := server(t, func(o *storage.Options, _ *broker.Config) { o.Entries = 1 })
	ctx := context.Background()
	produce(t, c, "t", "a", "b", "c")
	mark := time.Now()
	produce(t, c, "t", "d", "e")
	produce(t, c, "t", "f")
	produce(t, c, "t", "g")

	if out := ok(t, addr, "", "truncate", "t", "-before", "1h"); out != "truncated t: oldest offset now 0\n" {
		t.Errorf("truncate -before 1h printed %q", out)
	}
	if out := ok(t, addr, "", "truncate", "-before", mark.Format(time.RFC3339Nano), "t"); out != "truncated t: oldest offset now 3\n" {
		t.Errorf("truncate -before %s printed %q", mark.Format(time.RFC3339Nano), out)
	}
	if got := ok(t, addr, "", "consume", "t"); got != "d\ne\nf\ng\n" {
		t.Errorf("consume after truncating printed %q", got)
	}
	if out := ok(t, addr, "", "truncate", "t", "-before", "5"); out != "truncated t: oldest offset now 5\n" {
		t.Errorf("truncate -before 5 printed %q", out)
	}
	if out := ok(t, addr, "", "truncate", "t", "-before", "-1"); out != "truncated t: oldest offset now 6\n" {
		t.Errorf("truncate -before -1 printed %q", out)
	}
	if info, err := c.TopicInfo(ctx, "t"); err != nil || info.Oldest != 6 || info.Next != 7 {
		t.Errorf("after truncating: %+v, %v; want oldest 6, next 7", info, err)
	}
	fails(t, addr, "", `offset 99 is past the end of topic "t": its next offset is 7`, "truncate", "t", "-before", "99")
	fails(t, addr, "", `topic "nope" does not exist`, "truncate", "nope", "-before", "1")
	fails(t, addr, "", `topic "nope" does not exist`, "truncate", "nope", "-before", "2025-01-02T15:04:05Z")
	fails(t, addr, "", `offset 0 is outside topic "t": its oldest offset is 6, its next 7`, "consume", "t", "-offset", "0")
}

// TestTopicNameWithColonAndAt: the names the original haraqa's examples use
// work on the binary port too, end to end.
func TestTopicNameWithColonAndAt(t *testing.T) {
	t.Parallel()
	addr, _ := server(t)
	name := "chat:bob@example.com:alice@example.com"
	ok(t, addr, "", "produce", name, "hi")
	if out := ok(t, addr, "", "consume", name); out != "hi\n" {
		t.Fatalf("hrqa consume %s: %q, want %q", name, out, "hi\n")
	}
	if out := ok(t, addr, "", "topics", "list"); !strings.Contains(out, name) {
		t.Fatalf("hrqa topics list: %q lacks %s", out, name)
	}
}
