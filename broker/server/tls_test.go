package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/broker/server"
	"github.com/haraqa/haraqa/client"
)

// tlsConfig is testConfig with TLS files for a certificate of ca in dir.
func tlsConfig(t *testing.T, ca *brokertest.CA, dir string) server.Config {
	t.Helper()
	cfg := testConfig(t, 1)
	cfg.TLSCertFile, cfg.TLSKeyFile = ca.Server(t).Write(t, dir, "srv")
	return cfg
}

// httpsClient trusts ca and presents certs.
func httpsClient(ca *brokertest.CA, certs ...tls.Certificate) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool, Certificates: certs},
	}}
}

// TestTLSBothPorts: with TLS files both ports speak TLS only.
func TestTLSBothPorts(t *testing.T) {
	ca := brokertest.NewCA(t, "test-ca")
	srv := start(t, tlsConfig(t, ca, t.TempDir()))
	ctx := context.Background()
	c, err := client.Dial(ctx, srv.Addr().String(), client.WithTLS(&tls.Config{RootCAs: ca.Pool}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Produce(ctx, "t", []byte("one")); err != nil {
		t.Fatal(err)
	}
	base := "https://" + srv.HTTPAddr().String()
	hc := httpsClient(ca)
	resp, err := hc.Get(base + "/topics/t?id=0&limit=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte("one")) {
		t.Fatalf("HTTPS consume: %d %q", resp.StatusCode, body)
	}
	resp, err = hc.Post(base+"/topics/t", "application/octet-stream", strings.NewReader("two"))
	if err == nil {
		resp.Body.Close()
	}
	// Plaintext HTTP to the HTTPS port is refused.
	if resp, err := http.Get("http://" + srv.HTTPAddr().String() + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plaintext HTTP answered 200 on the TLS port")
		}
	}
	// So is a client that does not trust the CA.
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("HTTPS without the CA succeeded")
	}
}

// TestTLSClientCA: with a client CA both ports require a certificate it
// signed.
func TestTLSClientCA(t *testing.T) {
	ca := brokertest.NewCA(t, "test-ca")
	dir := t.TempDir()
	cfg := tlsConfig(t, ca, dir)
	cfg.TLSClientCAFile = filepath.Join(dir, "ca.pem")
	brokertest.WriteFile(t, cfg.TLSClientCAFile, ca.PEM)
	srv := start(t, cfg)
	me := ca.Issue(t, "me", time.Now().Add(-time.Hour), time.Now().Add(time.Hour)).TLS(t)
	base := "https://" + srv.HTTPAddr().String() + "/healthz"
	if resp, err := httpsClient(ca).Get(base); err == nil {
		resp.Body.Close()
		t.Fatal("HTTPS without a client certificate succeeded")
	}
	resp, err := httpsClient(ca, me).Get(base)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := client.Dial(ctx, srv.Addr().String(), client.WithTLS(&tls.Config{RootCAs: ca.Pool}), client.WithRetries(0, 0)); err == nil {
		c.Close()
		t.Fatal("binary port without a client certificate: connected")
	}
	c, err := client.Dial(ctx, srv.Addr().String(), client.WithTLS(&tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{me}}))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// servedName is the common name of the certificate a new TLS connection
// to addr is served.
func servedName(t *testing.T, addr string, ca *brokertest.CA) string {
	t.Helper()
	tc, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	return tc.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// TestTLSReload: a reload serves new connections the new certificate,
// keeps established connections, and keeps the old certificate when the
// new files are bad; a change of the files is noticed without a reload.
func TestTLSReload(t *testing.T) {
	ca := brokertest.NewCA(t, "test-ca")
	dir := t.TempDir()
	cfg := testConfig(t, 1)
	issue := func(cn string) {
		cfg.TLSCertFile, cfg.TLSKeyFile = ca.Issue(t, cn, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "127.0.0.1").Write(t, dir, "srv")
	}
	issue("first")
	cfg.TLSReloadCheck = 20 * time.Millisecond
	srv := start(t, cfg)
	addr, httpAddr := srv.Addr().String(), srv.HTTPAddr().String()
	ctx := context.Background()
	c, err := client.Dial(ctx, addr, client.WithTLS(&tls.Config{RootCAs: ca.Pool}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := servedName(t, addr, ca); got != "first" {
		t.Fatalf("served %q, want first", got)
	}

	issue("second")
	if err := srv.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{addr, httpAddr} {
		if got := servedName(t, a, ca); got != "second" {
			t.Fatalf("%s: served %q after the reload, want second", a, got)
		}
	}
	if _, err := c.Produce(ctx, "t", []byte("still here")); err != nil {
		t.Fatalf("the connection made before the reload: %v", err)
	}
	if st := srv.Broker().Stats(); st.Connections != 1 {
		t.Fatalf("%d connections, want the one from before the reload", st.Connections)
	}

	brokertest.WriteFile(t, cfg.TLSKeyFile, []byte("not a key"))
	if err := srv.ReloadTLS(); !errors.Is(err, server.ErrTLSFiles) {
		t.Fatalf("reload of a bad key: %v, want ErrTLSFiles", err)
	}
	if got := servedName(t, addr, ca); got != "second" {
		t.Fatalf("served %q after a failed reload, want second", got)
	}

	issue("third") // no ReloadTLS: the watch sees the files change
	deadline := time.Now().Add(5 * time.Second)
	for servedName(t, addr, ca) != "third" {
		if time.Now().After(deadline) {
			t.Fatal("the changed files were not loaded")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTLSWithTokens: TLS and tokens together, on both ports, and one
// Reload rereading both the auth file and the certificate.
func TestTLSWithTokens(t *testing.T) {
	ca := brokertest.NewCA(t, "test-ca")
	dir := t.TempDir()
	cfg := tlsConfig(t, ca, dir)
	hash := func(tok string) string { h := sha256.Sum256([]byte(tok)); return hex.EncodeToString(h[:]) }
	cfg.AuthFile = filepath.Join(dir, "auth")
	brokertest.WriteFile(t, cfg.AuthFile, []byte(hash("writer")+" produce,consume t\n"+hash("reader")+" consume t\n"))
	srv := start(t, cfg)
	ctx := context.Background()
	dial := func(token string) *client.Client {
		t.Helper()
		opts := []client.Option{client.WithTLS(&tls.Config{RootCAs: ca.Pool})}
		if token != "" {
			opts = append(opts, client.WithToken(token))
		}
		c, err := client.Dial(ctx, srv.Addr().String(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	if _, err := dial("").Produce(ctx, "t", []byte("x")); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("produce over TLS without a token: %v, want ErrUnauthenticated", err)
	}
	if _, err := dial("reader").Produce(ctx, "t", []byte("x")); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("produce over TLS with a consume token: %v, want ErrForbidden", err)
	}
	if _, err := dial("writer").Produce(ctx, "t", []byte("one")); err != nil {
		t.Fatalf("produce over TLS with a produce token: %v", err)
	}
	if msgs, err := dial("reader").Consume(ctx, "t", 0, 1); err != nil || len(msgs) != 1 || string(msgs[0].Value) != "one" {
		t.Fatalf("consume over TLS with a consume token: %v %v", msgs, err)
	}

	hc := httpsClient(ca)
	url := "https://" + srv.HTTPAddr().String() + "/topics/t?id=0&limit=1"
	status := func(token string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status(""); got != http.StatusUnauthorized {
		t.Fatalf("HTTPS consume without a token: %d, want 401", got)
	}
	if got := status("reader"); got != http.StatusOK {
		t.Fatalf("HTTPS consume with a consume token: %d, want 200", got)
	}

	// One Reload: the reader loses its right and a new certificate serves.
	brokertest.WriteFile(t, cfg.AuthFile, []byte(hash("writer")+" produce,consume t\n"))
	next := ca.Issue(t, "second", time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "127.0.0.1")
	certPEM, keyPEM := next.Write(t, t.TempDir(), "next")
	for _, f := range [][2]string{{certPEM, cfg.TLSCertFile}, {keyPEM, cfg.TLSKeyFile}} {
		b, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		brokertest.WriteFile(t, f[1], b)
	}
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := status("reader"); got != http.StatusUnauthorized {
		t.Fatalf("HTTPS consume with a token removed by Reload: %d, want 401", got)
	}
	if got := servedName(t, srv.Addr().String(), ca); got != "second" {
		t.Fatalf("after Reload the binary port serves %q, want second", got)
	}
}
