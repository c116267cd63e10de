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

// A frame's remaining bytes told to the socket (expect) are read in a few
// reads though the peer sends them in many small pieces: each read that
// has to wait does so under a low-water mark, the smaller of what is due
// and what it asks for. The last 48,576 bytes, under minLowat, come after
// a pause: they are read too. expect(0) puts the mark back.
func TestSockIOLowWaterMark(t *testing.T) {
	tcp, s, peer := tcpPair(t)
	const size, chunk = 1 << 20, 200_000
	const tail = size % chunk
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i * 31)
	}
	go func() {
		for off := 0; off < size-tail; off += 16 << 10 {
			peer.Write(want[off:min(off+16<<10, size-tail)])
			time.Sleep(100 * time.Microsecond)
		}
		time.Sleep(30 * time.Millisecond) // the reader waits for the tail alone
		peer.Write(want[size-tail:])
	}()
	tcp.SetReadDeadline(time.Now().Add(10 * time.Second))
	s.expect(size)
	got := make([]byte, size)
	reads := 0
	for n := 0; n < size; reads++ {
		m, err := s.Read(got[n:min(n+chunk, size)])
		if err != nil {
			t.Fatalf("read %d of %d bytes: %v", n, size, err)
		}
		n += m
	}
	s.expect(0)
	if !bytes.Equal(got, want) {
		t.Fatal("the bytes read differ from those sent")
	}
	if s.lowat != 0 || s.due != 0 {
		t.Fatalf("after the frame: low-water mark %d, %d bytes due; want 0, 0", s.lowat, s.due)
	}
	// 62 pieces before the tail, each its own read without the mark.
	if reads > 16 {
		t.Fatalf("%d reads for a megabyte sent in %d pieces", reads, (size-tail)/(16<<10)+1)
	}
}

// A read waiting under a low-water mark still stops at the read deadline,
// and a peer that closes wakes it: neither waits for the mark.
func TestSockIOLowWaterMarkStops(t *testing.T) {
	tcp, s, peer := tcpPair(t)
	peer.Write(make([]byte, 64<<10))
	s.expect(1 << 20)
	buf := make([]byte, 1<<20)
	n, err := io.ReadAtLeast(s, buf, 64<<10)
	if err != nil || n != 64<<10 {
		t.Fatalf("read %d bytes, %v", n, err)
	}
	tcp.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := s.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read under the mark past the deadline: %v", err)
	}
	if s.lowat < minLowat {
		t.Fatalf("low-water mark %d while %d bytes are due", s.lowat, s.due)
	}
	tcp.SetReadDeadline(time.Now().Add(10 * time.Second))
	go func() {
		time.Sleep(10 * time.Millisecond)
		peer.Write([]byte("end"))
		peer.Close()
	}()
	got, err := io.ReadAll(s)
	if err != nil || string(got) != "end" {
		t.Fatalf("read to the close under the mark: %q, %v", got, err)
	}
	s.expect(0)
	if s.lowat != 0 {
		t.Fatalf("low-water mark %d after expect(0)", s.lowat)
	}
}

// A wait never keeps a low-water mark above the bytes still due: a mark
// left by an earlier wait of the frame (here set by hand, as a wait cut
// short by the kernel leaves it) is lowered before the next wait, which
// then wakes for the last bytes.
func TestSockIOLowWaterMarkLowered(t *testing.T) {
	tcp, s, peer := tcpPair(t)
	s.setLowat(1 << 20)
	if s.lowat != 1<<20 {
		t.Fatalf("low-water mark %d, want %d", s.lowat, 1<<20)
	}
	s.expect(minLowat / 2)
	go func() {
		time.Sleep(20 * time.Millisecond) // the read below waits first
		peer.Write(make([]byte, minLowat/2))
	}()
	tcp.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := io.ReadFull(s, make([]byte, minLowat/2))
	if err != nil {
		t.Fatalf("read %d of the %d bytes due: %v", n, minLowat/2, err)
	}
	if s.lowat != 0 {
		t.Fatalf("low-water mark %d while waiting for %d bytes", s.lowat, minLowat/2)
	}
	s.expect(0)
}
