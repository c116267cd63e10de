package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestConsumeGroup: a group starts at the oldest offset, continues from
// its commit, is independent of other groups, and takes -offset only
// while it has not committed.
func TestConsumeGroup(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	for i := 1; i <= 10; i++ {
		produce(t, c, "w", strconv.Itoa(i))
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"consume", "w", "-group", "g1", "-limit", "4"}, "1\n2\n3\n4\n"},
		{[]string{"consume", "w", "-group", "g1", "-limit", "4"}, "5\n6\n7\n8\n"},
		{[]string{"consume", "w", "-group", "g2", "-limit", "2"}, "1\n2\n"},
		{[]string{"consume", "w", "-group", "g1"}, "9\n10\n"},
		{[]string{"consume", "w", "-group", "g1"}, ""}, // at the end: nothing, and no wait
		{[]string{"consume", "w", "-group", "g3", "-offset", "-2"}, "9\n10\n"},
		{[]string{"consume", "w", "-group", "g2", "-offset", "-1", "-limit", "1"}, "3\n"}, // committed: -offset ignored
		{[]string{"consume", "w", "-group", "g5", "-offset", "end"}, ""},                  // a new group from the end
		{[]string{"consume", "w", "-group", "g5"}, ""},                                    // it committed the end
	} {
		if got := ok(t, addr, "", tc.args...); got != tc.want {
			t.Errorf("hrqa %s printed %q, want %q", strings.Join(tc.args, " "), got, tc.want)
		}
	}
	out := ok(t, addr, "", "groups", "list", "w")
	for _, want := range []string{"GROUP", "g1  ", "g2  ", "g3  "} {
		if !strings.Contains(out, want) {
			t.Errorf("groups list lacks %q:\n%s", want, out)
		}
	}
	var v groupJSON
	if err := json.Unmarshal([]byte(ok(t, addr, "", "groups", "info", "w", "g2", "-format", "json")), &v); err != nil {
		t.Fatal(err)
	}
	if v.Committed == nil || *v.Committed != 3 || v.Lag != 7 || v.Next != 10 {
		t.Fatalf("groups info: %+v", v)
	}
	if got := ok(t, addr, "", "groups", "reset", "w", "g2", "-to", "oldest"); !strings.Contains(got, "reads from 0") {
		t.Errorf("reset: %q", got)
	}
	if got := ok(t, addr, "", "consume", "w", "-group", "g2", "-limit", "1"); got != "1\n" {
		t.Errorf("after reset to oldest: %q", got)
	}
	ok(t, addr, "", "groups", "reset", "w", "g2", "-to", "end")
	if got := ok(t, addr, "", "consume", "w", "-group", "g2"); got != "" {
		t.Errorf("after reset to end: %q", got)
	}
	ok(t, addr, "", "groups", "reset", "w", "g2", "-to", "8")
	if got := ok(t, addr, "", "consume", "w", "-group", "g2"); got != "9\n10\n" {
		t.Errorf("after reset to 8: %q", got)
	}
	fails(t, addr, "", `offset 11 is past the end of topic "w"`, "groups", "reset", "w", "g2", "-to", "11")
	ok(t, addr, "", "groups", "delete", "w", "g2")
	if got := ok(t, addr, "", "groups", "info", "w", "g2"); !strings.Contains(got, "committed  -") {
		t.Errorf("after delete:\n%s", got)
	}
	fails(t, addr, "", `offset 11 is outside topic "w": its oldest offset is 0, its next 10`, "consume", "w", "-group", "g4", "-offset", "11")
	fails(t, addr, "", `topic "nope" does not exist`, "consume", "nope", "-group", "g")
	fails(t, addr, "", `topic "nope" does not exist`, "groups", "list", "nope")
	if r := hrqa(t, addr, "", "consume", "w", "-group", "a/b"); r.code != 2 {
		t.Errorf("bad group name: exit %d", r.code)
	}
	if r := hrqa(t, addr, "", "groups", "reset", "w", "g"); r.code != 2 {
		t.Errorf("reset without -to: exit %d", r.code)
	}
}

// TestConsumeGroupBusy: while a member reads the group, consume -group
// fails at once with "busy", and reset and delete are refused.
func TestConsumeGroupBusy(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	produce(t, c, "b", "x")
	g, err := c.NewGroupReader("g", "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	start := time.Now()
	fails(t, addr, "", `group "g" on topic "b" is busy`, "consume", "b", "-group", "g")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("busy took %s: it must not wait", d)
	}
	fails(t, addr, "", "busy", "groups", "reset", "b", "g", "-to", "oldest")
	fails(t, addr, "", "busy", "groups", "delete", "b", "g")
}

// TestConsumeGroupFollow: consume -group -f commits what it printed, also
// when Ctrl-C ends it.
func TestConsumeGroupFollow(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	produce(t, c, "f", "a", "b")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := hrqaCmd(ctx, addr, "consume", "f", "-group", "g", "-f")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := lines(stdout)
	expectLine(t, out, "a")
	expectLine(t, out, "b")
	produce(t, c, "f", "late")
	expectLine(t, out, "late")
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	expectEnd(t, out)
	if code := exitCode(t, cmd.Wait()); code != 0 || stderr.Len() > 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	o, err := c.FetchOffset(ctx, "g", "f")
	if err != nil || o.Committed != 3 || o.Lease != 0 {
		t.Fatalf("after Ctrl-C: %+v, %v", o, err)
	}
}

// TestGroupFlags: the group commands take -topic and -group, in any
// order, as well as TOPIC GROUP; swapped arguments naming an existing
// topic as the group get an error that says so.
func TestGroupFlags(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	for i := 1; i <= 4; i++ {
		produce(t, c, "jobs", strconv.Itoa(i))
	}
	ok(t, addr, "", "consume", "jobs", "-group", "report", "-limit", "2")
	for _, args := range [][]string{
		{"groups", "info", "jobs", "report"},
		{"groups", "info", "-group", "report", "-topic", "jobs"},
		{"groups", "info", "-topic", "jobs", "report"},
		{"groups", "info", "-group", "report", "jobs"},
	} {
		if out := ok(t, addr, "", args...); !strings.Contains(out, "committed  2") {
			t.Errorf("hrqa %s:\n%s", strings.Join(args, " "), out)
		}
	}
	if out := ok(t, addr, "", "groups", "list", "-topic", "jobs"); !strings.Contains(out, "report") {
		t.Errorf("groups list -topic jobs:\n%s", out)
	}
	ok(t, addr, "", "groups", "reset", "-group", "report", "-topic", "jobs", "-to", "oldest")
	fails(t, addr, "", `topic "report" does not exist, but "jobs" is a topic: the topic and the group look swapped`, "groups", "info", "report", "jobs")
	fails(t, addr, "", "look swapped", "groups", "reset", "report", "jobs", "-to", "end")
	fails(t, addr, "", `topic "nope" does not exist`, "groups", "info", "nope", "report")
	for _, args := range [][]string{
		{"groups", "info", "-topic", "jobs"},
		{"groups", "info", "-topic", "jobs", "-group", "report", "extra"},
	} {
		if r := hrqa(t, addr, "", args...); r.code != 2 {
			t.Errorf("hrqa %s: %+v, want a usage error", strings.Join(args, " "), r)
		}
	}
	ok(t, addr, "", "groups", "delete", "-topic", "jobs", "-group", "report")
}
