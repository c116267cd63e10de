package peer_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/broker/peer"
	"github.com/haraqa/haraqa/protocol"
)

// fakeServer answers each request frame with what answer returns for it
// (nil: no answer; less than a header: that, then it closes the
// connection), on 127.0.0.1:0.
func fakeServer(t *testing.T, answer func(h protocol.RequestHeader, payload []byte) []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, nc := range conns {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Go(func() {
				defer nc.Close()
				serveFake(nc, answer)
			})
		}
	})
	return ln.Addr().String()
}

func serveFake(nc net.Conn, answer func(h protocol.RequestHeader, payload []byte) []byte) {
	r := bufio.NewReader(nc)
	for {
		var head [protocol.FrameLengthSize]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return
		}
		frame := make([]byte, protocol.FrameLengthSize+int(binary.LittleEndian.Uint32(head[:])))
		copy(frame, head[:])
		if _, err := io.ReadFull(r, frame[protocol.FrameLengthSize:]); err != nil {
			return
		}
		h, payload, err := protocol.ParseRequestHeader(frame)
		if err != nil {
			return
		}
		out := answer(h, payload)
		if out == nil {
			continue
		}
		if _, err := nc.Write(out); err != nil || len(out) < protocol.HeaderSize {
			return
		}
	}
}

// okOrPing answers a ping, and hands other requests to next.
func okOrPing(next func(h protocol.RequestHeader, payload []byte) []byte) func(protocol.RequestHeader, []byte) []byte {
	return func(h protocol.RequestHeader, payload []byte) []byte {
		if h.Op == protocol.OpPing {
			return protocol.AppendEmptyResponse(nil, h.Op, h.CorrID)
		}
		return next(h, payload)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestAgainstServer: a real server answers a peer's ping and topic
// info, a topic it lacks as a *protocol.Error of its code, and a
// replica op of a server outside a cluster as invalid.
func TestAgainstServer(t *testing.T) {
	srv := brokertest.Start(t, 1)
	ctx := ctxT(t)
	c, err := peer.Dial(ctx, srv.Addr, peer.Options{Name: "test", Token: "any"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.TopicInfo(ctx, "none"); !errors.Is(err, &protocol.Error{Code: protocol.CodeTopicNotFound}) {
		t.Fatalf("topic info of a missing topic: %v, want topic not found", err)
	}
	if _, err := c.LogEnds(ctx, []string{"t"}); err == nil {
		t.Fatal("log ends on a server without a cluster: no error")
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("the connection after refusals: %v", err)
	}
}

// TestPipelined: requests from many goroutines share the connection and
// each gets its own answer, even answered out of order.
func TestPipelined(t *testing.T) {
	var mu sync.Mutex
	var held []protocol.RequestHeader
	addr := fakeServer(t, okOrPing(func(h protocol.RequestHeader, payload []byte) []byte {
		topic, epoch, _ := protocol.ParseEpochEndRequest(payload)
		_ = topic
		// Hold every other request and answer it after the next one.
		mu.Lock()
		defer mu.Unlock()
		out := protocol.AppendEpochEndResponse(nil, h.CorrID, epoch, epoch*10)
		if len(held) > 0 {
			p := held[0]
			held = held[1:]
			return append(out, protocol.AppendEpochEndResponse(nil, p.CorrID, int64(p.Length), int64(p.Length)*10)...)
		}
		h.Length = uint32(epoch) // the epoch, to answer with later
		held = append(held, h)
		return nil
	}))
	ctx := ctxT(t)
	c, err := peer.Dial(ctx, addr, peer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			found, end, err := c.EpochEnd(ctx, "t", int64(i+1))
			if err != nil || found != int64(i+1) || end != int64(i+1)*10 {
				t.Errorf("epoch end %d: %d %d %v", i+1, found, end, err)
			}
		})
	}
	wg.Wait()
}

// TestServerRefusal: an error answer is a *protocol.Error of its code,
// with the server's message, and the connection stays usable.
func TestServerRefusal(t *testing.T) {
	addr := fakeServer(t, okOrPing(func(h protocol.RequestHeader, _ []byte) []byte {
		return protocol.AppendErrorResponse(nil, h.Op, h.CorrID, protocol.CodeNotLeader, "b:1")
	}))
	ctx := ctxT(t)
	c, err := peer.Dial(ctx, addr, peer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.ReplicaFetch(ctx, peer.ReplicaFetch{Topic: "t", Follower: "a:1", Epoch: 1})
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeNotLeader || pe.Message != "b:1" {
		t.Fatalf("a refused fetch: %v, want not leader b:1", err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestTooLarge: an answer over MaxResponseBytes fails its request alone.
func TestTooLarge(t *testing.T) {
	addr := fakeServer(t, okOrPing(func(h protocol.RequestHeader, _ []byte) []byte {
		return protocol.AppendErrorResponse(nil, h.Op, h.CorrID, protocol.CodeUnknown, string(make([]byte, 4000)))
	}))
	ctx := ctxT(t)
	c, err := peer.Dial(ctx, addr, peer.Options{MaxResponseBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.EpochEnd(ctx, "t", 1); !errors.Is(err, peer.ErrResponseTooLarge) {
		t.Fatalf("a large answer: %v, want ErrResponseTooLarge", err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("after a large answer: %v", err)
	}
}

// TestGivenUp: a request whose context ends returns at once; the late
// answer is dropped and the connection stays usable.
func TestGivenUp(t *testing.T) {
	release := make(chan struct{})
	addr := fakeServer(t, okOrPing(func(h protocol.RequestHeader, _ []byte) []byte {
		<-release
		return protocol.AppendEpochEndResponse(nil, h.CorrID, 1, 1)
	}))
	ctx := ctxT(t)
	c, err := peer.Dial(ctx, addr, peer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, _, err := c.EpochEnd(short, "t", 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a request past its deadline: %v", err)
	}
	close(release)
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("after a request given up on: %v", err)
	}
}

// TestBroken: a server that goes away fails the requests in flight and
// every one after with ErrConnection; Close gives ErrClosed.
func TestBroken(t *testing.T) {
	addr := fakeServer(t, okOrPing(func(h protocol.RequestHeader, _ []byte) []byte {
		return []byte{1, 2} // half a frame, then the connection closes
	}))
	ctx := ctxT(t)
	c, err := peer.Dial(ctx, addr, peer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.EpochEnd(ctx, "t", 1); !errors.Is(err, peer.ErrConnection) {
		t.Fatalf("a request the server dropped: %v, want ErrConnection", err)
	}
	if err := c.Ping(ctx); !errors.Is(err, peer.ErrConnection) || !errors.Is(c.Err(), peer.ErrConnection) {
		t.Fatalf("a request after: %v (Err %v), want ErrConnection", err, c.Err())
	}
	c.Close()
	ok := fakeServer(t, okOrPing(nil))
	c, err = peer.Dial(ctx, ok, peer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := c.Ping(ctx); !errors.Is(err, peer.ErrClosed) {
		t.Fatalf("a request after Close: %v, want ErrClosed", err)
	}
}

// TestHTTPPort: an HTTP server's answer is ErrHTTPPort, not a hang.
func TestHTTPPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		_, _ = nc.Read(make([]byte, 64))
		_, _ = nc.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
		_, _ = nc.Read(make([]byte, 64))
	}()
	_, err = peer.Dial(ctxT(t), ln.Addr().String(), peer.Options{})
	if !errors.Is(err, peer.ErrHTTPPort) || !errors.Is(err, peer.ErrConnection) {
		t.Fatalf("dialing an HTTP port: %v, want ErrHTTPPort", err)
	}
}

// TestReplicaWaitBounds: a wait of no topic, or of too many, is refused
// before anything is sent.
func TestReplicaWaitBounds(t *testing.T) {
	addr := fakeServer(t, okOrPing(func(protocol.RequestHeader, []byte) []byte { panic("sent") }))
	ctx := ctxT(t)
	c, err := peer.Dial(ctx, addr, peer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, n := range []int{0, protocol.MaxReplicaWaitTopics + 1} {
		if _, err := c.ReplicaWait(ctx, peer.ReplicaWait{Topics: make([]protocol.ReplicaWaitTopic, n)}); !errors.Is(err, protocol.ErrInvalidArgument) {
			t.Errorf("a wait of %d topics: %v, want invalid argument", n, err)
		}
	}
	if _, err := c.LogEnds(ctx, nil); !errors.Is(err, protocol.ErrInvalidArgument) {
		t.Errorf("log ends of no topic: %v, want invalid argument", err)
	}
	if _, err := c.ProducerOwners(ctx, "t", make([]uint64, protocol.MaxOwnerQuery+1)); !errors.Is(err, protocol.ErrInvalidArgument) {
		t.Errorf("too many producer ids: %v, want invalid argument", err)
	}
}
