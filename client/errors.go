package client

import (
	"errors"
	"fmt"
	"strings"

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
	ErrLimitReached     = errors.New("client: server limit reached")
	ErrNoSpace          = errors.New("client: server volume full")
	// ErrIdleTimeout: the server closed an idle connection (code 17);
	// requests that were waiting on it were not read and are sent again on
	// a new connection.
	ErrIdleTimeout = errors.New("client: connection closed by the server as idle")
	// ErrUnauthenticated: the server checks tokens and the client presented
	// none (see WithToken) or one it does not hold (code 18).
	ErrUnauthenticated = errors.New("client: unauthenticated: the server needs a valid token")
	// ErrForbidden: the token does not allow the request on its topic
	// (code 19).
	ErrForbidden = errors.New("client: forbidden: the token does not allow this")
	// ErrGroupBusy: another member holds the lease of the consumer group
	// on the topic (code 20).
	ErrGroupBusy = errors.New("client: group busy: another member holds its lease")
	// ErrCommitConflict: a conditional commit found another committed
	// offset (code 21).
	ErrCommitConflict = errors.New("client: commit conflict: the committed offset changed")
	// ErrOutOfOrderSequence: an idempotent batch was sent again too late
	// for the server to tell whether it stored it (code 22): its sequence
	// is below the latest the server remembers for the producer.
	ErrOutOfOrderSequence = errors.New("client: out of order sequence: the server cannot tell whether the batch was stored")
	// ErrProducerFenced: the producer id of an idempotent batch is bound,
	// on that topic, to another token than the connection's (code 25);
	// nothing was stored. A Client's batch sent for the first time is sent
	// again under a fresh producer id instead of failing.
	ErrProducerFenced = errors.New("client: producer fenced: its id belongs to another token")
	// ErrUnknownProducer: the server forgot the producer to make room for
	// others, and the batch was sent again (code 26): it may have been
	// stored by an earlier attempt, so the server refused it rather than
	// maybe storing it twice. A Client's batch sent for the first time is
	// sent again under a fresh producer id instead of failing.
	ErrUnknownProducer = errors.New("client: unknown producer: the server forgot the producer; the batch may or may not have been stored")
	// ErrOffsetMismatch: ProduceExpect found the topic's next offset was
	// not the one expected (code 23); nothing was stored.
	ErrOffsetMismatch = errors.New("client: the topic's next offset is not the expected one")
	// ErrImportRefused: an import (MoveTopic) into a topic that holds
	// messages produced on the destination (code 24): only a topic that is
	// empty or being imported is imported into. Nothing was stored.
	ErrImportRefused = errors.New("client: import refused: the topic holds messages that were not imported")
	// ErrNotLeader: a write to a replicated topic reached a server that
	// does not lead it; the *Error's message is the leader's address
	// (LeaderOf), or empty while an election is under way. A Client of
	// several servers follows it by itself.
	ErrNotLeader = errors.New("client: not the topic's leader")
	// ErrNotEnoughReplicas: a produce with acks=all found fewer in-sync
	// replicas than the server's -min-insync, or they did not confirm it
	// in time; an idempotent producer may send it again.
	ErrNotEnoughReplicas = errors.New("client: not enough in-sync replicas")
	// ErrOutcomeUnknown: a produce to a replicated topic may or may not
	// have been stored. Either its leader wrote the batch but stopped
	// leading the topic before the in-sync replicas confirmed it (code
	// 30; the *Error's message names the new leader, as ErrNotLeader's
	// does, LeaderOf), or, on a Client of several servers, the leader
	// did not answer within WithAttemptTimeout and the other servers
	// name another leader now. The new leader may hold the batch or not.
	// A Client with idempotence (the default) never returns it for a
	// produce it can follow to the new leader: it sends the batch there
	// under the same producer id and sequence, which the new leader
	// answers with the batch's offset if it holds it. Without
	// idempotence it is returned: sending the batch again may store it
	// twice, not sending it may lose it; the caller chooses (at least
	// once or at most once).
	ErrOutcomeUnknown = errors.New("client: outcome unknown: the batch may or may not have been stored")
	// ErrFencedEpoch: a replica request under a stale leader epoch.
	ErrFencedEpoch = errors.New("client: fenced leader epoch")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("client: closed")
	// ErrHTTPPort: the address answered in HTTP: it is a server's HTTP
	// port (default 4353), not its binary port (-tcp, default 14353).
	// Wrapped in ErrConnection.
	ErrHTTPPort = errors.New("client: this is an HTTP port; the binary protocol is on the server's -tcp port (default 14353)")
	// ErrConnection: the connection failed; the request may or may not have
	// reached the server.
	ErrConnection = errors.New("client: connection failed")
	// ErrResponseTooLarge: a response is larger than WithMaxResponseBytes
	// allows, or a batch in it declares it decodes to more; it was skipped
	// and the connection stays usable.
	ErrResponseTooLarge = errors.New("client: response too large")
	// ErrCorrupt: a batch received failed its CRC or could not be decoded.
	ErrCorrupt = errors.New("client: corrupt batch received")
	// ErrUnavailable: over several servers, a topic is on none of those
	// that answered, and may be on one that did not (or would be placed
	// on it); the error names that server and wraps its failure.
	ErrUnavailable = errors.New("client: server unavailable")
	// ErrSeveralServers: an operation that a client of several servers
	// cannot route to one of them.
	ErrSeveralServers = errors.New("client: operation not available over several servers")
)

var codeErrors = map[protocol.Code]error{
	protocol.CodeTopicNotFound:      ErrTopicNotFound,
	protocol.CodeTopicExists:        ErrTopicExists,
	protocol.CodeInvalidTopic:       ErrInvalidTopic,
	protocol.CodeOffsetOutOfRange:   ErrOffsetOutOfRange,
	protocol.CodeFrameTooLarge:      ErrFrameTooLarge,
	protocol.CodeBadBatch:           ErrBadBatch,
	protocol.CodeUnreadableRange:    ErrUnreadable,
	protocol.CodeTopicReadOnly:      ErrReadOnly,
	protocol.CodeShuttingDown:       ErrShuttingDown,
	protocol.CodeInvalidArgument:    ErrInvalidArgument,
	protocol.CodeLimitReached:       ErrLimitReached,
	protocol.CodeNoSpace:            ErrNoSpace,
	protocol.CodeIdleTimeout:        ErrIdleTimeout,
	protocol.CodeUnauthenticated:    ErrUnauthenticated,
	protocol.CodeForbidden:          ErrForbidden,
	protocol.CodeGroupBusy:          ErrGroupBusy,
	protocol.CodeCommitConflict:     ErrCommitConflict,
	protocol.CodeOutOfOrderSequence: ErrOutOfOrderSequence,
	protocol.CodeOffsetMismatch:     ErrOffsetMismatch,
	protocol.CodeImportRefused:      ErrImportRefused,
	protocol.CodeProducerFenced:     ErrProducerFenced,
	protocol.CodeUnknownProducer:    ErrUnknownProducer,
	protocol.CodeNotLeader:          ErrNotLeader,
	protocol.CodeNotEnoughReplicas:  ErrNotEnoughReplicas,
	protocol.CodeFencedEpoch:        ErrFencedEpoch,
	protocol.CodeOutcomeUnknown:     ErrOutcomeUnknown,
}

// Error is an error answered by the server: the operation, the protocol's
// code and the server's message.
type Error struct {
	Op      Op
	Code    Code
	Message string
}

func (e *Error) Error() string {
	msg := e.Message
	switch e.Code {
	case protocol.CodeNotLeader: // the message is the leader's address alone
		if msg == "" {
			msg = "the topic has no leader: none is elected yet; retry shortly"
		} else {
			msg = "the topic is led by " + msg
		}
	case protocol.CodeOutcomeUnknown:
		lead := "no leader is elected yet"
		if msg != "" {
			lead = "the topic is now led by " + msg
		}
		msg = "the leader wrote the batch but stopped leading the topic before it was committed: it may or may not be kept (" + lead + ")"
	}
	msg = unrepeated(e.Code.String(), msg)
	head := fmt.Sprintf("haraqa: %s: %s", e.Op, e.Code)
	if e.Op == 0 { // an answer to no request: about the connection
		head = fmt.Sprintf("haraqa: %s", e.Code)
	}
	if msg == "" {
		return head
	}
	return head + ": " + msg
}

// unrepeated is a server's message without what repeats its code: a
// message "storage: topic not found: \"x\"" under the code "topic not
// found" is "\"x\"" (its package prefixes go with the repetition). A
// message that does not repeat the code is kept whole.
func unrepeated(code, msg string) string {
	m := msg
	for {
		if rest, ok := strings.CutPrefix(m, code); ok {
			if rest == "" {
				return ""
			}
			if rest, ok := strings.CutPrefix(rest, ": "); ok {
				return rest
			}
			return msg
		}
		pkg, rest, ok := strings.Cut(m, ": ")
		if !ok || !isPackageName(pkg) {
			return msg
		}
		m = rest
	}
}

// isPackageName reports whether s looks like a Go package's prefix of
// an error message ("storage", "broker"): a short lowercase word.
func isPackageName(s string) bool {
	if s == "" || len(s) > 16 {
		return false
	}
	for _, r := range s {
		if r < 'a' || r > 'z' {
			return false
		}
	}
	return true
}

// Is matches the sentinel of the error's code, so
// errors.Is(err, client.ErrTopicNotFound) holds for a server's answer.
func (e *Error) Is(target error) bool {
	s, ok := codeErrors[e.Code]
	return ok && s == target
}

// serverError is the *Error of a response whose code is not CodeOK.
func serverError(op protocol.Op, resp response) *Error {
	msg, _ := protocol.ParseErrorResponse(resp.payload)
	return &Error{Op: op, Code: resp.hdr.Code, Message: string(msg)}
}

// The wire's names, so that ordinary use needs no import of protocol.
type (
	// Compression says how produced batches are compressed
	// (WithCompression).
	Compression = protocol.Codec
	// Code is the server's status code in an *Error.
	Code = protocol.Code
	// Op is the operation an *Error answered.
	Op = protocol.Op
)

// Compressions.
const (
	CompressionNone = protocol.CodecNone
	CompressionS2   = protocol.CodecS2
	CompressionZstd = protocol.CodecZstd
)

// Codes a server answers with; see the sentinels above for errors.Is.
const (
	CodeUnknown            = protocol.CodeUnknown
	CodeTopicNotFound      = protocol.CodeTopicNotFound
	CodeTopicExists        = protocol.CodeTopicExists
	CodeInvalidTopic       = protocol.CodeInvalidTopic
	CodeOffsetOutOfRange   = protocol.CodeOffsetOutOfRange
	CodeFrameTooLarge      = protocol.CodeFrameTooLarge
	CodeBadBatch           = protocol.CodeBadBatch
	CodeUnreadableRange    = protocol.CodeUnreadableRange
	CodeTopicReadOnly      = protocol.CodeTopicReadOnly
	CodeShuttingDown       = protocol.CodeShuttingDown
	CodeInvalidArgument    = protocol.CodeInvalidArgument
	CodeLimitReached       = protocol.CodeLimitReached
	CodeNoSpace            = protocol.CodeNoSpace
	CodeIdleTimeout        = protocol.CodeIdleTimeout
	CodeUnauthenticated    = protocol.CodeUnauthenticated
	CodeForbidden          = protocol.CodeForbidden
	CodeOutOfOrderSequence = protocol.CodeOutOfOrderSequence
	CodeOffsetMismatch     = protocol.CodeOffsetMismatch
	CodeProducerFenced     = protocol.CodeProducerFenced
	CodeUnknownProducer    = protocol.CodeUnknownProducer
	CodeNotLeader          = protocol.CodeNotLeader
	CodeOutcomeUnknown     = protocol.CodeOutcomeUnknown
)

// LeaderOf returns the leader's address an ErrNotLeader error names, or
// the new leader's an ErrOutcomeUnknown error of the server names, and
// whether err is one that names it.
func LeaderOf(err error) (string, bool) {
	var e *Error
	if !errors.As(err, &e) || (e.Code != protocol.CodeNotLeader && e.Code != protocol.CodeOutcomeUnknown) || e.Message == "" {
		return "", false
	}
	return e.Message, true
}
