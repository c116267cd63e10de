package main

import (
	"context"
	"crypto/tls"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
)

// TestTLSReloadOnSIGHUP runs the binary with -tls-cert and -tls-key: after
// new files and a SIGHUP new connections get the new certificate while one
// made before keeps working; a bad file at SIGHUP keeps the certificate in
// force; a plaintext client is refused without harm.
func TestTLSReloadOnSIGHUP(t *testing.T) {
	bin := buildServer(t, t.TempDir())
	ca := brokertest.NewCA(t, "test-ca")
	dir := t.TempDir()
	issue := func(cn string) (string, string) {
		return ca.Issue(t, cn, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "127.0.0.1").Write(t, dir, "srv")
	}
	certFile, keyFile := issue("first")
	s := startServer(t, bin, "-tcp", "0", "-ballast", "0", "-listen", "127.0.0.1",
		"-tls-cert", certFile, "-tls-key", keyFile, t.TempDir())
	served := func() string {
		t.Helper()
		tc, err := tls.Dial("tcp", s.addr, &tls.Config{RootCAs: ca.Pool})
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		return tc.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	c, err := client.Dial(ctx, s.addr, client.WithTLS(&tls.Config{RootCAs: ca.Pool}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := served(); got != "first" {
		t.Fatalf("served %q, want first", got)
	}

	issue("second")
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(ioTimeout)
	for served() != "second" {
		if time.Now().After(deadline) {
			t.Fatalf("not reloaded after SIGHUP:\n%s", s.output())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := c.Produce(ctx, "t", []byte("after the reload")); err != nil {
		t.Fatalf("the connection made before the reload: %v", err)
	}

	brokertest.WriteFile(t, certFile, []byte("-----BEGIN CERTIFICATE-----\nbroken\n"))
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(s.output(), "TLS files not reloaded") {
		if time.Now().After(deadline) {
			t.Fatalf("no log line for the failed reload:\n%s", s.output())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := served(); got != "second" {
		t.Fatalf("served %q after a failed reload, want second", got)
	}

	// A plaintext client is refused, and the server goes on.
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	defer pcancel()
	if pc, err := client.Dial(pctx, s.addr, client.WithRetries(0, 0)); err == nil {
		pc.Close()
		t.Fatal("a plaintext client connected")
	}
	if _, err := c.Produce(ctx, "t", []byte("still serving")); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s.output(), "PRIVATE KEY") {
		t.Fatalf("the log shows key material:\n%s", s.output())
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := s.exitCode(); code != 0 {
		t.Fatalf("exit %d:\n%s", code, s.output())
	}
}
