package client

import (
	"errors"
	"fmt"

	"github.com/haraqa/haraqa/protocol"
)

// Errors, usable with errors.Is. A server's answer arrives as an *Error,
// which matches the sentinel of its code.
var (
	ErrTopicNotFound    = errors.New("client: topic not found")
	ErrTopicExists      = errors.New("client: topic already exists")
	ErrInvalidTopic     = errors.New("client: invalid topic name")
	ErrOffsetOutOfRange = errors.New("client: offset out of range")
	ErrFrameTooLarge    = errors.New("client: frame too large")
	ErrBadBatch         = errors.New("client: invalid batch")
	ErrUnreadable       = errors.New("client: data unreadable on the server")
	ErrReadOnly         = errors.New("client: topic is read-only on the server")
	ErrShuttingDown     = errors.New("client: server is shutting down")
	ErrInvalidArgument  = errors.New("client: invalid argument")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("client: closed")
	// ErrConnection: the connection failed; the request may or may not have
	// reached the server.
	ErrConnection = errors.New("client: connection failed")
	// ErrCorrupt: a batch received failed its CRC or could not be decoded.
	ErrCorrupt = errors.New("client: corrupt batch received")
)

var codeErrors = map[protocol.Code]error{
	protocol.CodeTopicNotFound:    ErrTopicNotFound,
	protocol.CodeTopicExists:      ErrTopicExists,
	protocol.CodeInvalidTopic:     ErrInvalidTopic,
	protocol.CodeOffsetOutOfRange: ErrOffsetOutOfRange,
	protocol.CodeFrameTooLarge:    ErrFrameTooLarge,
	protocol.CodeBadBatch:         ErrBadBatch,
	protocol.CodeUnreadableRange:  ErrUnreadable,
	protocol.CodeTopicReadOnly:    ErrReadOnly,
	protocol.CodeShuttingDown:     ErrShuttingDown,
	protocol.CodeInvalidArgument:  ErrInvalidArgument,
}

// Error is an error answered by the server: the operation, the protocol's
// code and the server's message.
type Error struct {
	Op      protocol.Op
	Code    protocol.Code
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("haraqa: %s: %s: %s", e.Op, e.Code, e.Message)
}

// Is matches the sentinel of the error's code, so
// errors.Is(err, client.ErrTopicNotFound) holds for a server's answer.
func (e *Error) Is(target error) bool {
	s, ok := codeErrors[e.Code]
	return ok && s == target
}
