package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"iter"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRoundTrip is "seq 1 100000 | hrqa produce t" and "hrqa consume t
// -limit 100000": the same lines come back.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	var seq strings.Builder
	for i := 1; i <= 100000; i++ {
		fmt.Fprintln(&seq, i)
	}
	ok(t, addr, seq.String(), "produce", "lines") // the topic is created
	out := ok(t, addr, "", "consume", "lines", "-limit", "100000")
	if out != seq.String() {
		t.Fatalf("consumed %d bytes differ from the %d produced", len(out), seq.Len())
	}
	if out := ok(t, addr, "", "consume", "lines"); out != seq.String() {
		t.Fatalf("consume without -limit: %d bytes differ from the %d produced", len(out), seq.Len())
	}
	info, err := c.TopicInfo(context.Background(), "lines")
	if err != nil || info.Next != 100000 {
		t.Fatalf("topic info %+v, %v; want 100000 messages", info, err)
	}
}

func TestProduceSplitting(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	for i, tc := range []struct {
		stdin string
		args  []string // T is the topic
		want  []string
	}{
		{"a\nb\n", []string{"T"}, []string{"a", "b"}},
		{"a\n\nb", []string{"T"}, []string{"a", "", "b"}}, // no final newline needed
		{"\n", []string{"T"}, []string{""}},
		{"a\r\nb\n", []string{"T"}, []string{"a\r", "b"}}, // bytes as they are
		{"a\x00\x00b\x00", []string{"T", "-0"}, []string{"a", "", "b"}},
		{"a\x00b\x00", []string{"-0", "T"}, []string{"a", "b"}},
		{"x,y,", []string{"T", "-d", ","}, []string{"x", "y"}},
		{"x\ty\nz", []string{`-d=\t`, "T"}, []string{"x", "y\nz"}},
		{"a::b::::c::", []string{"T", "-d", "::"}, []string{"a", "b", "", "c"}},
		{"a:b:", []string{"T", "-d", `\x3a`}, []string{"a", "b"}},
		{"ignored\n", []string{"T", "one", "two words", ""}, []string{"one", "two words", ""}},
		{"ignored\n", []string{"T", "--", "-x", "-1"}, []string{"-x", "-1"}},
		{"ignored\n", []string{"T", "-1", "-2.5"}, []string{"-1", "-2.5"}}, // numbers, not flags
		{strings.Repeat("m\n", 1000), []string{"T", "-batch", "7"}, slices.Repeat([]string{"m"}, 1000)},
		{"a\x00b\nc", []string{"T", "-raw"}, []string{"a\x00b\nc"}},
		{"", []string{"-raw", "T"}, []string{""}},
	} {
		topic := fmt.Sprintf("t%d", i)
		args := []string{"produce"}
		for _, a := range tc.args {
			if a == "T" {
				a = topic
			}
			args = append(args, a)
		}
		ok(t, addr, tc.stdin, args...)
		if got := values(t, c, topic); !slices.Equal(got, tc.want) {
			t.Errorf("%q | hrqa %q stored %q, want %q", tc.stdin, args, got, tc.want)
		}
	}
	// Empty input: TestProduceEmptyStdinCreates.
}

// TestProduceLongMessages: messages longer than the read buffer, and a
// batch cut by its byte bound.
func TestProduceLongMessages(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	long := strings.Repeat("x", 3*readBufferBytes)
	other := strings.Repeat("y", batchBytes-readBufferBytes)
	ok(t, addr, long+"\n"+other+"\nshort\n"+long, "produce", "long")
	got := values(t, c, "long")
	if len(got) != 4 || got[0] != long || got[1] != other || got[2] != "short" || got[3] != long {
		lens := make([]int, len(got))
		for i, v := range got {
			lens[i] = len(v)
		}
		t.Fatalf("stored messages of lengths %v, want %d %d 5 %d", lens, len(long), len(other), len(long))
	}
}

func TestProduceVerbose(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	produce(t, c, "v", "old", "old")
	if out := ok(t, addr, "", "produce", "v", "a", "b", "c", "-batch", "2", "-v"); out != "2\n3\n4\n" {
		t.Errorf("produce -v of arguments printed %q", out)
	}
	if out := ok(t, addr, "d\ne\n", "produce", "-v", "v"); out != "5\n6\n" {
		t.Errorf("produce -v of stdin printed %q", out)
	}
	if out := ok(t, addr, "raw", "produce", "v", "-raw", "-v"); out != "7\n" {
		t.Errorf("produce -raw -v printed %q", out)
	}
	if out := ok(t, addr, "f\n", "produce", "v"); out != "" {
		t.Errorf("produce without -v printed %q", out)
	}
}

// TestProduceStreams: a line is sent once read, not when a batch fills.
func TestProduceStreams(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	if err := c.CreateTopic(context.Background(), "slow"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := hrqaCmd(ctx, addr, "produce", "slow")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	next, stop := iter.Pull2(c.Messages(ctx, "slow", 0))
	defer stop()
	for _, line := range []string{"one", "two", "three"} {
		io.WriteString(stdin, line+"\n") // stdin stays open
		m, err, more := next()
		if err != nil || !more {
			t.Fatalf("%q was not stored while stdin stayed open (err %v)", line, err)
		}
		if string(m.Value) != line {
			t.Fatalf("stored %q, want %q", m.Value, line)
		}
	}
	stdin.Close()
	if code := exitCode(t, cmd.Wait()); code != 0 || stderr.Len() > 0 {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}

func TestProduceErrors(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	fails(t, addr, "", `invalid topic name "a/b"`, "produce", "a/b", "x")
	fails(t, addr, "x\n", `invalid topic name "a/b"`, "produce", "a/b")
	fails(t, addr, "", `invalid topic name "..": must not be "." or "..", which name directories`, "produce", "..", "x")
	fails(t, addr, "", `invalid topic name "a b": only A-Z, a-z, 0-9, '.', '_', '-', ':' and '@' are allowed`, "produce", "a b", "x")
	if topics, err := c.ListTopics(context.Background(), ""); err != nil || len(topics) != 0 {
		t.Errorf("topics %q, %v after failed produces", topics, err)
	}
}

// TestProduceEmptyStdinCreates: no message still creates the topic, as
// the help says; an existing topic is fine.
func TestProduceEmptyStdinCreates(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	for range 2 {
		if got := ok(t, addr, "", "produce", "empty"); got != "" {
			t.Fatalf("produce of nothing printed %q", got)
		}
		info, err := c.TopicInfo(context.Background(), "empty")
		if err != nil || info.Next != 0 {
			t.Fatalf("topic after producing nothing: %+v %v", info, err)
		}
	}
}
