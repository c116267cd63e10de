package cluster

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// The cluster port carries two kinds of connection, told apart by a
// preamble the dialer sends first (after the TLS handshake with TLS):
//
//	offset size field
//	0      4    "HRQC"
//	4      1    kind: 'R' a Raft transport connection, 'F' a forwarded command
//	5      2    uint16 little-endian: token length n, 0-1024
//	7      n    the token (with -auth-file it must hold the replication right)
//
// A Raft connection then speaks hashicorp/raft's own RPCs. A forwarded
// command is one request and one answer, each a uint32 little-endian
// length (at most maxForward) and that many bytes: the Command as JSON,
// then the answer, empty for success or an error code byte and its text.
const (
	preambleMagic = "HRQC"
	kindRaft      = 'R'
	kindForward   = 'F'
	maxToken      = 1024
	maxForward    = 1 << 20
	// preambleTimeout bounds how long an accepted connection may take
	// to finish its TLS handshake and send its preamble.
	preambleTimeout = 5 * time.Second
	// refusalLogEvery spaces the warnings of failed TLS handshakes.
	refusalLogEvery = 10 * time.Second
)

// layer is the raft.StreamLayer on the cluster port: it accepts both
// kinds of connection, hands Raft's to the transport and serves the
// forwarded commands itself.
type layer struct {
	l         net.Listener
	advertise net.Addr
	serverTLS *tls.Config // nil: plaintext
	clientTLS *tls.Config
	token     string
	authorize func(token string) bool // nil: any
	forward   func(cmd []byte) []byte // serves a forwarded command
	log       *slog.Logger

	lastRefusal atomic.Int64 // unix ns of the last handshake failure logged as a warning

	raftConns chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

var _ raft.StreamLayer = (*layer)(nil)

func newLayer(l net.Listener, advertise net.Addr, c *Config, forward func([]byte) []byte) *layer {
	ly := &layer{l: l, advertise: advertise, serverTLS: c.ServerTLS, clientTLS: c.ClientTLS, token: c.Token,
		authorize: c.Authorize, forward: forward, log: c.Logger,
		raftConns: make(chan net.Conn), done: make(chan struct{})}
	ly.wg.Go(ly.acceptLoop)
	return ly
}

func (ly *layer) acceptLoop() {
	for {
		c, err := ly.l.Accept()
		if err != nil {
			select {
			case <-ly.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			ly.log.Warn("cluster port: accept failed", "err", err)
			time.Sleep(50 * time.Millisecond) // e.g. out of descriptors: do not spin
			continue
		}
		ly.wg.Go(func() { ly.route(c) })
	}
}

// route reads an accepted connection's preamble and hands it on.
func (ly *layer) route(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(preambleTimeout)) // the handshake's too
	if ly.serverTLS != nil {
		tc := tls.Server(c, ly.serverTLS)
		if err := tc.Handshake(); err != nil {
			ly.refused(c.RemoteAddr(), err)
			c.Close()
			return
		}
		c = tc
	}
	kind, token, err := readPreamble(c)
	if err != nil {
		ly.log.Debug("cluster port: bad preamble", "remote", c.RemoteAddr().String(), "err", err)
		c.Close()
		return
	}
	if ly.authorize != nil && !ly.authorize(token) {
		ly.log.Warn("cluster port: a connection without the replication right refused", "remote", c.RemoteAddr().String())
		c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	switch kind {
	case kindRaft:
		select {
		case ly.raftConns <- c:
		case <-ly.done:
			c.Close()
		}
	case kindForward:
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(forwardTimeout))
		req, err := readMsg(c)
		if err != nil {
			return
		}
		_ = writeMsg(c, ly.forward(req))
	default:
		c.Close()
	}
}

// refused logs a TLS handshake the cluster port failed: as a warning at
// most once every refusalLogEvery (a member with a certificate the others
// refuse dials again all the time), else at debug level.
func (ly *layer) refused(remote net.Addr, err error) {
	now := time.Now().UnixNano()
	if last := ly.lastRefusal.Load(); now-last >= int64(refusalLogEvery) && ly.lastRefusal.CompareAndSwap(last, now) {
		ly.log.Warn("cluster port: TLS handshake failed: is the other side a member with a certificate of the cluster's CA?",
			"remote", remote.String(), "err", err)
		return
	}
	ly.log.Debug("cluster port: TLS handshake failed", "remote", remote.String(), "err", err)
}

func readPreamble(r io.Reader) (kind byte, token string, err error) {
	var h [7]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, "", err
	}
	if string(h[:4]) != preambleMagic {
		return 0, "", errors.New("not a cluster connection")
	}
	n := int(binary.LittleEndian.Uint16(h[5:]))
	if n > maxToken {
		return 0, "", fmt.Errorf("a token of %d bytes, at most %d", n, maxToken)
	}
	tok := make([]byte, n)
	if _, err := io.ReadFull(r, tok); err != nil {
		return 0, "", err
	}
	return h[4], string(tok), nil
}

func appendPreamble(dst []byte, kind byte, token string) []byte {
	dst = append(dst, preambleMagic...)
	dst = append(dst, kind)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(token)))
	return append(dst, token...)
}

func readMsg(r io.Reader) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(h[:])
	if n > maxForward {
		return nil, fmt.Errorf("a message of %d bytes, at most %d", n, maxForward)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}

func writeMsg(w io.Writer, b []byte) error {
	out := binary.LittleEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	_, err := w.Write(append(out, b...))
	return err
}

// dial opens a connection of kind to a member's cluster port. With TLS
// it verifies the member's certificate for the host of addr (unless
// ClientTLS names a server), and the preamble goes inside TLS; timeout
// bounds the handshake and the preamble too.
func (ly *layer) dial(addr string, kind byte, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	if ly.clientTLS != nil {
		cfg := ly.clientTLS.Clone()
		if cfg.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			cfg.ServerName = host
		}
		tc := tls.Client(c, cfg)
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, fmt.Errorf("cluster: TLS handshake with %s: %w", addr, err)
		}
		c = tc
	}
	if _, err := c.Write(appendPreamble(nil, kind, ly.token)); err != nil {
		c.Close()
		return nil, fmt.Errorf("cluster: sending the preamble to %s: %w", addr, err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// Dial implements raft.StreamLayer.
func (ly *layer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return ly.dial(string(address), kindRaft, timeout)
}

// Accept implements net.Listener for the Raft transport: Raft's
// connections only.
func (ly *layer) Accept() (net.Conn, error) {
	select {
	case c := <-ly.raftConns:
		return c, nil
	case <-ly.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (ly *layer) Close() error {
	ly.closeOnce.Do(func() {
		close(ly.done)
		ly.l.Close()
	})
	return nil
}

// wait returns once every accepted connection's router has returned.
func (ly *layer) wait() { ly.wg.Wait() }

// Addr implements net.Listener: the advertised address.
func (ly *layer) Addr() net.Addr { return ly.advertise }
