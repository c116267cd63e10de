package client_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// A retry whose backoff ctx cuts short fails with the connection's error
// and ctx's, and is counted as a failed request.
func TestRetryCutShortByContext(t *testing.T) {
	addr := fakeServer(t, func(i int, nc net.Conn) {
		for n := 0; ; n++ {
			h, _, err := readRequest(nc)
			if err != nil || i > 0 || n > 0 {
				return // every request but Dial's ping breaks its connection
			}
			nc.Write(protocol.AppendEmptyResponse(nil, h.Op, h.CorrID))
		}
	})
	c := dial(t, addr, client.WithRetries(3, time.Hour))
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	err := c.Ping(short())
	if !errors.Is(err, client.ErrConnection) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ping whose retry the context cut short: %v; want ErrConnection and DeadlineExceeded", err)
	}
	if n := c.Stats().Errors; n != 1 {
		t.Fatalf("%d errors counted, want 1", n)
	}
}
