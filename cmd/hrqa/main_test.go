package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
)

// binary is the hrqa built once for the tests, which run it as a user would.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hrqa-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "hrqa")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building hrqa:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server starts a haraqa server for the test and returns its address and a
// client of it.
func server(t *testing.T, opts ...brokertest.Option) (string, *client.Client) {
	t.Helper()
	s := brokertest.Start(t, 1, opts...)
	c, err := client.Dial(context.Background(), s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return s.Addr, c
}

type result struct {
	stdout, stderr string
	code           int
}

// hrqaCmd returns hrqa with args, talking to the server at addr.
func hrqaCmd(ctx context.Context, addr string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), "HARAQA_ADDR="+addr)
	return cmd
}

// hrqa runs hrqa with args and stdin to its end.
func hrqa(t *testing.T, addr, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := hrqaCmd(ctx, addr, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := exitCode(t, cmd.Run())
	return result{stdout.String(), stderr.String(), code}
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if !ee.Exited() {
			t.Fatalf("hrqa did not exit: %v", ee)
		}
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

// ok runs hrqa, expects success without a word on stderr and returns its
// stdout.
func ok(t *testing.T, addr, stdin string, args ...string) string {
	t.Helper()
	r := hrqa(t, addr, stdin, args...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("hrqa %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

// fails runs hrqa and expects exit status 1, nothing on stdout and one line
// on stderr, "hrqa: " and a message holding want.
func fails(t *testing.T, addr, stdin, want string, args ...string) {
	t.Helper()
	r := hrqa(t, addr, stdin, args...)
	if r.code != 1 {
		t.Fatalf("hrqa %s: exit %d, want 1 (stderr %q)", strings.Join(args, " "), r.code, r.stderr)
	}
	if !strings.HasPrefix(r.stderr, "hrqa: ") || strings.Count(r.stderr, "\n") != 1 ||
		!strings.HasSuffix(r.stderr, "\n") || !strings.Contains(r.stderr, want) {
		t.Errorf("hrqa %s: stderr %q, want one line holding %q", strings.Join(args, " "), r.stderr, want)
	}
	if r.stdout != "" {
		t.Errorf("hrqa %s: stdout %q, want nothing", strings.Join(args, " "), r.stdout)
	}
}

// values returns the values of every message of topic.
func values(t *testing.T, c *client.Client, topic string) []string {
	t.Helper()
	ctx := context.Background()
	info, err := c.TopicInfo(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	msgs, _, err := c.ConsumeInto(ctx, nil, topic, info.Oldest, int(info.Next-info.Oldest))
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]string, len(msgs))
	for i, m := range msgs {
		vals[i] = string(m.Value)
	}
	return vals
}

// produce stores msgs in topic.
func produce(t *testing.T, c *client.Client, topic string, msgs ...string) {
	t.Helper()
	b := make([][]byte, len(msgs))
	for i, m := range msgs {
		b[i] = []byte(m)
	}
	if _, err := c.Produce(context.Background(), topic, b...); err != nil {
		t.Fatal(err)
	}
}

// lines reads r's lines onto a channel, closed at r's end.
func lines(r io.Reader) <-chan string {
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// expectLine waits for the next line and checks it is want.
func expectLine(t *testing.T, ch <-chan string, want string) {
	t.Helper()
	select {
	case l, open := <-ch:
		if !open {
			t.Fatalf("output ended, want %q", want)
		}
		if l != want {
			t.Fatalf("got line %q, want %q", l, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no line %q within 10s", want)
	}
}

// expectEnd waits for the end of ch's output.
func expectEnd(t *testing.T, ch <-chan string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l, open := <-ch:
			if !open {
				return
			}
			t.Errorf("unexpected line %q", l)
		case <-deadline:
			t.Fatal("output did not end within 10s")
		}
	}
}

func TestPing(t *testing.T) {
	t.Parallel()
	addr, _ := server(t)
	out := ok(t, addr, "", "ping")
	if !strings.HasPrefix(out, addr+" answered in ") {
		t.Errorf("ping printed %q", out)
	}
	// -addr wins over $HARAQA_ADDR, before or after the command.
	if out := ok(t, "127.0.0.1:1", "", "-addr", addr, "ping"); !strings.HasPrefix(out, addr) {
		t.Errorf("hrqa -addr %s ping printed %q", addr, out)
	}
	if out := ok(t, "127.0.0.1:1", "", "ping", "-addr="+addr); !strings.HasPrefix(out, addr) {
		t.Errorf("hrqa ping -addr=%s printed %q", addr, out)
	}
}

func TestNoServer(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	for _, args := range [][]string{
		{"ping"},
		{"topics", "list"},
		{"consume", "t"},
		{"produce", "t", "x"},
	} {
		start := time.Now()
		fails(t, addr, "x\n", "cannot connect to "+addr, args...)
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("hrqa %s took %v without a server", strings.Join(args, " "), d)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	// No server is needed: every one is refused before connecting.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage: hrqa"},
		{[]string{"frob"}, `unknown command "frob"`},
		{[]string{"topics"}, "topics needs a subcommand"},
		{[]string{"topics", "frob"}, `unknown command "topics frob"`},
		{[]string{"-x", "ping"}, "unknown flag -x"},
		{[]string{"-addr"}, "flag -addr needs a value"},
		{[]string{"ping", "extra"}, "ping takes no arguments"},
		{[]string{"help", "frob"}, `unknown command "frob"`},
		{[]string{"topics", "list", "a", "b"}, "at most one PREFIX"},
		{[]string{"topics", "list", "-match", "("}, "-match"},
		{[]string{"topics", "create"}, "missing TOPIC"},
		{[]string{"topics", "delete", "a", "b"}, "unexpected arguments after the topic: b"},
		{[]string{"topics", "info", "t", "-format", "xml"}, `-format "xml"`},
		{[]string{"consume"}, "missing TOPIC"},
		{[]string{"consume", "t", "-limit", "x"}, `invalid value "x" for flag -limit`},
		{[]string{"consume", "t", "-limit", "-1"}, "-limit must not be negative"},
		{[]string{"consume", "t", "-offset"}, "flag -offset needs a value"},
		{[]string{"consume", "t", "-bogus"}, "unknown flag -bogus"},
		{[]string{"consume", "t", "-format", "xml"}, `-format "xml"`},
		{[]string{"consume", "t", "-format", "json", "-0"}, "-format json excludes -d and -0"},
		{[]string{"consume", "t", "-d", ",", "-0"}, "-0 and -d exclude each other"},
		{[]string{"consume", "t", "-d", ""}, "-d must not be empty"},
		{[]string{"consume", "t", `-d=\q`}, `unknown escape \q`},
		{[]string{"produce"}, "missing TOPIC"},
		{[]string{"produce", "t", "-batch", "0"}, "-batch must be at least 1"},
		{[]string{"produce", "t", "-raw", "x"}, "-raw reads stdin"},
		{[]string{"produce", "t", "-raw", "-0"}, "-raw excludes -d and -0"},
		{[]string{"truncate", "t"}, "missing -before"},
		{[]string{"truncate", "-before", "1"}, "missing TOPIC"},
		{[]string{"truncate", "t", "-before", "yesterday"}, `-before "yesterday"`},
		{[]string{"truncate", "t", "-before", "-2h"}, "must not be negative"},
	} {
		r := hrqa(t, "127.0.0.1:1", "", tc.args...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, "hrqa") || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("hrqa %s: exit %d, stdout %q, stderr %q; want exit 2 and stderr holding %q",
				strings.Join(tc.args, " "), r.code, r.stdout, r.stderr, tc.want)
		}
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"topics", "-h"}} {
		out := ok(t, "", "", args...)
		for _, c := range commands {
			if !strings.Contains(out, "  "+c.name+" ") {
				t.Errorf("hrqa %s does not list %q", strings.Join(args, " "), c.name)
			}
		}
	}
	for _, c := range commands {
		name := strings.Fields(c.name)
		out := ok(t, "", "", append(name, "-h")...)
		if !strings.HasPrefix(out, "usage: hrqa "+c.name) || !strings.Contains(out, "Examples:\n  hrqa ") ||
			!strings.Contains(out, "-addr") {
			t.Errorf("hrqa %s -h printed:\n%s", c.name, out)
		}
		// -h after arguments and flags, and "hrqa help NAME", print the same.
		if out2 := ok(t, "", "", append(name, "x", "-addr", "y", "-h")...); out2 != out {
			t.Errorf("hrqa %s x -addr y -h differs from hrqa %s -h", c.name, c.name)
		}
		if out2 := ok(t, "", "", append([]string{"help"}, name...)...); out2 != out {
			t.Errorf("hrqa help %s differs from hrqa %s -h", c.name, c.name)
		}
	}
}

// TestBrokenPipe closes hrqa's stdout early, as "hrqa consume t | head -1"
// does: hrqa ends quietly with status 0, without and with -f.
func TestBrokenPipe(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	var in strings.Builder
	for i := range 100000 {
		fmt.Fprintln(&in, i)
	}
	ok(t, addr, in.String(), "produce", "t")

	for _, follow := range []bool{false, true} {
		args := []string{"consume", "t"}
		if follow {
			args = append(args, "-offset", "-1", "-f")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := hrqaCmd(ctx, addr, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		first, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]string{false: "0\n", true: "99999\n"}[follow]; first != want {
			t.Errorf("%v: first line %q, want %q", args, first, want)
		}
		stdout.Close()
		if follow {
			produce(t, c, "t", "more") // hrqa -f writes only when a message comes
		}
		if code := exitCode(t, cmd.Wait()); code != 0 || stderr.Len() > 0 {
			t.Errorf("%v with stdout closed: exit %d, stderr %q; want 0 and nothing", args, code, stderr.String())
		}
	}
}

// TestInterruptProduce: Ctrl-C ends a produce reading stdin quietly with 130.
func TestInterruptProduce(t *testing.T) {
	t.Parallel()
	addr, c := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := hrqaCmd(ctx, addr, "produce", "t")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Once the first line is stored, hrqa is running with its handlers.
	io.WriteString(stdin, "first\n")
	for m, err := range c.Messages(ctx, "t", 0) {
		if err != nil && !errors.Is(err, client.ErrTopicNotFound) {
			t.Fatal(err)
		}
		if err == nil {
			if string(m.Value) != "first" {
				t.Fatalf("stored %q, want first", m.Value)
			}
			break
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, cmd.Wait()); code != 130 || stderr.Len() > 0 || stdout.Len() > 0 {
		t.Errorf("interrupted produce: exit %d, stdout %q, stderr %q; want 130 and nothing", code, stdout.String(), stderr.String())
	}
}

// TestOutputError: a failed write to stdout other than a closed pipe is a
// failure.
func TestOutputError(t *testing.T) {
	t.Parallel()
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full:", err)
	}
	defer full.Close()
	addr, c := server(t)
	produce(t, c, "t", "x")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := hrqaCmd(ctx, addr, "consume", "t")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = full, &stderr
	code := exitCode(t, cmd.Run())
	if msg := stderr.String(); code != 1 || !strings.HasPrefix(msg, "hrqa: writing the output: ") || strings.Count(msg, "\n") != 1 {
		t.Errorf("consume to a full disk: exit %d, stderr %q; want 1 and one line", code, msg)
	}
}

// TestHTTPPortNamed: hrqa pointed at an HTTP port says so, rather than
// waiting for an answer in its protocol.
func TestHTTPPortNamed(t *testing.T) {
	t.Parallel()
	hs := httptest.NewServer(http.NotFoundHandler())
	defer hs.Close()
	fails(t, strings.TrimPrefix(hs.URL, "http://"), "", "is an HTTP port", "ping")
}

// closedAddr returns a loopback address nothing listens on (a moment
// ago, something did).
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
