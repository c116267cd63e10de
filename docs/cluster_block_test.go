//go:build unix

package docs_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestClusterBlockPastes runs docs/replication.md's first shell block,
// the three-server cluster a reader pastes, as the doc gives it: only
// `make build` is done beforehand (the binaries are built into bin/ of
// the directory it runs in) and its /tmp/ paths are put in a directory
// of the test's. It must end with `hrqa cluster status` showing three
// live members, in step, and the topic it produced to 3/3 in sync.
func TestClusterBlockPastes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the server and hrqa, and runs three servers")
	}
	doc, err := os.ReadFile("replication.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "## A cluster of three on one machine\n")
	_, rest, ok2 := strings.Cut(rest, "```sh\n")
	block, _, ok3 := strings.Cut(rest, "```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/replication.md has no shell block under \"## A cluster of three on one machine\"")
	}
	if !strings.HasPrefix(block, "make build\n") {
		t.Fatalf("the block does not start with make build:\n%s", block)
	}
	for _, port := range regexp.MustCompile(`127\.0\.0\.1:(\d+)`).FindAllStringSubmatch(block, -1) {
		l, err := net.Listen("tcp", "127.0.0.1:"+port[1])
		if err != nil {
			t.Fatalf("the block's port %s is taken here: %v", port[1], err)
		}
		l.Close()
	}
	dir := t.TempDir()
	for _, cmd := range []string{"server", "hrqa"} {
		out := filepath.Join(dir, "bin", map[string]string{"server": "haraqa", "hrqa": "hrqa"}[cmd])
		if b, err := exec.Command("go", "build", "-o", out, "../cmd/"+cmd).CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/%s: %v\n%s", cmd, err, b)
		}
	}
	script := strings.ReplaceAll(strings.TrimPrefix(block, "make build\n"), "/tmp/", dir+"/")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// The servers the block leaves running keep its output open: once
	// the block's shell has exited, Wait stops reading it after this.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The servers the block starts in the background stay in its
	// process group: stop them all at the end.
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var runErr error
	select {
	case runErr = <-waited:
	case <-ctx.Done():
		t.Fatalf("the block did not finish within 3 minutes:\n%s", tailOf(out.String()))
	}
	status := out.String()
	if runErr != nil && !errors.Is(runErr, exec.ErrWaitDelay) {
		t.Fatalf("the block failed: %v\n%s", runErr, tailOf(status))
	}
	if !regexp.MustCompile(`in step\s+true`).MatchString(status) {
		t.Errorf("the block's cluster status is not in step:\n%s", tailOf(status))
	}
	if n := len(regexp.MustCompile(`(?m)^127\.0\.0\.1:\d+\s.*\smember\s*$`).FindAllString(status, -1)); n != 3 {
		t.Errorf("the block's cluster status lists %d live members, want 3:\n%s", n, tailOf(status))
	}
	if !regexp.MustCompile(`(?m)^orders\s.*\s3/3\s`).MatchString(status) {
		t.Errorf("the block's cluster status has no topic orders 3/3 in sync:\n%s", tailOf(status))
	}
}

// tailOf is the last 30 lines of s that are not the servers' logs.
func tailOf(s string) string {
	var keep []string
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "time=") {
			keep = append(keep, line)
		}
	}
	if len(keep) > 30 {
		keep = keep[len(keep)-30:]
	}
	return strings.Join(keep, "\n")
}
