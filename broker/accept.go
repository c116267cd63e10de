package broker

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

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

// DefaultMaxConns derives the default connection limit from the process's
// descriptor limit: half of it, less headroom for volumes, segment files
// and the HTTP port, and at most 65536.
func DefaultMaxConns() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 65536
	}
	n := (int(rl.Cur) - 64) / 2
	return max(1, min(n, 65536))
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
			if int(b.conns.Add(1)) > b.cfg.MaxConns {
				b.conns.Add(-1)
				b.stats.refusedConns.Add(1)
				if n, ok := refusals.due(); ok {
					b.cfg.Logger.Warn("connection refused: the connection limit is reached", "max_conns", b.cfg.MaxConns, "refused", n)
				}
				go b.refuse(nc)
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
		b.conns.Add(-1)
		nc.Close()
		return fmt.Errorf("register with an event loop: %w", err)
	}
	return nil
}

// refuse answers a connection over the limit with one error frame (op 0,
// correlation id 0, CodeLimitReached naming the limit) and closes it.
func (b *Broker) refuse(nc net.Conn) {
	defer nc.Close()
	msg := fmt.Sprintf("too many connections: the server's connection limit (-max-conns) of %d is reached", b.cfg.MaxConns)
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
