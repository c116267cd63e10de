package protocol

import (
	"errors"
	"strconv"
)

// Code is the status of a response: CodeOK, or what went wrong. Codes are
// part of the wire format: a number, once given, never changes meaning.
type Code uint16

// Status codes. See doc.go for when a server sends each.
const (
	CodeOK                 Code = 0  // success; the payload is the op's response
	CodeUnknown            Code = 1  // an internal or unexpected server error
	CodeUnsupportedVersion Code = 2  // the request's protocol version is not spoken
	CodeUnknownOp          Code = 3  // the op is not known
	CodeMalformedRequest   Code = 4  // the frame or payload breaks the format
	CodeFrameTooLarge      Code = 5  // the length field is over the server's limit
	CodeTopicNotFound      Code = 6  // no topic of that name
	CodeTopicExists        Code = 7  // create topic: the topic already exists
	CodeInvalidTopic       Code = 8  // the topic name breaks the naming rules
	CodeOffsetOutOfRange   Code = 9  // the offset is outside [oldest, next]
	CodeBadBatch           Code = 10 // the produced batch is invalid (header, count or CRC)
	CodeUnreadableRange    Code = 11 // stored data is corrupt and no volume has a good copy
	CodeTopicReadOnly      Code = 12 // an earlier storage I/O error made the topic read-only
	CodeShuttingDown       Code = 13 // the server is stopping; retry on another connection
	CodeInvalidArgument    Code = 14 // a well-formed field is out of range (e.g. a bad regex)
	CodeLimitReached       Code = 15 // a server limit is reached; the message names it
	CodeNoSpace            Code = 16 // a volume is under its free-space floor; retry later
	CodeIdleTimeout        Code = 17 // the connection was idle and is closed; nothing sent after its last answer was read
	CodeUnauthenticated    Code = 18 // no valid token was presented on this connection (hello)
	CodeForbidden          Code = 19 // the connection's token does not allow this request
	CodeGroupBusy          Code = 20 // another member holds the lease on the (group, topic)
	CodeCommitConflict     Code = 21 // a compare-and-set commit found another committed offset
	CodeOutOfOrderSequence Code = 22 // an idempotent batch's sequence is below those the server remembers, or reused with another count
	CodeOffsetMismatch     Code = 23 // produce with an expected offset, or import: the topic's next offset is another
	CodeImportRefused      Code = 24 // import: the topic holds messages that were not imported
	CodeProducerFenced     Code = 25 // an idempotent batch's producer id is bound to another token
	CodeUnknownProducer    Code = 26 // an idempotent batch's producer was forgotten and the batch is not its first
	CodeNotLeader          Code = 27 // a replicated topic's write on a server that does not lead it; the message is the leader's address
	CodeNotEnoughReplicas  Code = 28 // acks=all: fewer in-sync replicas than -min-insync, or they did not confirm in time
	CodeFencedEpoch        Code = 29 // a replica request under a leader epoch that is not the server's
	CodeOutcomeUnknown     Code = 30 // a replicated produce was written on the leader but the lead changed before it was committed: it may or may not be kept

	codeMax = CodeOutcomeUnknown
)

var codeNames = [...]string{
	CodeOK:                 "ok",
	CodeUnknown:            "unknown error",
	CodeUnsupportedVersion: "unsupported version",
	CodeUnknownOp:          "unknown op",
	CodeMalformedRequest:   "malformed request",
	CodeFrameTooLarge:      "frame too large",
	CodeTopicNotFound:      "topic not found",
	CodeTopicExists:        "topic exists",
	CodeInvalidTopic:       "invalid topic",
	CodeOffsetOutOfRange:   "offset out of range",
	CodeBadBatch:           "invalid batch",
	CodeUnreadableRange:    "unreadable range",
	CodeTopicReadOnly:      "topic read-only",
	CodeShuttingDown:       "shutting down",
	CodeInvalidArgument:    "invalid argument",
	CodeLimitReached:       "limit reached",
	CodeNoSpace:            "no space",
	CodeIdleTimeout:        "idle timeout",
	CodeUnauthenticated:    "unauthenticated",
	CodeForbidden:          "forbidden",
	CodeGroupBusy:          "group busy",
	CodeCommitConflict:     "commit conflict",
	CodeOutOfOrderSequence: "out of order sequence",
	CodeOffsetMismatch:     "offset mismatch",
	CodeImportRefused:      "import refused",
	CodeProducerFenced:     "producer fenced",
	CodeUnknownProducer:    "unknown producer",
	CodeNotLeader:          "not leader",
	CodeNotEnoughReplicas:  "not enough replicas",
	CodeFencedEpoch:        "fenced epoch",
	CodeOutcomeUnknown:     "outcome unknown",
}

func (c Code) String() string {
	if c <= codeMax && codeNames[c] != "" {
		return codeNames[c]
	}
	return "code " + strconv.Itoa(int(c))
}

// Error is an error response from the server: its code and message.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "protocol: " + e.Code.String()
	}
	return "protocol: " + e.Code.String() + ": " + e.Message
}

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, &Error{Code: CodeTopicNotFound}) holds for any message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// CodeOf returns the wire code for err: CodeOK for nil, the code of an
// *Error, the code of this package's frame, topic and batch errors, and
// CodeUnknown for anything else. A server maps its own errors (topic not
// found, read-only, ...) first and falls back to CodeOf.
func CodeOf(err error) Code {
	if err == nil {
		return CodeOK
	}
	var pe *Error
	switch {
	case errors.As(err, &pe):
		return pe.Code
	case errors.Is(err, ErrUnsupportedVersion):
		return CodeUnsupportedVersion
	case errors.Is(err, ErrUnknownOp):
		return CodeUnknownOp
	case errors.Is(err, ErrFrameTooLarge):
		return CodeFrameTooLarge
	case errors.Is(err, ErrMalformed), errors.Is(err, ErrShortFrame):
		return CodeMalformedRequest
	case errors.Is(err, ErrInvalidTopic):
		return CodeInvalidTopic
	case errors.Is(err, ErrInvalidArgument):
		return CodeInvalidArgument
	case isBatchError(err):
		return CodeBadBatch
	}
	return CodeUnknown
}

func isBatchError(err error) bool {
	for _, e := range [...]error{ErrShortBatch, ErrBadLength, ErrBatchTooLarge, ErrBadMagic,
		ErrBadCodec, ErrBadFlags, ErrBadCount, ErrBadMessage, ErrCRCMismatch} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
