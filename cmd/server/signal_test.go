package main

import (
	"os"
	"syscall"
	"testing"
)

// TestSIGHUPAtStart sends SIGHUP while the server is still
// starting, before it has built its server (HARAQA_TEST_HOLD_START holds
// it there until the test closes its stdin): the server handles it once
// it can, rereading its files, and serves. Before, the handler was
// installed after server.New, and SIGHUP then killed the process (exit
// 129 from a shell).
func TestSIGHUPAtStart(t *testing.T) {
	bin := buildServer(t, t.TempDir())
	s := newProcess(t, bin, "-tcp", "0", "-listen", "127.0.0.1", "-ballast", "0", t.TempDir())
	s.cmd.Env = append(os.Environ(), "HARAQA_TEST_HOLD_START=1")
	stdin, err := s.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.start()
	s.waitLog("holding start", 1)
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	s.waitServing() // fails if the signal killed it
	s.waitLog("SIGHUP: rereading", 1)
	if err := ping(s.addr); err != nil {
		t.Fatalf("ping after SIGHUP at start: %v\n%s", err, s.output())
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := s.exitCode(); code != 0 {
		t.Fatalf("exit code %d, want 0:\n%s", code, s.output())
	}
}
