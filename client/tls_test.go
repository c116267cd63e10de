package client_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/storage"
)

// startTLS starts a server whose binary port speaks TLS with cfg.
func startTLS(t *testing.T, cfg *tls.Config) *brokertest.Server {
	t.Helper()
	return brokertest.Start(t, 1, func(_ *storage.Options, bc *broker.Config) { bc.TLS = cfg })
}

// TestTLSRoundTrip produces and consumes over TLS, with consumes of several
// MiB (4 MiB responses, whose batches the pump reads from the segment
// files and encrypts), and checks every byte.
func TestTLSRoundTrip(t *testing.T) {
	ca := brokertest.NewCA(t, "test-ca")
	srv := startTLS(t, brokertest.ServerTLS(t, ca.Server(t)))
	c := dial(t, srv.Addr, client.WithTLS(&tls.Config{RootCAs: ca.Pool}))
	ctx := testCtx(t)
	const n, size = 12, 512 << 10 // 6 MiB
	for i := range n {
		if _, err := c.Produce(ctx, "t", bytes.Repeat([]byte{byte(i)}, size)); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := c.Consume(ctx, "t", 0, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != n {
		t.Fatalf("consumed %d messages, want %d", len(msgs), n)
	}
	for i, m := range msgs {
		if m.Offset != int64(i) || !bytes.Equal(m.Value, bytes.Repeat([]byte{byte(i)}, size)) {
			t.Fatalf("message %d: offset %d, %d bytes, not what was produced", i, m.Offset, len(m.Value))
		}
	}
	if st := srv.Broker.Stats(); st.CopiedBytes < n*size || st.ZeroCopyBytes != 0 {
		t.Errorf("the consume's batches did not go through the pump: %+v", st)
	}
}

// TestTLSRefused: a client that does not trust the server's certificate,
// or one whose certificate has expired, cannot connect; nor can a client
// without a certificate when the server requires one.
func TestTLSRefused(t *testing.T) {
	ca := brokertest.NewCA(t, "test-ca")
	other := brokertest.NewCA(t, "other-ca")
	good := startTLS(t, brokertest.ServerTLS(t, ca.Server(t)))
	expired := startTLS(t, brokertest.ServerTLS(t,
		ca.Issue(t, "127.0.0.1", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour), "127.0.0.1")))
	mtls := brokertest.ServerTLS(t, ca.Server(t))
	mtls.ClientAuth, mtls.ClientCAs = tls.RequireAndVerifyClientCert, ca.Pool
	mutual := startTLS(t, mtls)

	refused := func(name, addr string, cfg *tls.Config) {
		t.Helper()
		ctx, cancel := context.WithTimeout(testCtx(t), 5*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, addr, client.WithTLS(cfg), client.WithRetries(0, 0))
		if err == nil {
			c.Close()
			t.Errorf("%s: connected", name)
			return
		}
		if !errors.Is(err, client.ErrConnection) {
			t.Errorf("%s: %v, want ErrConnection", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	refused("wrong CA", good.Addr, &tls.Config{RootCAs: other.Pool})
	refused("system roots", good.Addr, &tls.Config{})
	refused("expired", expired.Addr, &tls.Config{RootCAs: ca.Pool})
	refused("no client certificate", mutual.Addr, &tls.Config{RootCAs: ca.Pool})
	stranger := other.Issue(t, "stranger", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	refused("client certificate of another CA", mutual.Addr,
		&tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{stranger.TLS(t)}})

	// The right client certificate is let in.
	me := ca.Issue(t, "me", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	c := dial(t, mutual.Addr, client.WithTLS(&tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{me.TLS(t)}}))
	if _, err := c.Produce(testCtx(t), "t", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	// The refusals were counted, and the servers still serve.
	if n := mutual.Broker.Stats().TLSErrors; n < 2 {
		t.Errorf("TLSErrors = %d, want at least 2", n)
	}
	dial(t, good.Addr, client.WithTLS(&tls.Config{RootCAs: ca.Pool}))
}

// TestTLSPlaintextClient: a plaintext client on a TLS port is told so, and
// the port goes on serving TLS clients.
func TestTLSPlaintextClient(t *testing.T) {
	ca := brokertest.NewCA(t, "test-ca")
	srv := startTLS(t, brokertest.ServerTLS(t, ca.Server(t)))
	ctx, cancel := context.WithTimeout(testCtx(t), 5*time.Second)
	defer cancel()
	_, err := client.Dial(ctx, srv.Addr, client.WithRetries(0, 0))
	if err == nil {
		t.Fatal("a plaintext client connected to a TLS port")
	}
	t.Log(err)
	c := dial(t, srv.Addr, client.WithTLS(&tls.Config{RootCAs: ca.Pool}))
	if err := c.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// TestTLSManyConnections opens and closes TLS connections and checks that
// the broker counts none left open afterwards.
func TestTLSManyConnections(t *testing.T) {
	ca := brokertest.NewCA(t, "test-ca")
	srv := startTLS(t, brokertest.ServerTLS(t, ca.Server(t)))
	for i := range 20 {
		c := dial(t, srv.Addr, client.WithTLS(&tls.Config{RootCAs: ca.Pool}))
		if _, err := c.Produce(testCtx(t), "t", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	waitFor(t, "connections to close", func() bool { return srv.Broker.Stats().Connections == 0 })
}
