package client_test

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/storage"
)

// TestResponseTooLarge: a response over WithMaxResponseBytes fails its
// request with ErrResponseTooLarge naming both sizes and the option, not
// as a broken connection; the connection goes on serving, and a client
// whose limit follows its batch size reads the message back.
func TestResponseTooLarge(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	ctx := testCtx(t)
	msg := bytes.Repeat([]byte("m"), 2<<20)
	producer := dial(t, srv.Addr, client.WithMaxBatchBytes(4<<20))
	if _, err := producer.Produce(ctx, "big", msg); err != nil {
		t.Fatal(err)
	}
	if got, err := producer.Consume(ctx, "big", 0, 1); err != nil || len(got) != 1 || !bytes.Equal(got[0].Value, msg) {
		t.Fatalf("the producer reads back what it wrote: %d messages, %v", len(got), err)
	}

	small := dial(t, srv.Addr, client.WithMaxResponseBytes(1<<20))
	_, err := small.Consume(ctx, "big", 0, 1)
	if !errors.Is(err, client.ErrResponseTooLarge) || errors.Is(err, client.ErrConnection) {
		t.Fatalf("consume over the limit: %v, want ErrResponseTooLarge and not ErrConnection", err)
	}
	for _, want := range []string{strconv.Itoa(1 << 20), "WithMaxResponseBytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%q does not name %s", err, want)
		}
	}
	if err := small.Ping(ctx); err != nil {
		t.Fatalf("the connection after a skipped response: %v", err)
	}
	if st := small.Stats(); st.Reconnects != 0 {
		t.Fatalf("%d reconnects: the skipped response broke the connection", st.Reconnects)
	}
}

// TestConnectionLimitError: a client of a server at its connection limit
// gets the server's limit-reached error, naming the limit, instead of a
// bare EOF.
func TestConnectionLimitError(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) { c.MaxConns = 1 })
	ctx := testCtx(t)
	first := dial(t, srv.Addr)
	if err := first.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := client.Dial(ctx, srv.Addr, client.WithRetries(0, 0))
	if err == nil {
		second.Close()
	}
	var ce *client.Error
	if !errors.Is(err, client.ErrLimitReached) || !errors.As(err, &ce) || ce.Code != client.CodeLimitReached || !strings.Contains(ce.Message, "-max-conns") {
		t.Fatalf("dial over the connection limit: %v, want ErrLimitReached naming -max-conns", err)
	}
}
