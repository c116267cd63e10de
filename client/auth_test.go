package client_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/auth"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/client/admin"
	"github.com/haraqa/haraqa/storage"
)

func hashHex(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}

func startWithTokens(t *testing.T) *brokertest.Server {
	t.Helper()
	rules, err := auth.Parse(strings.NewReader(
		hashHex("writer")+" produce,consume orders.*\n"+hashHex("admin")+" admin *\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	a := auth.New(rules)
	return brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) { c.Auth = a })
}

func TestWithToken(t *testing.T) {
	srv := startWithTokens(t)
	ctx := testCtx(t)

	// Without a token: Dial's ping is open, requests are not.
	anon, err := client.Dial(ctx, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := anon.Produce(ctx, "orders.eu", []byte("x")); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("produce without a token: %v, want ErrUnauthenticated", err)
	}

	// A wrong token fails Dial.
	if _, err := client.Dial(ctx, srv.Addr, client.WithToken("wrong")); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("Dial with a wrong token: %v, want ErrUnauthenticated", err)
	}

	w, err := client.Dial(ctx, srv.Addr, client.WithToken("writer"), client.WithIdleTimeout(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Produce(ctx, "orders.eu", []byte("one")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Produce(ctx, "billing", []byte("x")); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("produce to another topic: %v, want ErrForbidden", err)
	}
	if err := w.DeleteTopic(ctx, "orders.eu"); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("delete without admin: %v, want ErrForbidden", err)
	}
	if err := admin.New(w).SetReplicas(ctx, "orders.eu", 1); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("a replication factor without admin: %v, want ErrForbidden", err)
	}
	// Idle past WithIdleTimeout: the next request is on a new connection,
	// which says hello again.
	time.Sleep(5 * time.Millisecond)
	msgs, err := w.Consume(ctx, "orders.eu", 0, 10)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("consume on a new connection: %d messages, %v", len(msgs), err)
	}
	if w.Stats().Reconnects == 0 {
		t.Fatal("no reconnection happened")
	}

	a, err := client.Dial(ctx, srv.Addr, client.WithToken("admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Produce(ctx, "billing", []byte("x")); err != nil {
		t.Fatal(err)
	}
	names, err := w.ListTopics(ctx, "")
	if err != nil || !slices.Equal(names, []string{"orders.eu"}) {
		t.Fatalf("writer's list = %q, %v; want only orders.eu", names, err)
	}
}

// TestWithTokenNoAuth: a server without an auth file takes any token.
func TestWithTokenNoAuth(t *testing.T) {
	srv := brokertest.Start(t, 1)
	c, err := client.Dial(testCtx(t), srv.Addr, client.WithToken("whatever"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Produce(testCtx(t), "t", []byte("x")); err != nil {
		t.Fatal(err)
	}
}
