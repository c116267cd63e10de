package client_test

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// TestServerIdleTimeout: a client idle for longer than the server's idle
// timeout, and not dropping its connection itself, finds it closed by the
// server and produces all the same, without a retry of its own.
func TestServerIdleTimeout(t *testing.T) {
	srv := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) { c.IdleTimeout = 200 * time.Millisecond })
	c := dial(t, srv.Addr, client.WithIdleTimeout(0), client.WithRetries(0, time.Millisecond))
	ctx := testCtx(t)
	if _, err := c.Produce(ctx, "t", []byte("a")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to close the idle connection", func() bool { return srv.Broker.Stats().IdleClosed == 1 })
	if off, err := c.Produce(ctx, "t", []byte("b")); err != nil || off != 1 {
		t.Fatalf("produce after the server closed the idle connection: offset %d, %v", off, err)
	}
	if got := c.Stats().Reconnects; got != 1 {
		t.Fatalf("%d reconnects, want 1", got)
	}
}

// TestClientIdleTimeout: a client drops a connection idle for
// WithIdleTimeout before the server would, and dials a new one for the
// next request.
func TestClientIdleTimeout(t *testing.T) {
	const idle = 100 * time.Millisecond
	srv := brokertest.Start(t, 1)
	c := dial(t, srv.Addr, client.WithIdleTimeout(idle))
	ctx := testCtx(t)
	if _, err := c.Produce(ctx, "t", []byte("a")); err != nil {
		t.Fatal(err)
	}
	<-time.After(idle + idle/2) // the idleness under test
	if _, err := c.Produce(ctx, "t", []byte("b")); err != nil {
		t.Fatal(err)
	}
	if got := c.Stats().Reconnects; got != 1 {
		t.Fatalf("%d reconnects, want 1", got)
	}
	waitFor(t, "the server to see the idle connection closed", func() bool { return srv.Broker.Stats().Connections == 1 })
	if n := srv.Broker.Stats().IdleClosed; n != 0 {
		t.Fatalf("the server closed %d idle connections: the client should have first", n)
	}
}

// fakeServer accepts connections on 127.0.0.1:0 and runs serve on each,
// numbered from 0, until the test ends.
func fakeServer(t *testing.T, serve func(i int, nc net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for i := 0; ; i++ {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				nc.SetDeadline(time.Now().Add(ioTimeout))
				serve(i, nc)
			}()
		}
	}()
	return ln.Addr().String()
}

// readRequest reads one request frame.
func readRequest(r io.Reader) (protocol.RequestHeader, []byte, error) {
	var l [protocol.FrameLengthSize]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return protocol.RequestHeader{}, nil, err
	}
	f := make([]byte, protocol.FrameLengthSize+int(binary.LittleEndian.Uint32(l[:])))
	copy(f, l[:])
	if _, err := io.ReadFull(r, f[len(l):]); err != nil {
		return protocol.RequestHeader{}, nil, err
	}
	h, p, err := protocol.ParseRequestHeader(f)
	return h, p, err
}

// serveOps reads nc's requests until it fails or serve returns false,
// answering pings itself and handing serve every other request.
func serveOps(nc net.Conn, serve func(h protocol.RequestHeader, payload []byte) bool) {
	for {
		h, payload, err := readRequest(nc)
		if err != nil {
			return
		}
		if h.Op == protocol.OpPing {
			nc.Write(protocol.AppendEmptyResponse(nil, h.Op, h.CorrID))
		} else if !serve(h, payload) {
			return
		}
	}
}

// TestIdleTimeoutFrameResends: a produce the client sent just as the
// server closed the connection as idle (its idle timeout frame arriving
// after the request was written) is sent again on a new connection,
// since the frame says the server read nothing more; without the frame,
// a produce whose connection closes after it was written is not resent.
func TestIdleTimeoutFrameResends(t *testing.T) {
	for _, withFrame := range []bool{true, false} {
		t.Run(map[bool]string{true: "frame", false: "no frame"}[withFrame], func(t *testing.T) {
			var produces atomic.Int32
			addr := fakeServer(t, func(i int, nc net.Conn) {
				serveOps(nc, func(h protocol.RequestHeader, _ []byte) bool {
					if h.Op != protocol.OpProduce {
						return true
					}
					if produces.Add(1) == 1 {
						if withFrame {
							nc.Write(protocol.AppendErrorResponse(nil, 0, 0, protocol.CodeIdleTimeout, "idle timeout"))
						}
						return false // close, the produce unanswered
					}
					nc.Write(protocol.AppendProduceResponse(nil, h.CorrID, 41, 1))
					return true
				})
			})
			c := dial(t, addr, client.WithRetries(0, time.Millisecond))
			off, err := c.Produce(testCtx(t), "t", []byte("a"))
			if !withFrame {
				if !errors.Is(err, client.ErrConnection) || produces.Load() != 1 {
					t.Fatalf("produce on a connection closed after it was sent: %d sent, %v; want 1 and ErrConnection", produces.Load(), err)
				}
				return
			}
			if err != nil || off != 41 || produces.Load() != 2 {
				t.Fatalf("produce: offset %d, %v, sent %d times; want 41, nil, 2", off, err, produces.Load())
			}
		})
	}
}
