package broker

import (
	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
)

// This file: the hello, which authenticates a connection. The rights and
// their check live in the service (service.Allow); a connection keeps the
// Caller of its last successful hello.

// needsHello reports whether a request of op must be refused as
// unauthenticated: the service checks tokens, the connection has not
// presented a valid one, and op is neither ping nor hello.
func (cs *conn) needsHello(op protocol.Op) bool {
	b := cs.b
	return op != protocol.OpPing && op != protocol.OpHello && !b.svc.Authenticated(cs.caller)
}

// hello answers a hello request: without tokens always OK; with them the
// token decides the connection's Caller (a failed hello drops it).
func (cs *conn) hello(h protocol.RequestHeader, payload []byte) {
	b, c := cs.b, cs.c
	req, err := protocol.ParseHelloRequest(payload)
	if err != nil {
		cs.respondError(h.Op, h.CorrID, err)
		return
	}
	resp := protocol.HelloResponse{Version: protocol.Version}
	if b.svc.ChecksTokens() {
		cs.caller = service.Caller{}
		remote := ""
		if a := remoteAddr(c); a != nil {
			remote = a.String()
		}
		caller, err := b.svc.Authenticate(remote, string(req.Token))
		if err != nil {
			b.stats.authFailures.Add(1)
			if service.Code(err) == protocol.CodeUnauthenticated {
				// Never the token: the address and the name the client gave.
				b.cfg.Logger.Warn("authentication failed", "remote", remote, "client", string(req.Name), "token_given", len(req.Token) > 0)
			}
			cs.respondError(h.Op, h.CorrID, err)
			return
		}
		cs.caller, resp.Auth = caller, true
	}
	cs.end(protocol.AppendHelloResponse(cs.begin(), h.CorrID, resp))
}
