package broker

import (
	"fmt"
	"sync"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
)

// This file: the hello, which authenticates a connection. The rights and
// their check live in the service (service.Allow); a connection keeps the
// Caller of its last successful hello. With tokens, what a connection may
// cost before its hello is bounded: its frames by MaxPreHelloFrame, its
// life by HelloTimeout (swept as the idle connections are, idle.go: no
// timer per connection).

// Defaults of Config.MaxPreHelloFrame and Config.HelloTimeout.
const (
	DefaultMaxPreHelloFrame = 64 << 10
	DefaultHelloTimeout     = 10 * time.Second
)

// minPreHelloFrame is the least Config.MaxPreHelloFrame: a hello with the
// longest name and token (protocol.MaxClientNameLen, MaxTokenLen) fits.
const minPreHelloFrame = 4 << 10

// helloState holds the connections that have not yet said hello, for the
// sweep of Config.HelloTimeout.
type helloState struct {
	mu      sync.Mutex
	waiting map[gnet.Conn]*conn
	next    time.Time // of the sweep; tick goroutine only
	log     rateLog   // of the connections closed
	failLog rateLog   // of the failed hellos
}

// needsHello reports whether a request of op must be refused as
// unauthenticated: the service checks tokens, the connection has not
// presented a valid one, and op is neither ping nor hello.
func (cs *conn) needsHello(op protocol.Op) bool {
	b := cs.b
	return op != protocol.OpPing && op != protocol.OpHello && !b.svc.Authenticated(cs.caller)
}

// frameBeforeHello returns the error that refuses a frame of size bytes
// that c may not send yet: with tokens, until a hello succeeded, a frame
// over MaxPreHelloFrame; nil otherwise. It is checked from the frame's
// length alone, before anything of it is buffered. Runs on the loop.
func (cs *conn) frameBeforeHello(size int) error {
	b := cs.b
	if size <= b.cfg.MaxPreHelloFrame || b.svc.Authenticated(cs.caller) {
		return nil
	}
	return fmt.Errorf("%w: a frame of %d bytes before a hello: until a hello with a valid token succeeds, frames are at most %d bytes (-max-prehello-frame); send the hello first",
		protocol.ErrFrameTooLarge, size, b.cfg.MaxPreHelloFrame)
}

// awaitHello starts c's hello deadline when the service checks tokens.
// Runs on the loop.
func (cs *conn) awaitHello() {
	b, c := cs.b, cs.c
	if !b.svc.ChecksTokens() || b.cfg.HelloTimeout <= 0 {
		return
	}
	cs.opened, cs.helloDue = time.Now(), true
	h := &b.hellos
	h.mu.Lock()
	if h.waiting == nil {
		h.waiting = make(map[gnet.Conn]*conn)
	}
	h.waiting[c] = cs
	h.mu.Unlock()
}

// helloDone ends c's hello deadline: its hello succeeded, or it closed.
// Runs on the loop.
func (cs *conn) helloDone() {
	if !cs.helloDue {
		return
	}
	cs.helloDue = false
	h := &cs.b.hellos
	h.mu.Lock()
	delete(h.waiting, cs.c)
	h.mu.Unlock()
}

// sweepHellos wakes the connections whose hello is overdue, at most every
// HelloTimeout/4. Runs on the tick goroutine.
func (b *Broker) sweepHellos(now time.Time) {
	h := &b.hellos
	if b.cfg.HelloTimeout <= 0 || now.Before(h.next) {
		return
	}
	h.next = now.Add(b.cfg.HelloTimeout / 4)
	cutoff := now.Add(-b.cfg.HelloTimeout)
	var due []gnet.Conn
	h.mu.Lock()
	for c, cs := range h.waiting {
		if !cs.opened.After(cutoff) {
			due = append(due, c)
		}
	}
	h.mu.Unlock()
	for _, c := range due {
		_ = c.Wake(nil)
	}
}

// helloLate reports whether c has not said hello within HelloTimeout.
// Runs on the loop.
func (cs *conn) helloLate() bool {
	return cs.helloDue && time.Since(cs.opened) >= cs.b.cfg.HelloTimeout
}

// closeHelloLate sends c one CodeUnauthenticated frame (op 0, correlation
// id 0) and closes it. Runs on the loop.
func (cs *conn) closeHelloLate() gnet.Action {
	b, c := cs.b, cs.c
	b.stats.helloTimeouts.Add(1)
	if n, ok := b.hellos.log.due(); ok {
		b.cfg.Logger.Warn("closing connections that sent no hello in time", "hello_timeout", b.cfg.HelloTimeout, "remote", remoteAddr(c), "closed", n)
	}
	msg := fmt.Sprintf("no hello: this server needs a token, and the connection presented none within %s (-hello-timeout) of opening; it is closed", b.cfg.HelloTimeout)
	_, _ = c.Write(protocol.AppendErrorResponse(nil, 0, 0, protocol.CodeUnauthenticated, msg))
	return gnet.Close
}

// hello answers a hello request: without tokens always OK (a cluster's
// secret, presented as the token, makes the caller a member); with them
// the token decides the connection's Caller (a failed hello drops it).
func (cs *conn) hello(h protocol.RequestHeader, payload []byte) {
	b, c := cs.b, cs.c
	req, err := protocol.ParseHelloRequest(payload)
	if err != nil {
		cs.respondError(h.Op, h.CorrID, err)
		return
	}
	resp := protocol.HelloResponse{Version: protocol.Version}
	if b.svc.ChecksTokens() {
		cs.caller = service.Caller{}.WithConn(cs.tenant)
		remote := ""
		if a := remoteAddr(c); a != nil {
			remote = a.String()
		}
		caller, err := b.svc.Authenticate(remote, string(req.Token))
		if err != nil {
			b.stats.authFailures.Add(1)
			if service.Code(err) == protocol.CodeUnauthenticated {
				// Never the token: the address and the name the client gave.
				// At most a line per acceptLogEvery: a missing token is no
				// failure the limiter counts, so hellos without one could
				// otherwise fill the log.
				if n, ok := b.hellos.failLog.due(); ok {
					b.cfg.Logger.Warn("authentication failed", "remote", remote, "client", string(req.Name), "token_given", len(req.Token) > 0, "failures", n)
				}
			}
			cs.respondError(h.Op, h.CorrID, err)
			return
		}
		cs.caller, resp.Auth = caller.WithConn(cs.tenant), true
		cs.helloDone()
		cs.exemptMember()
	} else if len(req.Token) > 0 {
		// No tokens to check, but a cluster member presents the
		// members' secret, which the server-to-server ops need.
		caller, _ := b.svc.Authenticate("", string(req.Token))
		cs.caller = caller.WithConn(cs.tenant)
		cs.exemptMember()
	}
	cs.end(protocol.AppendHelloResponse(cs.begin(), h.CorrID, resp))
}
