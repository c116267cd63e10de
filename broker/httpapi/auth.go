package httpapi

import (
	"errors"
	"net/http"
	"strings"

	"github.com/haraqa/haraqa/broker/auth"
)

// This file: the HTTP port's side of authorization (Config.Auth). The
// rules and the rights check live in package auth; here a request's
// bearer token is checked and each route mapped to the right it needs.

// Authorization errors, answered 401, 403 and 429.
var (
	// ErrUnauthorized: no bearer token, or one the rules do not hold.
	ErrUnauthorized = errors.New("httpapi: a valid token is needed: send Authorization: Bearer TOKEN")
	// ErrForbidden: the token does not allow the request.
	ErrForbidden = errors.New("httpapi: forbidden: the token does not allow this request")
	// ErrAuthLimited: the client's address failed to authenticate too often.
	ErrAuthLimited = errors.New("httpapi: too many failed authentications from this address: wait and retry")
)

// bearer returns the token of an "Authorization: Bearer TOKEN" header.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// authenticate returns the grant of r's token, or answers 401 (or 429)
// and returns false. Without Config.Auth it returns nil, true.
func (a *API) authenticate(w http.ResponseWriter, r *http.Request) (*auth.Grant, bool) {
	if a.cfg.Auth == nil {
		return nil, true
	}
	tok := bearer(r)
	g, err := a.cfg.Auth.Authenticate(r.RemoteAddr, tok)
	switch {
	case err == nil:
		return g, true
	case errors.Is(err, auth.ErrTooManyFailures):
		w.Header().Set("Retry-After", "1")
		a.fail(w, ErrAuthLimited)
	default:
		if tok == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="haraqa"`)
		} else {
			w.Header().Set("WWW-Authenticate", `Bearer realm="haraqa", error="invalid_token"`)
		}
		a.fail(w, ErrUnauthorized)
	}
	return nil, false
}

// authorize reports whether r may act with right on topic, answering 401,
// 403 or 429 when not.
func (a *API) authorize(w http.ResponseWriter, r *http.Request, right auth.Right, topic string) bool {
	g, ok := a.authenticate(w, r)
	if !ok {
		return false
	}
	if a.cfg.Auth != nil && !g.Allow(right, topic) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="haraqa", error="insufficient_scope"`)
		a.fail(w, ErrForbidden)
		return false
	}
	return true
}

// adminOnly wraps h, which then needs a token with the admin right on
// some topics (for /metrics and /docs with Config.AuthMetrics, and pprof).
func (a *API) adminOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g, ok := a.authenticate(w, r)
		if !ok {
			return
		}
		if a.cfg.Auth != nil && !g.Has(auth.Admin) {
			a.fail(w, ErrForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}
