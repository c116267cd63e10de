package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
)

// This file: the HTTP port's errors. Every error maps to one wire code
// (service.Code, the table both ports share); the status is derived from
// the code (statusOf). The port's own refusals carry their code.

// apiError is a refusal of the HTTP port itself, with its wire code.
type apiError struct {
	code protocol.Code
	msg  string
}

func (e *apiError) Error() string           { return e.msg }
func (e *apiError) WireCode() protocol.Code { return e.code }

var _ service.Coded = (*apiError)(nil)

// Errors the REST API answers with, besides the service's.
var (
	// ErrBadRequest: a parameter or header is missing or malformed (400).
	ErrBadRequest error = &apiError{protocol.CodeInvalidArgument, "httpapi: bad request"}
	// ErrNotReady: the volumes are still being recovered (503).
	ErrNotReady error = &apiError{protocol.CodeShuttingDown, "httpapi: server is starting: volumes are being recovered"}
	// ErrTooLarge: a request body is over Config.MaxBodyBytes (413).
	ErrTooLarge error = &apiError{protocol.CodeFrameTooLarge, "httpapi: request body too large"}
	// ErrDecode: a stored batch cannot be decoded for an HTTP consumer (500).
	ErrDecode error = &apiError{protocol.CodeUnreadableRange, "httpapi: stored batch cannot be decoded"}
	// ErrPeerUnavailable: this server does not have the topic and cannot
	// tell which of its peers does (503).
	ErrPeerUnavailable error = &apiError{protocol.CodeShuttingDown, "httpapi: peer unavailable"}
	// ErrUnauthorized: no bearer token, or one the rules do not hold (401).
	ErrUnauthorized error = &apiError{protocol.CodeUnauthenticated, "httpapi: a valid token is needed: send Authorization: Bearer TOKEN"}
	// ErrForbidden: the token does not allow the request (403).
	ErrForbidden error = &apiError{protocol.CodeForbidden, "httpapi: forbidden: the token does not allow this request"}
	// ErrAuthLimited: the client's address failed to authenticate too
	// often (429).
	ErrAuthLimited error = &apiError{protocol.CodeLimitReached, "httpapi: too many failed authentications from this address: wait and retry"}

	// ErrMetricsRate: /metrics was asked for more often than
	// Config.MaxMetricsRate allows (429).
	ErrMetricsRate error = &apiError{protocol.CodeLimitReached, "httpapi: too many /metrics requests"}

	// errTooManyWatchers answers a watch over Config.MaxWatchers (429).
	errTooManyWatchers error = &apiError{protocol.CodeLimitReached, "httpapi: too many topic watches"}
)

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// statusOf is the HTTP status of an error of code.
func statusOf(code protocol.Code) int {
	switch code {
	case protocol.CodeOK:
		return http.StatusOK
	case protocol.CodeMalformedRequest, protocol.CodeInvalidTopic, protocol.CodeBadBatch, protocol.CodeInvalidArgument,
		protocol.CodeUnsupportedVersion, protocol.CodeUnknownOp:
		return http.StatusBadRequest
	case protocol.CodeFrameTooLarge:
		return http.StatusRequestEntityTooLarge
	case protocol.CodeTopicNotFound:
		return http.StatusNotFound
	case protocol.CodeTopicExists, protocol.CodeGroupBusy, protocol.CodeCommitConflict,
		protocol.CodeOutOfOrderSequence, protocol.CodeOffsetMismatch, protocol.CodeImportRefused,
		protocol.CodeProducerFenced, protocol.CodeUnknownProducer:
		return http.StatusConflict
	case protocol.CodeOffsetOutOfRange:
		return http.StatusRequestedRangeNotSatisfiable
	case protocol.CodeNoSpace:
		return http.StatusInsufficientStorage
	case protocol.CodeTopicReadOnly, protocol.CodeShuttingDown, protocol.CodeNotLeader, protocol.CodeNotEnoughReplicas:
		return http.StatusServiceUnavailable // not leader: no leader known yet
	case protocol.CodeOutcomeUnknown:
		// Not 503, which here means nothing was written, and never a
		// redirect, which curl -L and browsers would follow by sending
		// the body again: 504 is the status a proxy answers when the
		// server behind it took a request and its answer never came,
		// which operators read as "it may have been applied".
		return http.StatusGatewayTimeout
	case protocol.CodeUnauthenticated:
		return http.StatusUnauthorized
	case protocol.CodeForbidden:
		return http.StatusForbidden
	case protocol.CodeLimitReached:
		return http.StatusTooManyRequests
	case protocol.CodeIdleTimeout:
		return http.StatusRequestTimeout
	}
	return http.StatusInternalServerError // CodeUnknown, CodeUnreadableRange
}

// failOn answers err for request r: as fail does, except that a request
// for a replicated topic that another server serves (its leader, for a
// write) is answered 307 to that server, same path and query. An
// outcome unknown is never redirected: following it sends the body
// again, which may store it twice.
func (a *API) failOn(w http.ResponseWriter, r *http.Request, err error) {
	var nl *service.NotLeaderError
	if !errors.As(err, &nl) || nl.LeaderHTTP == "" {
		a.fail(w, err)
		return
	}
	redirect(w, r, nl.LeaderHTTP, "topic "+nl.Topic+" is led by "+nl.LeaderHTTP+"\n")
}

// redirect answers 307 to the same path and query on the server at base
// ("http://host:port"), with text as the body.
func redirect(w http.ResponseWriter, r *http.Request, base, text string) {
	loc := base + r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		loc += "?" + r.URL.RawQuery
	}
	h := w.Header()
	h.Set("Location", loc)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusTemporaryRedirect)
	_, _ = io.WriteString(w, text)
}

// fail answers err: the status of its code, the X-Errors header and a
// one-line body. Messages are the service's (service.Message: built from
// sentinels and the request only); an unexpected error (which may carry a
// server path) is logged and answered as "internal error".
func (a *API) fail(w http.ResponseWriter, err error) {
	code := service.Code(err)
	msg := service.Message(err, code)
	if m, ok := leaderText(err); ok {
		msg = m // the wire's message is an address alone
	}
	if code == protocol.CodeUnknown {
		a.cfg.Logger.Error("http request failed", "err", err)
		msg = "internal error"
	}
	for _, prefix := range []string{"storage: ", "httpapi: ", "protocol: "} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	msg = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, msg)
	h := w.Header()
	if s := sentinelOf(err, code); s != "" {
		h.Set("X-Errors", s) // the original client's word for it; the body says more
	} else {
		h.Set("X-Errors", msg)
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	if nl := (*service.NotLeaderError)(nil); errors.As(err, &nl) && nl.Leader == "" {
		h.Set("Retry-After", "1") // an election takes about a second (docs/replication.md)
	}
	if overBudget(err) {
		h.Set("Retry-After", "1") // requests in flight are answered within about that
	}
	w.WriteHeader(statusOf(code))
	_, _ = io.WriteString(w, msg+"\n")
}

// leaderText is the line answering a refusal that names a replicated
// topic's leader, whose wire message is the leader's address alone: a
// topic with no leader yet, a leader whose HTTP port is not known, or a
// produce whose outcome is unknown. ok is false for any other error.
func leaderText(err error) (msg string, ok bool) {
	var ou *service.OutcomeUnknownError
	if errors.As(err, &ou) {
		lead := "no leader is elected yet"
		switch {
		case ou.LeaderHTTP != "":
			lead = "it is now led by " + ou.LeaderHTTP
		case ou.Leader != "":
			lead = "it is now led by " + ou.Leader + " (binary port; its HTTP port is not known)"
		}
		return fmt.Sprintf("outcome unknown: topic %q: the messages were written on this server, but it stopped leading the topic before they were committed, so they may or may not be kept; sending them again may store them twice (%s)", ou.Topic, lead), true
	}
	var nl *service.NotLeaderError
	if errors.As(err, &nl) {
		switch {
		case nl.Leader == "":
			return fmt.Sprintf("not leader: topic %q has no leader: none is elected yet; retry shortly", nl.Topic), true
		case nl.LeaderHTTP != "":
			return fmt.Sprintf("not leader: topic %q is led by %s", nl.Topic, nl.LeaderHTTP), true
		}
		return fmt.Sprintf("not leader: topic %q is led by %s (binary port; its HTTP port is not known)", nl.Topic, nl.Leader), true
	}
	return "", false
}

// isAPIError reports whether err is one of the port's own refusals.
func isAPIError(err error) bool {
	var e *apiError
	return errors.As(err, &e)
}
