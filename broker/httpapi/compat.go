package httpapi

import (
	"errors"
	"fmt"

	"github.com/haraqa/haraqa/protocol"
)

// This file: what the original haraqa's HTTP client depends on. Its client
// maps exactly these X-Errors strings to its error values, so where one
// applies the X-Errors header carries it, and the body the descriptive
// text (see docs/http.md, "Migrating from haraqa 0.x").
const (
	sentinelTopicNotFound = "topic does not exist"
	sentinelTopicExists   = "topic already exists"
	sentinelSizes         = "invalid header: X-Sizes"
	sentinelID            = "invalid message id"
	sentinelLimit         = "invalid message limit"
	sentinelTopic         = "invalid topic"
	sentinelJSON          = "invalid body: invalid json entry"
	sentinelWebsocket     = "invalid websocket"
	sentinelNoContent     = "no content"
	sentinelClosing       = "server closing"
)

// sentineled is a bad request the original client knows by its sentinel.
type sentineled struct {
	sentinel string
	err      error
}

func (e *sentineled) Error() string { return e.err.Error() }
func (e *sentineled) Unwrap() error { return e.err }

// badRequestAs is badRequest carrying the original client's sentinel.
func badRequestAs(sentinel, format string, args ...any) error {
	return &sentineled{sentinel: sentinel, err: fmt.Errorf("%w: "+format, append([]any{ErrBadRequest}, args...)...)}
}

// sentinelOf returns the original client's X-Errors string for err, of
// code, or "".
func sentinelOf(err error, code protocol.Code) string {
	var s *sentineled
	if errors.As(err, &s) {
		return s.sentinel
	}
	switch code {
	case protocol.CodeTopicNotFound:
		return sentinelTopicNotFound
	case protocol.CodeTopicExists:
		return sentinelTopicExists
	case protocol.CodeInvalidTopic:
		return sentinelTopic
	case protocol.CodeShuttingDown:
		if !isAPIError(err) { // not "starting" nor a peer down: the store closing
			return sentinelClosing
		}
	}
	return ""
}
