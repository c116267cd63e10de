package broker

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
)

// This file: the binary port's acceptor. The broker accepts connections
// itself, on a goroutine with a plain net.Listener, and hands each to gnet
// (Engine.Register), instead of letting gnet accept: gnet v2.9.7 treats any
// accept error but EAGAIN, EINTR and ECONNABORTED as fatal and stops its
// engine, so one burst of EMFILE (the descriptor limit reached) would end
// the binary port for good while the process lived on. Here an accept
// error backs off and retries, as net/http does, and the connection limit
// is enforced before a connection reaches an event loop.
//
// Connection limits: MaxConns counts the descriptors the connections hold
// (one for a TCP connection, TLSDescriptors for a TLS one), so that the
// limit is reached, and told to the client, before accept or a socket
// pair fails for want of descriptors; MaxConnsPerAddr bounds one client
// address's connections (and never more than half of MaxConns), so that
// one host cannot take every slot.

// Accept back-off bounds, as net/http's Server.Serve uses.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// acceptLogEvery rate-limits the log lines of failed accepts and refused
// connections: one line per kind at most this often, with the count since.
const acceptLogEvery = 10 * time.Second

// limitWriteTimeout bounds writing the refusal to a connection over the
// limit: a client that does not read it is closed anyway.
const limitWriteTimeout = 100 * time.Millisecond

// DescriptorReserve is the part of the descriptor limit no default budget
// takes: listeners, event loops, volume directories, logs.
const DescriptorReserve = 64

// DefaultMaxConns derives the default connection limit from the process's
// descriptor limit: three eighths of what DescriptorReserve leaves, at
// most 65536. The rest is shared by the segment files (half: storage's
// DefaultMaxOpenFiles) and the HTTP port (an eighth: the server's
// DefaultMaxHTTPConns), so that together with the reserve they fit the
// limit. The limit counts descriptors: a TLS connection takes
// TLSDescriptors of it.
func DefaultMaxConns() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 65536
	}
	return DefaultMaxConnsFor(int(rl.Cur))
}

// DefaultMaxConnsFor is DefaultMaxConns for a descriptor limit of nofile
// (a server in a cluster passes what its cluster port leaves).
func DefaultMaxConnsFor(nofile int) int {
	return max(1, min((nofile-DescriptorReserve)*3/8, 65536))
}

// DefaultMaxConnsPerAddr is Config.MaxConnsPerAddr's default: more than a
// benchmark or a cluster's clients open from one host, a fraction of what
// one address needs to take every slot.
const DefaultMaxConnsPerAddr = 128

// TLSDescriptors is what a TLS connection holds, and takes of MaxConns:
// its TCP socket and both ends of its socket pair (tls.go). A plaintext
// connection holds one.
const TLSDescriptors = 3

// slots counts what the binary port's connections hold: descriptors in
// Broker.conns, connections per client address here.
type slots struct {
	mu     sync.Mutex
	byAddr map[netip.Addr]int
}

// addrKey is the address a connection is counted under: the client's IP.
func addrKey(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{} // not TCP: counted together
}

// admit counts a new connection from addr, of cost descriptors, against
// MaxConns and MaxConnsPerAddr. It returns the refusal to send when a
// limit is reached, "" when the connection is admitted.
func (b *Broker) admit(addr net.Addr, cost int) string {
	key := addrKey(addr)
	b.slots.mu.Lock()
	defer b.slots.mu.Unlock()
	if lim := b.perAddrLimit(cost); lim > 0 && b.slots.byAddr[key] >= lim {
		return fmt.Sprintf("too many connections from %s: the server's per-address connection limit (-max-conns-per-addr, at most half of -max-conns) of %d is reached", key, lim)
	}
	if int(b.conns.Add(int64(cost))) > b.cfg.MaxConns {
		b.conns.Add(-int64(cost))
		msg := fmt.Sprintf("too many connections: the server's connection limit (-max-conns) of %d descriptors is reached", b.cfg.MaxConns)
		if cost > 1 {
			msg += fmt.Sprintf(" (a TLS connection holds %d)", cost)
		}
		return msg
	}
	if b.slots.byAddr == nil {
		b.slots.byAddr = make(map[netip.Addr]int)
	}
	b.slots.byAddr[key]++
	return ""
}

// perAddrLimit is how many connections of cost descriptors one address may
// hold: MaxConnsPerAddr, but never more than half of MaxConns, so that
// under a small descriptor limit one host still cannot take every slot.
// 0: no bound.
func (b *Broker) perAddrLimit(cost int) int {
	lim := b.cfg.MaxConnsPerAddr
	if lim <= 0 {
		return 0
	}
	return max(1, min(lim, b.cfg.MaxConns/(2*cost)))
}

// releaseConn gives back a connection's count under addr and n of its
// descriptors (admit counted them).
func (b *Broker) releaseConn(addr net.Addr, n int) {
	b.conns.Add(-int64(n))
	key := addrKey(addr)
	b.slots.mu.Lock()
	if b.slots.byAddr[key]--; b.slots.byAddr[key] <= 0 {
		delete(b.slots.byAddr, key)
	}
	b.slots.mu.Unlock()
}

// isMember reports whether c, a connection's caller after its hello, is
// another member of the cluster (service.IsMember: the replication right
// on every topic, or without tokens the members' secret). A member's
// connections do not count against MaxConns and MaxConnsPerAddr
// (exemptMember). This is the one place the rule lives.
func (b *Broker) isMember(c service.Caller) bool { return b.svc.IsMember(c) }

// exemptMember takes a connection whose hello made it a member's
// (isMember) out of the connection counts: the members' connections
// (a follower's one per leader, the controller's questions) are few and
// fixed by the cluster's size, and no client's connections may crowd
// them out, nor they a client's. It stays out until it closes, whatever
// hello follows. Runs on the loop.
func (cs *conn) exemptMember() {
	b := cs.b
	if cs.exempt || !b.isMember(cs.caller) {
		return
	}
	cs.exempt = true
	b.releaseConn(remoteAddr(cs.c), cs.descriptors())
	b.stats.memberConns.Add(1)
}

// descriptors is what the connection holds of MaxConns: TLSDescriptors
// for a TLS connection, else one.
func (cs *conn) descriptors() int {
	if cs.tls != nil {
		return TLSDescriptors
	}
	return 1
}

// releaseClosed gives back what a closing connection holds of the
// counts: its address and one descriptor (a TLS connection's pump gives
// back the others); for a member's, which gave them all back already
// (exemptMember), only what the pump will take again. Runs on the loop.
func (b *Broker) releaseClosed(c gnet.Conn, cs *conn) {
	if cs != nil && cs.exempt {
		b.conns.Add(int64(cs.descriptors() - 1))
		b.stats.memberConns.Add(-1)
		return
	}
	b.releaseConn(remoteAddr(c), 1)
}

// accept accepts connections on ln until it is closed, handing each to the
// engine. Runs on its own goroutine.
func (b *Broker) accept(ln net.Listener) {
	defer close(b.acceptDone)
	var backoff time.Duration
	failures := &rateLog{}
	refusals := &rateLog{}
	for {
		nc, err := ln.Accept()
		if err == nil {
			cost := 1
			if b.cfg.TLS != nil {
				cost = TLSDescriptors
			}
			if msg := b.admit(nc.RemoteAddr(), cost); msg != "" {
				b.stats.refusedConns.Add(1)
				if n, ok := refusals.due(); ok {
					b.cfg.Logger.Warn("connection refused: a connection limit is reached", "reason", msg, "refused", n)
				}
				go b.refuse(nc, msg)
				continue
			}
			if b.cfg.TLS != nil {
				b.tlsWG.Add(1)
				go b.serveTLS(nc) // handshakes off the accept goroutine (tls.go)
				backoff = 0
				continue
			}
			if err = b.enroll(nc, nil); err == nil {
				backoff = 0
				continue
			}
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
		b.stats.acceptErrors.Add(1)
		backoff = min(max(2*backoff, acceptBackoffMin), acceptBackoffMax)
		if n, ok := failures.due(); ok {
			msg := "accept failed; retrying"
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				msg = "accept failed: out of file descriptors (raise the descriptor limit, or lower -max-conns); retrying"
			}
			b.cfg.Logger.Error(msg, "err", err, "failures", n, "backoff", backoff)
		}
		time.Sleep(backoff)
	}
}

// enroll hands nc to an event loop. gnet duplicates its descriptor and
// closes nc; the duplicate may fail as accept does (EMFILE). p is the
// client behind a TLS connection's socket pair, nil for a TCP connection.
// On failure it releases the connection's address and one descriptor; a
// TLS connection's other two are its caller's.
// Calls are serialized: gnet's Register picks the loop with a round-robin
// counter it does not guard, and TLS connections enroll from their own
// goroutines.
func (b *Broker) enroll(nc net.Conn, p *peer) error {
	ctx := gnet.NewNetConnContext(b.ctx, nc)
	if p != nil {
		ctx = gnet.NewContext(ctx, p) // the conn's context until OnOpen
	}
	b.enrollMu.Lock()
	res, err := b.eng.Register(ctx)
	b.enrollMu.Unlock()
	if err == nil {
		// gnet answers once an event loop has taken the connection; a
		// loop that is stopping (a TLS handshake finishing during
		// Shutdown, which waits for this goroutine) or has exited never
		// answers.
		var stopped error
		select {
		case r := <-res:
			err = r.Err
		case <-b.ctx.Done():
			stopped = errShuttingDown
		case <-b.loopsDone:
			stopped = ErrEngineStopped
		}
		if stopped != nil {
			select {
			case r := <-res: // taken after all: OnClose counts it out
				err = r.Err
			default:
				err = stopped
			}
		}
	}
	if err != nil {
		addr := nc.RemoteAddr()
		if p != nil {
			addr = p.remote
		}
		b.releaseConn(addr, 1)
		nc.Close()
		return fmt.Errorf("register with an event loop: %w", err)
	}
	return nil
}

// refuse answers a connection over a limit with one error frame (op 0,
// correlation id 0, CodeLimitReached with msg, which names the limit) and
// closes it.
func (b *Broker) refuse(nc net.Conn, msg string) {
	defer nc.Close()
	_ = nc.SetWriteDeadline(time.Now().Add(limitWriteTimeout))
	_, _ = nc.Write(protocol.AppendErrorResponse(nil, 0, 0, protocol.CodeLimitReached, msg))
}

// rateLog lets a log line through at most once per acceptLogEvery and
// counts the events in between.
type rateLog struct {
	mu    sync.Mutex
	last  time.Time
	count int
}

// due counts an event and reports whether to log it now, with the events
// counted since the last line.
func (r *rateLog) due() (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count++
	if now := time.Now(); now.Sub(r.last) >= acceptLogEvery {
		n := r.count
		r.last, r.count = now, 0
		return n, true
	}
	return 0, false
}
