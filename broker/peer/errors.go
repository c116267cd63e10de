package peer

import (
	"errors"
	"fmt"

	"github.com/haraqa/haraqa/protocol"
)

// Errors of a Conn, usable with errors.Is. A server's answer other than OK
// is a *protocol.Error instead (see the package doc).
var (
	// ErrConnection: the connection failed (or could not be made); a
	// request in flight may or may not have reached the server.
	ErrConnection = errors.New("peer: connection failed")
	// ErrClosed: the Conn was closed.
	ErrClosed = errors.New("peer: connection closed")
	// ErrHTTPPort: the address answered in HTTP: it is a server's HTTP
	// port, not its binary port. Wrapped in ErrConnection.
	ErrHTTPPort = errors.New("peer: this is an HTTP port, not a server's binary port")
	// ErrResponseTooLarge: a response is larger than
	// Options.MaxResponseBytes; it was skipped and the Conn stays usable.
	ErrResponseTooLarge = errors.New("peer: response too large")
)

// serverError is the error of an answer whose code is not OK: op and the
// server's *protocol.Error.
func serverError(op protocol.Op, code protocol.Code, payload []byte) error {
	msg, _ := protocol.ParseErrorResponse(payload)
	return fmt.Errorf("peer: %s: %w", op, &protocol.Error{Code: code, Message: string(msg)})
}

// badAnswer is the error of an answer that does not decode.
func badAnswer(op protocol.Op, err error) error {
	return fmt.Errorf("peer: %s: the server's answer: %w", op, err)
}
