package httpapi

import (
	"errors"
	"net/http"
	"strings"

	"github.com/haraqa/haraqa/broker/auth"
	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
)

// This file: the HTTP port's side of authorization (Config.Auth). The
// rights and their check live in the service (service.Allow), as for the
// binary port; here a request's bearer token becomes the service's Caller,
// and each route names the op whose right it needs.

// bearer returns the token of an "Authorization: Bearer TOKEN" header.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// authenticate returns the Caller of r's token, or answers 401 (or 429)
// and returns false. Without tokens it returns the zero Caller, true.
func (a *API) authenticate(w http.ResponseWriter, r *http.Request, svc *service.Service) (service.Caller, bool) {
	tok := bearer(r)
	c, err := svc.Authenticate(r.RemoteAddr, tok)
	switch {
	case err == nil:
		return c.WithConn("http " + r.RemoteAddr), true
	case errors.Is(err, service.ErrAuthLimited):
		w.Header().Set("Retry-After", "1")
		a.fail(w, ErrAuthLimited)
	default:
		a.unauthorized(w, tok)
	}
	return service.Caller{}, false
}

// unauthorized answers 401 for the token tok (none, or one not valid).
func (a *API) unauthorized(w http.ResponseWriter, tok string) {
	if tok == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="haraqa"`)
	} else {
		w.Header().Set("WWW-Authenticate", `Bearer realm="haraqa", error="invalid_token"`)
	}
	a.fail(w, ErrUnauthorized)
}

// authorize returns r's Caller if it may do op on topic, answering 401,
// 403 or 429 and returning false when not.
func (a *API) authorize(w http.ResponseWriter, r *http.Request, svc *service.Service, op protocol.Op, topic string) (service.Caller, bool) {
	c, ok := a.authenticate(w, r, svc)
	if !ok {
		return c, false
	}
	if err := svc.Allow(c, op, topic); err != nil {
		a.forbid(w, err)
		return c, false
	}
	return c, true
}

// forbid answers err, a refusal of the service's Allow.
func (a *API) forbid(w http.ResponseWriter, err error) {
	if service.Code(err) == protocol.CodeForbidden {
		w.Header().Set("WWW-Authenticate", `Bearer realm="haraqa", error="insufficient_scope"`)
	}
	a.fail(w, err)
}

// granted serves r with h if its token's grant g passes need, answering
// 401, 403 or 429 when not: for /metrics and /docs with
// Config.AuthMetrics, and pprof. These pages are served while the volumes
// are recovered, before the service exists, so it asks Config.Auth itself.
// Without Config.Auth it serves every request, with a nil grant.
func (a *API) granted(need func(*auth.Grant) bool, h func(http.ResponseWriter, *http.Request, *auth.Grant)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a.cfg.Auth == nil {
			h(w, r, nil)
			return
		}
		tok := bearer(r)
		g, err := a.cfg.Auth.Authenticate(r.RemoteAddr, tok)
		switch {
		case errors.Is(err, auth.ErrTooManyFailures):
			w.Header().Set("Retry-After", "1")
			a.fail(w, ErrAuthLimited)
		case err != nil:
			a.unauthorized(w, tok)
		case !need(g):
			w.Header().Set("WWW-Authenticate", `Bearer realm="haraqa", error="insufficient_scope"`)
			a.fail(w, ErrForbidden)
		default:
			h(w, r, g)
		}
	}
}

// Needs of granted.
var (
	// anyToken: a valid token, whatever it holds (/docs).
	anyToken = func(*auth.Grant) bool { return true }
	// metricsToken: the metrics right on some topics (/metrics, which
	// then shows those topics alone).
	metricsToken = func(g *auth.Grant) bool { return g.Has(auth.Metrics) }
	// adminOnAll: admin on every topic (pprof: profiles show the command
	// line, memory and every tenant's work).
	adminOnAll = func(g *auth.Grant) bool { return g.AllowAll(auth.Admin) }
)
