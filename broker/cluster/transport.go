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
	"syscall"
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
// A Raft connection then speaks hashicorp/raft's own RPCs. A forward
// connection carries forwarded commands, one at a time and as many in
// sequence as come (forward.go): a request and its answer, each a uint32
// little-endian length (at most maxForward) and that many bytes: the
// Command as JSON, then the answer, code 0 and the log index (and what
// the apply answered) for success, or an error code byte and its text.
// The preamble, and its token, are checked once per connection; the
// leader closes one that sends no command for ForwardIdle, and a member
// keeps at most ForwardConns of them to the Raft leader.
const (
	preambleMagic = "HRQC"
	kindRaft      = 'R'
	kindForward   = 'F'
	maxToken      = 1024
	maxForward    = 1 << 20
	// preambleTimeout bounds how long an accepted connection may take
	// to finish its TLS handshake and send its preamble. A member sends
	// it at once: only a connection that is not a member's waits.
	preambleTimeout = 2 * time.Second
	// refusalLogEvery spaces the warnings of refused connections, of each
	// kind: a member with a certificate the others refuse dials again all
	// the time, and an attacker's connections are countless.
	refusalLogEvery = 10 * time.Second
	// MaxPending bounds the connections the cluster port holds before
	// their preamble (a goroutine and a descriptor each, for up to
	// preambleTimeout), and MaxPendingPerAddr those of one remote address:
	// a member's come and go within milliseconds, so these bound what
	// silent connections can take. Past either, a connection is closed at
	// once.
	MaxPending        = 32
	MaxPendingPerAddr = 8
	// MaxClusterConns bounds the cluster port's connections past their
	// preamble (Raft's pooled ones, three per member at most each way, and
	// the forward connections, ForwardConns per member at most). With
	// -auth-file only a member's token gets that far.
	MaxClusterConns = 128
	// Descriptors is what the cluster port and a member's own connections
	// to the others may hold: MaxPending and MaxClusterConns, and 32 more
	// for its dials (Raft keeps a few pooled per member). A server in a
	// cluster takes it off the descriptor limit before the defaults of
	// its other budgets are derived (-max-conns, -max-http-conns,
	// -max-open-files), so that all of them fit the limit together.
	Descriptors = MaxPending + MaxClusterConns + 32
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

	lastRefusal [refusalKinds]atomic.Int64 // unix ns of the last refusal of each kind logged as a warning
	refusals    atomic.Int64               // connections refused: over a bound, no preamble, a bad token, a failed handshake
	// starved is when (unix ns) a dial of this member last failed for
	// want of a descriptor here (EMFILE, ENFILE): the other member may
	// be well (controller.run).
	starved atomic.Int64

	mu      sync.Mutex
	pending map[string]int // remote address (host) -> connections before their preamble
	npend   int
	conns   int // connections past their preamble, not closed yet

	raftConns chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

var _ raft.StreamLayer = (*layer)(nil)

func newLayer(l net.Listener, advertise net.Addr, c *Config, forward func([]byte) []byte) *layer {
	ly := &layer{l: l, advertise: advertise, serverTLS: c.ServerTLS, clientTLS: c.ClientTLS, token: c.Token,
		authorize: c.Authorize, forward: forward, log: c.Logger,
		raftConns: make(chan net.Conn), done: make(chan struct{}), pending: map[string]int{}}
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
		host := remoteHost(c)
		if !ly.admit(host) {
			ly.refuse(refusedBound, c.RemoteAddr(), errors.New("too many connections before their preamble"),
				"cluster port: a connection refused: too many connections waiting for their preamble", "pending", MaxPending, "pending_per_address", MaxPendingPerAddr)
			c.Close()
			continue
		}
		ly.wg.Go(func() { ly.route(c, host) })
	}
}

// remoteHost is the host of c's remote address, the key of the bound per
// address.
func remoteHost(c net.Conn) string {
	a := c.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(a); err == nil {
		return h
	}
	return a
}

// admit counts a connection from host before its preamble, if the bounds
// allow it.
func (ly *layer) admit(host string) bool {
	ly.mu.Lock()
	defer ly.mu.Unlock()
	if ly.npend >= MaxPending || ly.pending[host] >= MaxPendingPerAddr {
		return false
	}
	ly.npend++
	ly.pending[host]++
	return true
}

// preambled moves a connection from host out of the count before the
// preamble, and, if ok (its preamble was accepted), into the count of
// connections past it, if MaxClusterConns allows it.
func (ly *layer) preambled(host string, ok bool) bool {
	ly.mu.Lock()
	defer ly.mu.Unlock()
	ly.npend--
	if ly.pending[host]--; ly.pending[host] <= 0 {
		delete(ly.pending, host)
	}
	if !ok || ly.conns >= MaxClusterConns {
		return false
	}
	ly.conns++
	return true
}

// closed is a connection past its preamble closing.
func (ly *layer) closed() {
	ly.mu.Lock()
	ly.conns--
	ly.mu.Unlock()
}

// countedConn is a connection past its preamble: its Close releases its
// place under MaxClusterConns, once.
type countedConn struct {
	net.Conn
	once sync.Once
	ly   *layer
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.ly.closed)
	return err
}

// route reads an accepted connection's preamble and hands it on.
func (ly *layer) route(raw net.Conn, host string) {
	c, kind, ok := ly.preamble(raw)
	if !ly.preambled(host, ok) {
		if ok {
			ly.refuse(refusedBound, c.RemoteAddr(), errors.New("too many connections"),
				"cluster port: a connection refused: the port holds its most connections", "max", MaxClusterConns)
		}
		c.Close()
		return
	}
	c = &countedConn{Conn: c, ly: ly}
	_ = c.SetDeadline(time.Time{})
	switch kind {
	case kindRaft:
		select {
		case ly.raftConns <- c:
		case <-ly.done:
			c.Close()
		}
	case kindForward:
		ly.serveForwards(c)
	default:
		c.Close()
	}
}

// preamble runs an accepted connection's TLS handshake (with TLS) and
// reads its preamble, within preambleTimeout, and checks its token. It
// returns the connection to go on with and its kind, ok false when it is
// refused (and logged so).
func (ly *layer) preamble(c net.Conn) (net.Conn, byte, bool) {
	_ = c.SetDeadline(time.Now().Add(preambleTimeout)) // the handshake's too
	if ly.serverTLS != nil {
		tc := tls.Server(c, ly.serverTLS)
		if err := tc.Handshake(); err != nil {
			ly.refuse(refusedTLS, c.RemoteAddr(), err,
				"cluster port: TLS handshake failed: is the other side a member with a certificate of the cluster's CA?")
			return c, 0, false
		}
		c = tc
	}
	kind, token, err := readPreamble(c)
	if err != nil {
		ly.refusals.Add(1)
		ly.log.Debug("cluster port: bad preamble", "remote", c.RemoteAddr().String(), "err", err)
		return c, 0, false
	}
	if ly.authorize != nil && !ly.authorize(token) {
		ly.refuse(refusedToken, c.RemoteAddr(), errors.New("no replication right"),
			"cluster port: a connection without the replication right refused")
		return c, 0, false
	}
	return c, kind, true
}

// The kinds of refusal, each logged as a warning at most once every
// refusalLogEvery.
const (
	refusedTLS = iota
	refusedToken
	refusedBound
	refusalKinds
)

// refuse counts a connection the cluster port refused and logs it: as a
// warning (msg, with args) at most once every refusalLogEvery for each
// kind of refusal, else at debug level.
func (ly *layer) refuse(kind int, remote net.Addr, err error, msg string, args ...any) {
	ly.refusals.Add(1)
	now := time.Now().UnixNano()
	last := &ly.lastRefusal[kind]
	if l := last.Load(); now-l >= int64(refusalLogEvery) && last.CompareAndSwap(l, now) {
		ly.log.Warn(msg, append([]any{"remote", remote.String(), "err", err, "refused_so_far", ly.refusals.Load()}, args...)...)
		return
	}
	ly.log.Debug(msg, "remote", remote.String(), "err", err)
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
		if outOfDescriptors(err) {
			ly.starved.Store(time.Now().UnixNano())
		}
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

// reach checks that a member's cluster port at addr takes this member's
// connections: a TLS handshake (with TLS) and the preamble of a
// forwarded command, which the member, finding no command, closes.
func (ly *layer) reach(addr string, timeout time.Duration) error {
	c, err := ly.dial(addr, kindForward, timeout)
	if err != nil {
		return err
	}
	return c.Close()
}

// outOfDescriptors reports whether err says this process or the system
// ran out of file descriptors.
func outOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// starvedWithin reports whether a dial failed for want of a descriptor
// here within d before now.
func (ly *layer) starvedWithin(d time.Duration, now time.Time) bool {
	t := ly.starved.Load()
	return t != 0 && now.Sub(time.Unix(0, t)) < d
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
