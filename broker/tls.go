package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/haraqa/haraqa/protocol"
)

// This file: TLS on the binary port, terminated in the process. gnet has no
// TLS and serves only descriptors it can poll, so each TLS connection is
// handshaken on a goroutine, then served through a socket pair: gnet gets
// one end, as it would a TCP connection, and two goroutines (the pump) copy
// bytes between the other end and the tls.Conn, decrypting what the client
// sends and encrypting what the broker writes. The protocol logic stays in
// one place; a consume's batches go from the segment files to the pump,
// which encrypts them in its place in the stream (tlsout.go). See
// docs/security.md, "TLS".

// tlsHandshakeTimeout bounds a TLS handshake: a client that connects and
// says nothing holds a connection slot (-max-conns) no longer than this.
const tlsHandshakeTimeout = 10 * time.Second

// Pump buffers. Client to broker: 16 KiB, the largest TLS record's
// plaintext (tls.Conn.Read returns at most one record); it is held while
// the pump waits in Read, so an idle TLS connection costs 16 KiB here.
// Broker to client: 256 KiB, sixteen whole records per write(2), taken
// only while bytes wait to be sent.
const (
	pumpInSize  = 16 << 10
	pumpOutSize = 256 << 10
)

var (
	pumpInBuffers  = sync.Pool{New: func() any { b := make([]byte, pumpInSize); return &b }}
	pumpOutBuffers = sync.Pool{New: func() any { b := make([]byte, pumpOutSize); return &b }}
)

// notTLSMessage answers a client that speaks plaintext to a TLS port.
const notTLSMessage = "this port speaks TLS only: connect with TLS (hrqa -tls or -tls-ca FILE; client.WithTLS)"

// peer is what the broker knows of a TLS connection's client. It is the
// gnet context the socket pair's end is registered with, read by OnOpen.
type peer struct {
	remote net.Addr // the client's TCP address
	out    *tlsOut  // shared with the pump
}

// remoteAddr is the client's address on c: for a TLS connection, the TCP
// address behind the socket pair, not the pair's unnamed end. Everything
// that logs or keys on a client's address reads it here. Runs on the loop.
func remoteAddr(c gnet.Conn) net.Addr {
	if cs, ok := c.Context().(*conn); ok && cs.remote != nil {
		return cs.remote
	}
	return c.RemoteAddr()
}

// serveTLS handshakes nc, a connection counted in b.conns for
// TLSDescriptors (admit), and hands it to an event loop through a socket
// pair. The event loop's close releases the address and one descriptor,
// pumpOut's end the other two. Runs on its own goroutine.
func (b *Broker) serveTLS(nc net.Conn) {
	defer b.tlsWG.Done()
	bc := &batchConn{Conn: nc}
	tc := tls.Server(bc, b.cfg.TLS)
	ctx, cancel := context.WithTimeout(b.ctx, tlsHandshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		defer b.releaseConn(nc.RemoteAddr(), TLSDescriptors)
		b.stats.tlsErrors.Add(1)
		var rhe tls.RecordHeaderError
		if errors.As(err, &rhe) && rhe.Conn != nil {
			// Not TLS at all, most likely a plaintext client: tell it in
			// its own protocol, as the connection limit does.
			_ = rhe.Conn.SetWriteDeadline(time.Now().Add(limitWriteTimeout))
			_, _ = rhe.Conn.Write(protocol.AppendErrorResponse(nil, 0, 0, protocol.CodeMalformedRequest, notTLSMessage))
		}
		nc.Close()
		if n, ok := b.tlsLog.due(); ok {
			b.cfg.Logger.Warn("TLS handshake failed", "remote", nc.RemoteAddr(), "err", err, "failures", n)
		}
		return
	}
	inner, outer, err := socketPair()
	if err != nil {
		tc.Close()
		b.releaseConn(nc.RemoteAddr(), TLSDescriptors)
		b.cfg.Logger.Error("TLS connection: socket pair", "remote", nc.RemoteAddr(), "err", err)
		return
	}
	out := &tlsOut{wake: wakeReader(outer)}
	if err := b.enroll(inner, &peer{remote: nc.RemoteAddr(), out: out}); err != nil {
		tc.Close()
		outer.Close()
		b.conns.Add(1 - TLSDescriptors) // enroll released the first
		b.cfg.Logger.Error("TLS connection", "remote", nc.RemoteAddr(), "err", err)
		return
	}
	b.tlsWG.Add(2)
	go b.pumpIn(tc, outer)
	go b.pumpOut(tc, bc, outer, out)
}

// batchConn is the TCP connection under a TLS connection. Between begin
// and flush it gathers what the tls.Conn writes, which writes each record
// with a write(2) of its own, and flush sends it with one: a 64 KiB
// chunk of a consume is four records and one system call.
type batchConn struct {
	net.Conn
	mu       sync.Mutex
	batching bool
	buf      *[]byte // pooled while batching
}

func (c *batchConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.batching {
		return c.Conn.Write(p)
	}
	*c.buf = append(*c.buf, p...)
	return len(p), nil
}

// begin starts gathering writes.
func (c *batchConn) begin() {
	c.mu.Lock()
	c.batching = true
	c.buf = batchBuffers.Get().(*[]byte)
	c.mu.Unlock()
}

// flush sends what was gathered and stops gathering.
func (c *batchConn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batching = false
	_, err := c.Conn.Write(*c.buf)
	*c.buf = (*c.buf)[:0]
	batchBuffers.Put(c.buf)
	c.buf = nil
	return err
}

// batchBuffers hold a pump chunk's records: its plaintext and, per 16 KiB
// record, a 5-byte header and a 16-byte tag (with TLS 1.3 one more byte).
var batchBuffers = sync.Pool{New: func() any { b := make([]byte, 0, pumpOutSize+pumpOutSize/pumpInSize*32+64); return &b }}

// pairBufferSize is the send buffer asked for on each end of a socket
// pair (the kernel caps it at net.core.wmem_max). A Unix stream socket
// queues what it sends against its own send buffer; the default, about
// 200 KiB, makes a 1 MiB produce wait for the event loop several times,
// and large responses go through gnet's buffer. Kernel memory is taken only
// for bytes in flight.
const pairBufferSize = 1 << 20

// socketPair returns the two ends of a new Unix stream socket pair.
func socketPair() (inner, outer *net.UnixConn, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	for _, fd := range fds {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, pairBufferSize) // best effort
	}
	ends := [2]*net.UnixConn{}
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "tls-pair")
		c, err := net.FileConn(f) // duplicates the descriptor
		f.Close()
		if err == nil {
			var ok bool
			if ends[i], ok = c.(*net.UnixConn); !ok {
				c.Close()
				err = fmt.Errorf("socketpair: %T is not a Unix connection", c)
			}
		}
		if err != nil {
			if i == 0 {
				unix.Close(fds[1])
			} else {
				ends[0].Close()
			}
			return nil, nil, err
		}
	}
	return ends[0], ends[1], nil
}

// pumpIn copies what the client sends, decrypted, to the broker's end of
// the pair. When the client stops sending (close_notify, EOF or an error),
// it shuts the pair's write side: the broker reads EOF and closes the
// connection as it would a TCP client's, and pumpOut ends with it.
func (b *Broker) pumpIn(tc *tls.Conn, outer *net.UnixConn) {
	defer b.tlsWG.Done()
	bp := pumpInBuffers.Get().(*[]byte)
	defer pumpInBuffers.Put(bp)
	buf := *bp
	for {
		n, err := tc.Read(buf)
		if n > 0 {
			if _, werr := outer.Write(buf[:n]); werr != nil {
				break // the broker closed the connection
			}
		}
		if err != nil {
			break
		}
	}
	_ = outer.CloseWrite()
}

// pumpOut copies what the broker writes to the client, encrypted, and the
// consumes the broker files with it (tlsout.go) at their places in that
// stream. Each write to the client must finish within StallTimeout, the
// time the broker gives a client that does not read. When the broker
// closes its end (or the client's socket fails) it closes the TLS
// connection, with close_notify, and the pair, which ends pumpIn too. It
// holds a buffer only while bytes wait: an idle connection costs none here.
func (b *Broker) pumpOut(tc *tls.Conn, bc *batchConn, outer *net.UnixConn, out *tlsOut) {
	defer func() { b.conns.Add(1 - TLSDescriptors); b.tlsWG.Done() }() // the TCP socket and outer, closed (OnClose releases the rest)
	defer outer.Close()
	defer tc.Close()
	defer out.close()
	rc, err := outer.SyscallConn()
	if err != nil {
		return
	}
	send := func(p []byte) error {
		_ = tc.SetWriteDeadline(time.Now().Add(b.cfg.StallTimeout))
		bc.begin()
		_, werr := tc.Write(p)
		if ferr := bc.flush(); werr == nil {
			werr = ferr
		}
		return werr
	}
	var read int64 // bytes of the pair sent
	for {
		if !b.sendDue(out, read, send) {
			return
		}
		bp, n, err := readPair(rc)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// A consume was filed (tlsOut.file): clear the deadline, then
			// look at the jobs again, so that a job filed after the look
			// sets it anew.
			_ = outer.SetReadDeadline(time.Time{})
			continue
		}
		if n <= 0 || err != nil {
			if bp != nil {
				pumpOutBuffers.Put(bp)
			}
			b.sendDue(out, read, send) // what the broker filed before it closed
			return
		}
		ok := b.sendRead(out, (*bp)[:n], &read, send)
		pumpOutBuffers.Put(bp)
		if !ok {
			return
		}
	}
}

// readPair reads what the broker wrote to its end of the pair, into a
// pooled buffer taken only once bytes are there (nil when none came).
func readPair(rc syscall.RawConn) (bp *[]byte, n int, err error) {
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		bp = pumpOutBuffers.Get().(*[]byte)
		n, rerr = unix.Read(int(fd), *bp)
		if rerr == unix.EAGAIN {
			pumpOutBuffers.Put(bp)
			bp = nil
			return false // wait for bytes without holding a buffer
		}
		return true
	})
	if err == nil {
		err = rerr
	}
	return bp, n, err
}

// sendRead sends seg, bytes read from the pair after *read others, with
// the consumes filed among them: the read may have taken bytes the
// broker wrote after filing a consume (filed while the pump waited), so
// each consume goes in its place within them; one filed after the read
// lies past them. It reports whether everything went.
func (b *Broker) sendRead(out *tlsOut, seg []byte, read *int64, send func([]byte) error) bool {
	for len(seg) > 0 {
		job, limit := out.next(*read)
		if job != nil {
			if b.sendJob(job, send) != nil {
				return false
			}
			out.done()
			continue
		}
		take := int64(len(seg))
		if limit >= 0 && limit < take {
			take = limit
		}
		if send(seg[:take]) != nil {
			return false
		}
		seg, *read = seg[take:], *read+take
	}
	return true
}

// sendDue sends the jobs due once read bytes of the pair have been sent,
// and reports whether they all went.
func (b *Broker) sendDue(out *tlsOut, read int64, send func([]byte) error) bool {
	for {
		job, _ := out.next(read)
		if job == nil {
			return true
		}
		if b.sendJob(job, send) != nil {
			return false
		}
		out.done()
	}
}
