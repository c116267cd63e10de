package client_test

import (
	"errors"
	"testing"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// Produce refuses a batch of more messages than a batch may hold before
// sending it, naming the bound; the server refuses one all the same
// (protocol.TestMaxBatchMessages), so the connection is not spent on it.
func TestProduceTooManyMessages(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	ctx := testCtx(t)
	c := dial(t, srv.Addr)
	if err := c.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	_, err := c.Produce(ctx, "t", make([][]byte, protocol.MaxBatchMessages+1)...)
	if !errors.Is(err, client.ErrBadBatch) {
		t.Fatalf("produce of %d messages: %v, want ErrBadBatch", protocol.MaxBatchMessages+1, err)
	}
	if base, err := c.Produce(ctx, "t", make([][]byte, 1000)...); err != nil || base != 0 {
		t.Fatalf("then 1000 messages: base %d, %v", base, err)
	}
}
