package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/storage"
)

// tourStep is one "$ command" of the README's tour and the lines shown
// under it.
type tourStep struct {
	cmd  string
	want []string
}

// readmeTour returns the steps of the README's "A two-minute tour with
// hrqa" console block.
func readmeTour(t *testing.T) []tourStep {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, tour, ok := strings.Cut(string(b), "## A two-minute tour with hrqa")
	if !ok {
		t.Fatal("README.md has no tour section")
	}
	_, block, ok := strings.Cut(tour, "```console\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("the tour has no console block")
	}
	var steps []tourStep
	for line := range strings.Lines(block) {
		line = strings.TrimSuffix(line, "\n")
		if cmd, isCmd := strings.CutPrefix(line, "$ "); isCmd {
			steps = append(steps, tourStep{cmd: cmd})
		} else if len(steps) > 0 {
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
		}
	}
	return steps
}

// tourNormal replaces what differs from run to run: times, durations, the
// server's address and the size on disk.
var tourNormal = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`), "TIME"},
	{regexp.MustCompile(`answered in [0-9.]+[µnm]?s`), "answered in DURATION"},
	{regexp.MustCompile(`^bytes +\d+$`), "bytes N"},
}

func normalTour(line, addr string) string {
	line = strings.ReplaceAll(line, addr, "127.0.0.1:14353")
	for _, n := range tourNormal {
		line = n.re.ReplaceAllString(line, n.with)
	}
	return line
}

// TestReadmeTour runs the README's tour as written, against a server with
// the default segment size, and checks that each command prints what the
// README shows (times, durations and bytes on disk aside). A command ending
// in & runs in the background until "kill %1"; lines shown under the
// commands run meanwhile are what it prints.
func TestReadmeTour(t *testing.T) {
	steps := readmeTour(t)
	if len(steps) < 5 {
		t.Fatalf("the tour has %d commands", len(steps))
	}
	srv := brokertest.Start(t, 1, func(o *storage.Options, _ *broker.Config) { o.Entries = 5000 })
	env := append(os.Environ(), "HARAQA_ADDR="+srv.Addr, "PATH="+filepath.Dir(binary)+":"+os.Getenv("PATH"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var bg *exec.Cmd
	var bgLines chan string
	for _, st := range steps {
		cmd, _, _ := strings.Cut(st.cmd, " #")
		cmd = strings.TrimSpace(cmd)
		switch {
		case strings.HasPrefix(cmd, "go build"):
			continue // the test built hrqa already
		case strings.HasSuffix(cmd, "&"):
			bg = exec.CommandContext(ctx, "bash", "-c", strings.TrimSuffix(cmd, "&"))
			bg.Env = env
			out, err := bg.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := bg.Start(); err != nil {
				t.Fatal(err)
			}
			bgLines = make(chan string, 100)
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					bgLines <- sc.Text()
				}
				close(bgLines)
			}()
			expectBg(t, st.cmd, bgLines, st.want, srv.Addr)
			continue
		case cmd == "kill %1":
			if bg == nil {
				t.Fatal("kill %1 with nothing in the background")
			}
			bg.Process.Kill()
			bg.Wait()
			bg = nil
			continue
		}
		c := exec.CommandContext(ctx, "bash", "-c", cmd)
		c.Env = env
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("$ %s: %v\n%s", st.cmd, err, out)
		}
		got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		if len(out) == 0 {
			got = nil
		}
		want := st.want
		if bg != nil { // what is shown under it is the background command's
			expectBg(t, st.cmd, bgLines, want, srv.Addr)
			want = nil
		}
		if len(got) != len(want) {
			t.Fatalf("$ %s printed %q, the README shows %q", st.cmd, got, want)
		}
		for i := range got {
			if g, w := normalTour(got[i], srv.Addr), normalTour(want[i], srv.Addr); g != w {
				t.Fatalf("$ %s printed %q, the README shows %q", st.cmd, got[i], want[i])
			}
		}
	}
}

// expectBg waits for the background command to print want.
func expectBg(t *testing.T, step string, lines <-chan string, want []string, addr string) {
	t.Helper()
	for _, w := range want {
		select {
		case g, ok := <-lines:
			if !ok || normalTour(g, addr) != normalTour(w, addr) {
				t.Fatalf("after $ %s the background command printed %q, the README shows %q", step, g, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("after $ %s the background command did not print %q", step, w)
		}
	}
}

// TestReadmeTourPorts: the tour says which server hrqa asks and how to
// follow make run onto another port: hrqa's default address is make run's
// binary port, and the tour gives the export of HARAQA_ADDR for the
// TCP_PORT it names.
func TestReadmeTourPorts(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, tour, _ := strings.Cut(string(b), "## A two-minute tour with hrqa")
	intro, _, ok := strings.Cut(tour, "```console\n")
	if !ok {
		t.Fatal("the tour has no console block")
	}
	intro = strings.Join(strings.Fields(intro), " ")
	if !strings.Contains(intro, "`"+defaultAddr+"`") || !strings.Contains(intro, "`$HARAQA_ADDR`") {
		t.Errorf("the tour does not say that hrqa asks %s unless $HARAQA_ADDR says otherwise: %q", defaultAddr, intro)
	}
	run := regexp.MustCompile("`make run TCP_PORT=(\\d+)`").FindStringSubmatch(intro)
	export := regexp.MustCompile("`export HARAQA_ADDR=127\\.0\\.0\\.1:(\\d+)`").FindStringSubmatch(intro)
	if run == nil || export == nil || run[1] != export[1] {
		t.Errorf("the tour should give the export of HARAQA_ADDR for a make run on another TCP_PORT: %q", intro)
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^TCP_PORT +\?= (\d+)$`).FindSubmatch(mk)
	if _, port, _ := strings.Cut(defaultAddr, ":"); m == nil || string(m[1]) != port {
		t.Errorf("make run's TCP_PORT %q is not hrqa's default port %s", m, port)
	}
}
