package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// This file: the commands a member forwards to the Raft leader, over a
// few connections kept open (kind 'F' on the cluster port, transport.go).
// A connection carries one command at a time, request then answer, and
// as many one after another as come: a member no longer dials a
// connection per command, which left hundreds of sockets in TIME_WAIT
// under a stream of group commits and paid a TLS handshake for each.

const (
	// ForwardConns bounds the connections a member holds to the Raft
	// leader for forwarded commands. Each carries one command at a time,
	// so at most this many of the member's commands are in flight; the
	// others wait for one (within their deadline), and the leader puts
	// the group commands that arrive together into one Raft entry
	// (batch.go).
	ForwardConns = 4
	// ForwardIdle closes a forward connection on the leader's side when
	// no command came on it this long; the forwarding member drops one
	// idle half as long, so that it does not send on one being closed.
	ForwardIdle = 60 * time.Second
)

// serveForwards serves the commands forwarded on c, an accepted kind 'F'
// connection past its preamble, one after another: it reads a command
// (waiting at most ForwardIdle for it), answers it (within
// forwardTimeout) and reads the next, until c fails or closes, or the
// layer closes.
func (ly *layer) serveForwards(c net.Conn) {
	defer c.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-ly.done:
			c.Close() // unblocks the read
		case <-stop:
		}
	}()
	for {
		_ = c.SetReadDeadline(time.Now().Add(ForwardIdle))
		req, err := readMsg(c)
		if err != nil {
			return
		}
		ans := ly.forward(req)
		_ = c.SetWriteDeadline(time.Now().Add(forwardTimeout))
		if err := writeMsg(c, ans); err != nil {
			return
		}
	}
}

// forwarder holds a member's connections to the Raft leader for
// forwarded commands: at most ForwardConns, each in use by one command
// or idle, kept for the next. A connection that failed is closed; one to
// a member that no longer leads, or idle ForwardIdle/2, is closed when
// next looked at. Safe for concurrent use.
type forwarder struct {
	ly    *layer
	slots chan struct{} // a token per connection in use

	mu     sync.Mutex
	idle   []idleConn // mu must be held
	closed bool       // mu must be held
	dials  int        // connections dialed (or tried); mu must be held

	// lose, in tests, is how many answers still to lose: the command is
	// sent and answered, and the connection fails before the answer is
	// read, as when the leader's answer is cut off or comes too late.
	lose atomic.Int32
}

// idleConn is a forward connection waiting for its next command.
type idleConn struct {
	c     net.Conn
	addr  string
	since time.Time
}

func newForwarder(ly *layer) *forwarder {
	return &forwarder{ly: ly, slots: make(chan struct{}, ForwardConns)}
}

// do sends cmd to the cluster port at addr and returns its answer,
// within timeout, waiting first for a connection while ForwardConns are
// in use (until ctx ends or timeout passes).
func (f *forwarder) do(ctx context.Context, addr string, timeout time.Duration, cmd []byte) ([]byte, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case f.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, fmt.Errorf("no forward connection free within %s (%d in use)", timeout, ForwardConns)
	}
	defer func() { <-f.slots }()
	c, err := f.get(addr, timeout)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	if err := writeMsg(c, cmd); err != nil {
		c.Close()
		return nil, err
	}
	ans, err := readMsg(c)
	if err == nil && f.lose.Load() > 0 && f.lose.Add(-1) >= 0 {
		err = errors.New("the answer was lost (a test)")
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	f.put(addr, c)
	return ans, nil
}

// get returns an idle connection to addr, or dials one. The connections
// idle to another address (a former leader) or for too long are closed.
func (f *forwarder) get(addr string, timeout time.Duration) (net.Conn, error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, ErrClosed
	}
	var c net.Conn
	var stale []net.Conn
	for len(f.idle) > 0 && c == nil {
		ic := f.idle[len(f.idle)-1]
		f.idle = f.idle[:len(f.idle)-1]
		if ic.addr == addr && time.Since(ic.since) < ForwardIdle/2 {
			c = ic.c
		} else {
			stale = append(stale, ic.c)
		}
	}
	if c == nil {
		f.dials++
	}
	f.mu.Unlock()
	for _, s := range stale {
		s.Close()
	}
	if c != nil {
		return c, nil
	}
	return f.ly.dial(addr, kindForward, timeout)
}

// put keeps c, whose command was answered, for the next one.
func (f *forwarder) put(addr string, c net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || len(f.idle) >= ForwardConns {
		c.Close()
		return
	}
	f.idle = append(f.idle, idleConn{c: c, addr: addr, since: time.Now()})
}

// dialed returns how many connections the forwarder dialed or tried to.
func (f *forwarder) dialed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dials
}

// close closes the idle connections; those in use close once answered.
func (f *forwarder) close() {
	f.mu.Lock()
	idle := f.idle
	f.idle, f.closed = nil, true
	f.mu.Unlock()
	for _, ic := range idle {
		ic.c.Close()
	}
}
