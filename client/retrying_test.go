package client_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// A Reader's request that the server did not read, closing the connection
// as idle (its idle timeout frame), is sent again at once on a new
// connection, whatever WithRetries says, as the Client's requests are;
// without the frame, with no retries, Next fails with ErrConnection.
func TestReaderIdleTimeoutFrameResends(t *testing.T) {
	for _, withFrame := range []bool{true, false} {
		t.Run(map[bool]string{true: "frame", false: "no frame"}[withFrame], func(t *testing.T) {
			var consumes atomic.Int32
			addr := fakeServer(t, func(i int, nc net.Conn) {
				serveOps(nc, func(h protocol.RequestHeader, _ []byte) bool {
					if h.Op != protocol.OpConsume {
						return true
					}
					switch consumes.Add(1) {
					case 1:
						if withFrame {
							nc.Write(protocol.AppendErrorResponse(nil, 0, 0, protocol.CodeIdleTimeout, "idle timeout"))
						}
						return false // close, the consume unanswered
					case 2:
						nc.Write(protocol.AppendConsumeResponse(nil, h.CorrID, 0, 1, protocol.AppendBatch(nil, []byte("a"))))
					} // later ones wait for new messages: unanswered
					return true
				})
			})
			c := dial(t, addr, client.WithRetries(0, time.Millisecond))
			r := newReader(t, c, "t", 0)
			msgs, err := r.Next(testCtx(t))
			if !withFrame {
				if !errors.Is(err, client.ErrConnection) || consumes.Load() != 1 {
					t.Fatalf("Next on a connection closed without the frame: %d sent, %v; want 1 and ErrConnection", consumes.Load(), err)
				}
				return
			}
			if err != nil || len(msgs) != 1 || string(msgs[0].Value) != "a" {
				t.Fatalf("Next after the idle timeout frame: %v, %v; want message a", msgs, err)
			}
		})
	}
}

// A retry whose backoff ctx cuts short fails with the connection's error
// and ctx's, for a Client's request and a Reader alike, and is counted as
// a failed request by the Client.
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
	r := newReader(t, c, "t", 0)
	if _, err := r.Next(short()); !errors.Is(err, client.ErrConnection) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next whose retry the context cut short: %v; want ErrConnection and DeadlineExceeded", err)
	}
}
