package main

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/storage"
)

// TestTLS runs hrqa against a server that speaks TLS only, with the flags
// before and after the command and from the environment, and without them.
func TestTLS(t *testing.T) {
	ca := brokertest.NewCA(t, "test-ca")
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	brokertest.WriteFile(t, caFile, ca.PEM)
	me := ca.Issue(t, "me", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	certFile, keyFile := me.Write(t, dir, "me")
	cfg := brokertest.ServerTLS(t, ca.Server(t))
	cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, ca.Pool
	s := brokertest.Start(t, 1, func(_ *storage.Options, bc *broker.Config) { bc.TLS = cfg })
	addr := s.Addr

	ok(t, addr, "one\n", "-tls-ca", caFile, "-tls-cert", certFile, "-tls-key", keyFile, "produce", "t")
	if out := ok(t, addr, "", "consume", "t", "-tls-ca="+caFile, "-tls-cert", certFile, "-tls-key", keyFile); out != "one\n" {
		t.Fatalf("consume over TLS printed %q", out)
	}
	// From the environment, with the server's name given.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := hrqaCmd(ctx, addr, "ping")
	cmd.Env = append(cmd.Env, "HARAQA_TLS_CA="+caFile, "HARAQA_TLS_CERT="+certFile,
		"HARAQA_TLS_KEY="+keyFile, "HARAQA_TLS_SERVER_NAME=localhost")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "answered") {
		t.Fatalf("hrqa ping with $HARAQA_TLS_*: %v %s", err, out)
	}

	fails(t, addr, "", "speaks TLS only", "ping") // plaintext: the server's notice
	fails(t, addr, "", "not trusted", "-tls", "ping")
	fails(t, addr, "", "certificate required", "-tls-ca", caFile, "ping")
	plain, _ := server(t)
	fails(t, plain, "", "does not speak TLS", "-tls-ca", caFile, "ping")
	r := hrqa(t, addr, "", "-tls-cert", certFile, "ping")
	if r.code != 2 || !strings.Contains(r.stderr, "both its certificate and its key") {
		t.Fatalf("-tls-cert without -tls-key: exit %d, %q", r.code, r.stderr)
	}
}
