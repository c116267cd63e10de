package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/storage"
)

func TestConsumeOffsets(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	for i := range 10 {
		produce(t, c, "t", strconv.Itoa(i))
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"consume", "t"}, "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n"},
		{[]string{"consume", "t", "-offset", "-1"}, "9\n"},
		{[]string{"consume", "-offset", "-3", "t", "-limit", "2"}, "7\n8\n"},
		{[]string{"consume", "t", "-offset=5", "-limit=100"}, "5\n6\n7\n8\n9\n"},
		{[]string{"consume", "t", "-offset", "-100", "-limit", "3"}, "0\n1\n2\n"}, // raised to the oldest
		{[]string{"consume", "t", "-offset", "10"}, ""},                           // the end: nothing yet
		{[]string{"consume", "t", "-offset", "8", "-d", ","}, "8,9,"},
		{[]string{"consume", "t", "-offset", "8", "-0"}, "8\x009\x00"},
		{[]string{"consume", "t", "-offset", "8", `-d=\r\n`}, "8\r\n9\r\n"},
	} {
		if got := ok(t, addr, "", tc.args...); got != tc.want {
			t.Errorf("hrqa %s printed %q, want %q", strings.Join(tc.args, " "), got, tc.want)
		}
	}
	fails(t, addr, "", `offset 11 is outside topic "t": its oldest offset is 0, its next 10`, "consume", "t", "-offset", "11")
}

func TestConsumeMissingTopic(t *testing.T) {
	t.Parallel()
	addr, _ := server(t)
	fails(t, addr, "", `topic "no-such-topic" does not exist`, "consume", "no-such-topic")
	fails(t, addr, "", `topic "no-such-topic" does not exist`, "consume", "no-such-topic", "-f")
	fails(t, addr, "", `invalid topic name "a b"`, "consume", "a b")
}

func TestConsumeJSON(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	before := time.Now()
	produce(t, c, "j", "héllo <&>", "\xff\x00\x01", "", "line\nbreak")
	after := time.Now()
	out := ok(t, addr, "", "consume", "j", "-format", "json")
	if !strings.Contains(out, `"héllo <&>"`) {
		t.Errorf("output does not hold the value as it is: %s", out)
	}
	if n := strings.Count(out, "\n"); n != 4 {
		t.Fatalf("%d lines, want 4:\n%s", n, out)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	for i, want := range []string{"héllo <&>", "\xff\x00\x01", "", "line\nbreak"} {
		var m jsonMessage
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		if m.Offset != int64(i) || m.Time.Before(before.Add(-time.Second)) || m.Time.After(after.Add(time.Second)) ||
			m.Time.Location() != time.UTC {
			t.Errorf("message %d: offset %d, time %v; produced between %v and %v", i, m.Offset, m.Time, before, after)
		}
		value := m.Value
		switch m.Encoding {
		case "":
		case "base64":
			b, err := base64.StdEncoding.DecodeString(m.Value)
			if err != nil {
				t.Fatal(err)
			}
			value = string(b)
		default:
			t.Errorf("message %d: encoding %q", i, m.Encoding)
		}
		if value != want || (m.Encoding == "base64") != (i == 1) {
			t.Errorf("message %d: value %q encoding %q, want %q", i, m.Value, m.Encoding, want)
		}
	}
}

// TestFollow: consume -f prints a message produced after it started, and
// Ctrl-C ends it quietly with status 0.
func TestFollow(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	produce(t, c, "f", "a", "b")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := hrqaCmd(ctx, addr, "consume", "f", "-offset", "-1", "-f")
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
	expectLine(t, out, "b") // the last message, then it waits
	produce(t, c, "f", "late")
	expectLine(t, out, "late")
	produce(t, c, "f", "later", "latest")
	expectLine(t, out, "later")
	expectLine(t, out, "latest")
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	expectEnd(t, out)
	if code := exitCode(t, cmd.Wait()); code != 0 || stderr.Len() > 0 {
		t.Errorf("consume -f after Ctrl-C: exit %d, stderr %q; want 0 and nothing", code, stderr.String())
	}
}

// TestFollowLimit: consume -f -limit N exits by itself after N messages.
func TestFollowLimit(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	if err := c.CreateTopic(context.Background(), "e"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := hrqaCmd(ctx, addr, "consume", "e", "-f", "-limit", "2", "-format", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	produce(t, c, "e", "one")
	produce(t, c, "e", "two", "three")
	if code := exitCode(t, cmd.Wait()); code != 0 || stderr.Len() > 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	var got []string
	for l := range strings.Lines(stdout.String()) {
		var m jsonMessage
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		got = append(got, m.Value)
	}
	if strings.Join(got, ",") != "one,two" {
		t.Errorf("printed %q, want one, two", got)
	}
}

// TestConsumeFromTime: -offset @TIME, -since, -offset end, and bad values.
func TestConsumeFromTime(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	produce(t, c, "tm", "old1", "old2")
	mid := time.Now() // after the first batch was acknowledged
	produce(t, c, "tm", "new1")
	produce(t, c, "tm", "new2")
	at := "@" + mid.UTC().Format(time.RFC3339Nano)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"consume", "tm", "-offset", at}, "new1\nnew2\n"},
		{[]string{"consume", "tm", "-offset=" + at, "-limit", "1"}, "new1\n"},
		{[]string{"consume", "tm", "-offset", "@" + mid.Add(time.Hour).Format(time.RFC3339)}, ""},
		{[]string{"consume", "tm", "-offset", "@2000-01-01"}, "old1\nold2\nnew1\nnew2\n"},
		{[]string{"consume", "tm", "-since", "1h"}, "old1\nold2\nnew1\nnew2\n"},
		{[]string{"consume", "tm", "-offset", "end"}, ""},
	} {
		if got := ok(t, addr, "", tc.args...); got != tc.want {
			t.Errorf("hrqa %s printed %q, want %q", strings.Join(tc.args, " "), got, tc.want)
		}
	}
	for _, tc := range []struct {
		want string
		args []string
	}{
		{"want RFC 3339", []string{"consume", "tm", "-offset", "@yesterday"}},
		{"want an offset, end or @TIME", []string{"consume", "tm", "-offset", "start"}},
		{"-since and -offset exclude each other", []string{"consume", "tm", "-since", "1h", "-offset", "0"}},
		{"-since must not be negative", []string{"consume", "tm", "-since", "-1h"}},
	} {
		if r := hrqa(t, addr, "", tc.args...); r.code != 2 || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("hrqa %s: exit %d, stderr %q; want 2 and %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}

	// -offset end -f prints only what is produced after it started.
	srv := brokertest.Start(t, 1)
	fc, err := client.Dial(context.Background(), srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	produce(t, fc, "tm", "before")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := hrqaCmd(ctx, srv.Addr, "consume", "tm", "-offset", "end", "-f", "-limit", "1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := lines(stdout)
	deadline := time.Now().Add(10 * time.Second)
	for srv.Broker.Stats().ParkedPolls == 0 { // it follows from the end
		if time.Now().After(deadline) {
			t.Fatal("consume -offset end -f never waited for new messages")
		}
		time.Sleep(5 * time.Millisecond)
	}
	produce(t, fc, "tm", "newest")
	expectLine(t, out, "newest")
	expectEnd(t, out)
	if code := exitCode(t, cmd.Wait()); code != 0 {
		t.Errorf("consume -offset end -f -limit 1: exit %d", code)
	}
}

// TestHeaders: produce -H gives every message the headers, in order;
// consume -format json shows them, the text format only the values.
func TestHeaders(t *testing.T) {
	t.Parallel()
	addr, _ := server(t)
	ok(t, addr, "a\nb\n", "produce", "h", "-H", "trace=abc", "-H", "bin=\xff", "-H", "trace=again")
	ok(t, addr, "", "produce", "h", "plain")
	out := ok(t, addr, "", "consume", "h", "-format", "json")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines:\n%s", len(lines), out)
	}
	want := `"headers":[{"key":"trace","value":"abc"},{"key":"bin","value":"/w==","encoding":"base64"},{"key":"trace","value":"again"}]`
	for i, l := range lines[:2] {
		if !strings.Contains(l, want) {
			t.Errorf("message %d: %s, want %s", i, l, want)
		}
	}
	if strings.Contains(lines[2], "headers") {
		t.Errorf("a message without headers shows some: %s", lines[2])
	}
	if text := ok(t, addr, "", "consume", "h"); text != "a\nb\nplain\n" {
		t.Errorf("text format %q", text)
	}
	for _, bad := range []struct{ flag, want string }{{"novalue", "is not KEY=VALUE"}, {"=v", "header key"}} {
		if r := hrqa(t, addr, "", "produce", "h", "-H", bad.flag, "x"); r.code != 2 || !strings.Contains(r.stderr, bad.want) {
			t.Errorf("-H %s: exit %d, stderr %q; want 2 and %q", bad.flag, r.code, r.stderr, bad.want)
		}
	}
}

// TestFollowReconnects: a follow that loses its server says so once, and
// says so again when it is back, then goes on from where it was.
func TestFollowReconnects(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String() // the restarted server takes the same port
	l.Close()
	srv := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) { c.Addr = addr })
	c, err := client.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	produce(t, c, "r", "a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := hrqaCmd(ctx, addr, "consume", "r", "-f", "-limit", "2")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out, errs := lines(stdout), lines(stderr)
	expectLine(t, out, "a")
	srv2, err := srv.Restart()
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Close()
	expectLineHolding(t, errs, "retrying")
	produce(t, c, "r", "b")
	expectLine(t, out, "b")
	expectLineHolding(t, errs, "connected to "+addr+" again; following from offset 1")
	if code := exitCode(t, cmd.Wait()); code != 0 {
		t.Errorf("consume -f -limit 2 across a restart: exit %d", code)
	}
}

// expectLineHolding waits for the next line and checks it holds want.
func expectLineHolding(t *testing.T, ch <-chan string, want string) {
	t.Helper()
	select {
	case l, open := <-ch:
		if !open || !strings.Contains(l, want) {
			t.Fatalf("got line %q (open %v), want one holding %q", l, open, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no line holding %q within 10s", want)
	}
}
