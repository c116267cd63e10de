package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/bench"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
)

// TestMain lets the matrix test run this test binary as haraqa-bench.
func TestMain(m *testing.M) {
	if os.Getenv("HARAQA_BENCH_AS_MAIN") == "1" {
		main()
	}
	os.Exit(m.Run())
}

func runArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code = run(ctx, args, &out, &errOut, false)
	return code, out.String(), errOut.String()
}

func TestUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-mode", "fetch"}, "mode"},
		{[]string{"-size", "10"}, "smallest message is 24 bytes"},
		{[]string{"-messages", "10", "-duration", "1s"}, "not both"},
		{[]string{"-volumes", "3"}, "-volumes applies to -embedded only"},
		{[]string{"-fsync", "always"}, "-fsync applies to -embedded only"},
		{[]string{"-embedded", "-addr", "127.0.0.1:1"}, "-addr does not apply to -embedded"},
		{[]string{"-single", "producer"}, "-single applies to -batch 1 only"},
		{[]string{"-embedded", "-compress", "lz4"}, "compress"},
		{[]string{"-embedded", "-mode", "both", "-topics", "2"}, "-consumers >= -topics"},
		{[]string{"-reps", "2"}, "-reps applies to -matrix only"},
		{[]string{"-matrix", "-size", "100"}, "-size does not apply to -matrix"},
		{[]string{"-matrix", "-reps", "0"}, "reps"},
		{[]string{"-nosuchflag"}, "nosuchflag"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"-tls-cert", "c.pem"}, "both its certificate and its key"},
		{[]string{"-matrix", "-tls"}, "-tls does not apply to -matrix"},
	}
	for _, tc := range cases {
		code, stdout, stderr := runArgs(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	if code, _, _ := runArgs(t, "-h"); code != 0 {
		t.Errorf("-h: exit %d", code)
	}
}

func TestDefaults(t *testing.T) {
	o, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.Duration != defaultDuration || o.cfg.Messages != 0 || o.cfg.Addr != "127.0.0.1:14353" || o.cfg.Embedded {
		t.Fatalf("%+v", o.cfg)
	}
	o, err = parseFlags([]string{"-messages", "100"}, &bytes.Buffer{})
	if err != nil || o.cfg.Duration != 0 || o.cfg.Messages != 100 {
		t.Fatalf("%+v %v", o.cfg, err)
	}
}

// One short end-to-end run of each mode with -embedded -json.
func TestEmbeddedJSON(t *testing.T) {
	report := filepath.Join(t.TempDir(), "run.html")
	for _, mode := range []string{"produce", "consume", "both"} {
		args := []string{"-embedded", "-json", "-mode", mode, "-size", "100", "-batch", "100",
			"-messages", "5000", "-warmup", "50ms", "-dir", t.TempDir()}
		if mode == "produce" {
			args = append(args, "-ceiling", "-report", report)
		}
		code, stdout, stderr := runArgs(t, args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", mode, code, stderr)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(stdout), &m); err != nil {
			t.Fatalf("%s: %v: %q", mode, err, stdout)
		}
		if m["mode"] != mode || m["errors"] != 0.0 || m["messages"] != 5000.0 || m["gaps"] != 0.0 {
			t.Fatalf("%s: %s", mode, stdout)
		}
		if _, ok := m["ratio_to_ceiling"]; ok != (mode == "produce") {
			t.Fatalf("%s: ratio_to_ceiling present: %v", mode, ok)
		}
	}
	page, err := os.ReadFile(report)
	if err != nil || !bytes.Contains(page, []byte("<svg")) {
		t.Fatalf("report: %v", err)
	}
}

func TestTable(t *testing.T) {
	code, stdout, stderr := runArgs(t, "-embedded", "-mode", "produce", "-size", "64", "-batch", "10",
		"-duration", "100ms", "-warmup", "0", "-dir", t.TempDir())
	if code != 0 || !strings.Contains(stdout, "msgs/s") || !strings.Contains(stdout, "haraqa") {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// Off a terminal, a run prints a line of progress each second to stderr
// (and the line as the ceiling starts), not only its result at the end.
func TestProgressLines(t *testing.T) {
	code, stdout, stderr := runArgs(t, "-embedded", "-json", "-mode", "both", "-size", "100", "-batch", "100",
		"-duration", "2500ms", "-warmup", "0", "-ceiling", "-dir", t.TempDir())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if n := strings.Count(stderr, "haraqa-bench: both "); n < 2 {
		t.Errorf("%d progress lines of the timed phase, want 2 or more:\n%s", n, stderr)
	}
	if !strings.Contains(stderr, "haraqa-bench: measuring the ceiling") {
		t.Errorf("no line as the ceiling starts:\n%s", stderr)
	}
	if !json.Valid([]byte(stdout)) {
		t.Errorf("stdout is not only the JSON: %q", stdout)
	}
}

// The matrix runs each cell as a fresh process (this test binary acting
// as haraqa-bench) and rewrites only its section of the file.
func TestMatrix(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("HARAQA_BENCH_AS_MAIN", "1")
	out := filepath.Join(t.TempDir(), "benchmarks.md")
	if err := os.WriteFile(out, []byte("# Benchmarks\n\nkept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mc := bench.DefaultMatrixConfig()
	mc.Reps, mc.Duration, mc.Warmup, mc.Dir, mc.Exe = 1, 100*time.Millisecond, 0, t.TempDir(), exe
	mc.Cells = []bench.Cell{{Mode: bench.ModeProduce, Size: 100, Batch: 100, Volumes: 1}, {Mode: bench.ModeConsume, Size: 100, Batch: 10, Volumes: 2}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := bench.RunMatrix(ctx, mc)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range m.Rows {
		if len(r.Runs) != 1 || r.Runs[0].RatioToCeiling == nil || r.Runs[0].Messages == 0 {
			t.Fatalf("row %+v", r)
		}
	}
	if err := bench.RewriteSection(out, m.Markdown()); err != nil {
		t.Fatal(err)
	}
	doc, _ := os.ReadFile(out)
	for _, want := range []string{"# Benchmarks\n\nkept\n", bench.MarkerBegin, "| produce | 100 B | 100 | 1 |", "| consume | 100 B | 10 | 2 |", bench.MarkerEnd} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("file lacks %q:\n%s", want, doc)
		}
	}
}

// A hand-written heading between the markers of -matrix-out stops the
// matrix before its first run, and the file is left as it was.
func TestMatrixRefusesHandWritten(t *testing.T) {
	out := filepath.Join(t.TempDir(), "benchmarks.md")
	doc := "# Benchmarks\n\n" + bench.MarkerBegin + "\n## Notes\n\nhand-written\n\n" + bench.MatrixHeading + "\n\nold\n" + bench.MarkerEnd + "\n"
	if err := os.WriteFile(out, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, _, stderr := runArgs(t, "-matrix", "-matrix-out", out)
	if code != 1 || !strings.Contains(stderr, `"## Notes"`) || !strings.Contains(stderr, "move it outside the markers") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("refused after %v: a run was started", took)
	}
	if b, _ := os.ReadFile(out); string(b) != doc {
		t.Errorf("file changed:\n%s", b)
	}
}

// A consumer that reads a corrupt message fails the run with exit status
// 1, the result still printed.
func TestExitCodeOnCorruption(t *testing.T) {
	srv := brokertest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Produce(ctx, "bad-0", bytes.Repeat([]byte{'x'}, 100)); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runArgs(t, "-addr", srv.Addr, "-topic-prefix", "bad", "-mode", "both", "-size", "100",
		"-messages", "100", "-warmup", "0", "-json", "-dir", t.TempDir())
	if code != 1 || !strings.Contains(stderr, "1 corrupt") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(stdout), &m); err != nil || m["corrupt"] != 1.0 || m["errors"] != 0.0 {
		t.Fatalf("%v: %s", err, stdout)
	}
}

// TestEmbeddedTLS: -embedded -tls serves the embedded server over TLS with
// a certificate made in memory, and the run checks every message.
func TestEmbeddedTLS(t *testing.T) {
	for _, mode := range []string{"produce", "consume"} {
		code, stdout, stderr := runArgs(t, "-embedded", "-tls", "-mode", mode, "-messages", "2000",
			"-batch", "100", "-warmup", "0", "-dir", t.TempDir(), "-json")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", mode, code, stderr)
		}
		var res bench.Result
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Fatal(err)
		}
		if !res.TLS || res.Messages != 2000 || !res.OK() {
			t.Fatalf("%s: %+v", mode, res)
		}
	}
}
