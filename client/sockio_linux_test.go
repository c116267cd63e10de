package client

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection: ours, with
// its raw socket I/O, and the peer's.
func tcpPair(t *testing.T) (*net.TCPConn, *sockIO, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { nc.Close(); peer.Close() })
	tcp := nc.(*net.TCPConn)
	raw, err := tcp.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return tcp, newSockIO(raw), peer
}

// Reads wait for data, see the peer's close as io.EOF, stop at the read
// deadline, and fail with net.ErrClosed once the connection is closed.
func TestSockIORead(t *testing.T) {
	tcp, s, peer := tcpPair(t)
	go func() {
		time.Sleep(10 * time.Millisecond) // the read below waits on the poller first
		peer.Write([]byte("hello"))
	}()
	buf := make([]byte, 16)
	n, err := io.ReadAtLeast(s, buf, 5)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}

	tcp.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := s.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
	tcp.SetReadDeadline(time.Time{})

	peer.Write([]byte("bye"))
	peer.Close()
	got, err := io.ReadAll(s)
	if err != nil || string(got) != "bye" {
		t.Fatalf("read to the close: %q, %v", got, err)
	}

	tcp.Close()
	if _, err := s.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
	if _, err := s.Write(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

// A write larger than the socket takes at once: tryWrite returns what it
// took without waiting; Write waits for room, until the write deadline.
func TestSockIOWrite(t *testing.T) {
	tcp, s, peer := tcpPair(t)
	tcp.SetWriteBuffer(64 << 10)
	big := bytes.Repeat([]byte("0123456789abcdef"), 4<<20/16)

	n, err := s.tryWrite(big)
	if err != nil || n == 0 || n >= len(big) {
		t.Fatalf("tryWrite of %d bytes to a peer that does not read: %d, %v", len(big), n, err)
	}
	tcp.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	m, err := s.Write(big[n:])
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a peer that does not read: %d, %v, want the deadline", m, err)
	}
	tcp.SetWriteDeadline(time.Time{})
	sent := n + m

	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(peer)
		got <- b
	}()
	rest, err := s.Write(big[sent:])
	if err != nil || rest != len(big)-sent {
		t.Fatalf("write to a reading peer: %d of %d, %v", rest, len(big)-sent, err)
	}
	tcp.CloseWrite()
	if b := <-got; !bytes.Equal(b, big) {
		t.Fatalf("the peer read %d bytes, not the %d written in order", len(b), len(big))
	}

	peer.Close()
	var err2 error
	deadline := time.Now().Add(5 * time.Second)
	for err2 == nil && time.Now().Before(deadline) {
		_, err2 = s.Write([]byte("x")) // the first may land before the reset
	}
	if err2 == nil || errors.Is(err2, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a closed peer: %v", err2)
	}
}

// conn.write clears the deadline it had to set for a slow write: the next
// write, after that deadline, goes through.
func TestWriteClearsItsDeadline(t *testing.T) {
	tcp, s, peer := tcpPair(t)
	tcp.SetWriteBuffer(64 << 10)
	c := &conn{nc: tcp, sock: s}
	big := bytes.Repeat([]byte{1}, 4<<20)
	got := make(chan int, 1)
	go func() {
		n, _ := io.Copy(io.Discard, peer)
		got <- int(n)
	}()
	dl := time.Now()
	if n, err := c.write(big, dl); err != nil || n != len(big) {
		t.Fatalf("slow write: %d, %v", n, err)
	}
	// Past the deadline the write above had (dl plus minWriteTime).
	time.Sleep(time.Until(dl.Add(minWriteTime + 10*time.Millisecond)))
	if n, err := c.write([]byte("after"), time.Time{}); err != nil || n != 5 {
		t.Fatalf("write after the slow one's deadline: %d, %v", n, err)
	}
	tcp.CloseWrite()
	if n := <-got; n != len(big)+5 {
		t.Fatalf("the peer read %d bytes, want %d", n, len(big)+5)
	}
}

// post returns without waiting for a socket that does not take the
// whole frame; a goroutine writes the rest, then what was queued behind
// it, in order.
func TestPostLeavesTheRestToAGoroutine(t *testing.T) {
	tcp, s, peer := tcpPair(t)
	tcp.SetWriteBuffer(64 << 10)
	raw, _ := tcp.SyscallConn()
	c := &conn{nc: tcp, direct: true, raw: raw, sock: s, pending: make(map[uint32]waiter),
		done: make(chan struct{}), kick: make(chan struct{}, 1)}
	big := bytes.Repeat([]byte{7}, 4<<20)
	frame := func(body []byte) func([]byte, uint32) []byte {
		return func(dst []byte, _ uint32) []byte { return append(dst, body...) }
	}
	sent := make(chan error, 1)
	go func() {
		_, _, err := c.post(time.Time{}, frame(big), nil)
		if err == nil {
			_, _, err = c.post(time.Time{}, frame([]byte("behind")), nil)
		}
		sent <- err
	}()
	select {
	case err := <-sent:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("post waited for a peer that does not read")
	}
	want := append(append([]byte(nil), big...), "behind"...)
	got := make([]byte, len(want))
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(peer, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the peer read %v: the frames not whole and in order", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.wmu.Lock()
		writing := c.writing
		c.wmu.Unlock()
		if !writing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer's turn was never given up")
		}
		time.Sleep(time.Millisecond)
	}
}
