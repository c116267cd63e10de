package main

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

func shaHex(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}

// hello says hello with token on a new connection and returns the code.
func hello(t *testing.T, addr, token string) protocol.Code {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := c.Write(protocol.AppendHelloRequest(nil, 1, protocol.Version, "test", token)); err != nil {
		t.Fatal(err)
	}
	h, _, err := readResponse(c)
	if err != nil {
		t.Fatal(err)
	}
	return h.Code
}

// waitLog waits until the server's output holds want n times.
func (s *process) waitLog(want string, n int) {
	s.t.Helper()
	deadline := time.Now().Add(ioTimeout)
	for strings.Count(s.output(), want) < n {
		if time.Now().After(deadline) {
			s.t.Fatalf("no %q in the server's output:\n%s", want, s.output())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAuthFileReloadOnSIGHUP(t *testing.T) {
	bin := buildServer(t, t.TempDir())
	file := filepath.Join(t.TempDir(), "auth")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const keep, drop = "token-that-stays", "token-that-goes"
	write(shaHex(keep) + " admin *\n" + shaHex(drop) + " consume *\n")
	s := startServer(t, bin, "-tcp", "0", "-ballast", "0", "-listen", "127.0.0.1", "-auth-file", file, t.TempDir())
	for _, tok := range []string{keep, drop} {
		if code := hello(t, s.addr, tok); code != protocol.CodeOK {
			t.Fatalf("hello before the reload: %v", code)
		}
	}

	write(shaHex(keep) + " admin *\n")
	s.cmd.Process.Signal(syscall.SIGHUP)
	s.waitLog("auth file reloaded", 1)
	if code := hello(t, s.addr, drop); code != protocol.CodeUnauthenticated {
		t.Fatalf("removed token after the reload: %v, want unauthenticated", code)
	}
	if code := hello(t, s.addr, keep); code != protocol.CodeOK {
		t.Fatalf("kept token after the reload: %v", code)
	}

	write(shaHex(keep) + " admin,write *\n")
	s.cmd.Process.Signal(syscall.SIGHUP)
	s.waitLog("auth file not reloaded", 1)
	if !strings.Contains(s.output(), "auth:1: unknown right") {
		t.Errorf("the log does not say which line is bad:\n%s", s.output())
	}
	if code := hello(t, s.addr, keep); code != protocol.CodeOK {
		t.Fatalf("after a bad reload the old rules should stay: %v", code)
	}
	if code := hello(t, s.addr, drop); code != protocol.CodeUnauthenticated {
		t.Fatalf("after a bad reload: %v, want unauthenticated", code)
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.exitCode(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	out := s.output()
	for _, tok := range []string{keep, drop} {
		if strings.Contains(out, tok) {
			t.Fatalf("a token in the server's log:\n%s", out)
		}
	}
	if strings.Contains(out, "beyond loopback") {
		t.Fatalf("a warning about an open port with -auth-file:\n%s", out)
	}
}

func TestBadAuthFileAtStart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "auth")
	if err := os.WriteFile(file, []byte("# no\nnot a rule\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	code := run([]string{"-tcp", "0", "-http", "0", "-ballast", "0", "-auth-file", file, t.TempDir()}, &out)
	if code != 2 || !strings.Contains(out.String(), "auth:2:") {
		t.Fatalf("exit %d, output %q; want 2 and the bad line", code, out.String())
	}
}

func TestWarnWithoutAuthBeyondLoopback(t *testing.T) {
	bin := buildServer(t, t.TempDir())
	for _, tc := range []struct {
		listen string
		warn   bool
	}{{"0.0.0.0", true}, {"127.0.0.1", false}} {
		s := startServer(t, bin, "-tcp", "0", "-ballast", "0", "-listen", tc.listen, t.TempDir())
		s.cmd.Process.Signal(syscall.SIGTERM)
		s.exitCode()
		var warns []string
		for _, l := range strings.Split(s.output(), "\n") {
			if strings.Contains(l, "level=WARN") {
				warns = append(warns, l)
			}
		}
		got := len(warns) == 1 && strings.Contains(warns[0], "-auth-file") && strings.Contains(warns[0], "token")
		if got != tc.warn || len(warns) > 1 {
			t.Errorf("-listen %s: warnings %q; want one naming -auth-file and tokens: %v", tc.listen, warns, tc.warn)
		}
	}
}
