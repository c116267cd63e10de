package broker

import (
	"errors"
	"fmt"

	"github.com/panjf2000/gnet/v2"

	"github.com/haraqa/haraqa/broker/auth"
	"github.com/haraqa/haraqa/protocol"
)

// This file: the binary port's side of authorization. The rules and the
// rights check live in package auth; here each op is mapped to the right
// it needs, and a connection keeps the grant of its last successful hello.

var (
	errUnauthenticated = &protocol.Error{Code: protocol.CodeUnauthenticated,
		Message: "this server needs a token: send a hello with one first"}
	errBadToken = &protocol.Error{Code: protocol.CodeUnauthenticated,
		Message: "the token is not valid on this server"}
	errAuthLimited = &protocol.Error{Code: protocol.CodeLimitReached,
		Message: "too many failed authentications from this address: wait and retry"}
)

// needsHello reports whether a request of op must be refused as
// unauthenticated: the broker checks tokens, the connection has not
// presented a valid one, and op is neither ping nor hello.
func (b *Broker) needsHello(cs *connState, op protocol.Op) bool {
	return b.cfg.Auth != nil && cs.grant == nil && op != protocol.OpPing && op != protocol.OpHello
}

// allow returns nil if the connection may do op on topic, else a forbidden
// error naming both (client input only). Without an auth file everything
// is allowed.
func (b *Broker) allow(cs *connState, op protocol.Op, topic string) error {
	if b.cfg.Auth == nil {
		return nil
	}
	right := rightOf(op)
	if cs.grant.Allow(right, topic) {
		return nil
	}
	return &protocol.Error{Code: protocol.CodeForbidden,
		Message: fmt.Sprintf("%s on topic %q needs %s, which the token does not hold", op, topic, rightName(right))}
}

// rightOf is the right op needs on its topic.
func rightOf(op protocol.Op) auth.Right {
	switch op {
	case protocol.OpProduce:
		return auth.Produce
	case protocol.OpConsume, protocol.OpOffsetAt, protocol.OpCommitOffset, protocol.OpFetchOffset, protocol.OpGroupLease,
		protocol.OpListGroups, protocol.OpDeleteGroup:
		return auth.Consume // a group is a consumer's position
	case protocol.OpCreateTopic, protocol.OpDeleteTopic, protocol.OpTruncate, protocol.OpImport:
		return auth.Admin // import: it writes at chosen offsets and times
	}
	return auth.Any // topic info; list topics filters by it
}

func rightName(r auth.Right) string {
	if r == auth.Any {
		return "some right"
	}
	return "the " + r.String() + " right"
}

// hello answers a hello request: without an auth file always OK; with one
// the token decides the connection's grant (a failed hello drops it).
func (b *Broker) hello(c gnet.Conn, cs *connState, h protocol.RequestHeader, payload []byte) {
	req, err := protocol.ParseHelloRequest(payload)
	if err != nil {
		b.respondError(cs, h.Op, h.CorrID, err)
		return
	}
	resp := protocol.HelloResponse{Version: protocol.Version}
	if a := b.cfg.Auth; a != nil {
		cs.grant = nil
		remote := ""
		if a := remoteAddr(c); a != nil {
			remote = a.String()
		}
		g, err := a.Authenticate(remote, string(req.Token))
		if err != nil {
			b.stats.authFailures.Add(1)
			if errors.Is(err, auth.ErrTooManyFailures) {
				b.respondError(cs, h.Op, h.CorrID, errAuthLimited)
				return
			}
			// Never the token: the address and the name the client gave.
			b.cfg.Logger.Warn("authentication failed", "remote", remote, "client", string(req.Name), "token_given", len(req.Token) > 0)
			b.respondError(cs, h.Op, h.CorrID, errBadToken)
			return
		}
		cs.grant, resp.Auth = g, true
	}
	cs.end(protocol.AppendHelloResponse(cs.begin(), h.CorrID, resp))
}
