package service

import (
	"errors"

	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// A Coded error says its own wire code: the refusals a port makes itself
// (a malformed HTTP header, a server still recovering) implement it, so
// that Code maps them too and the HTTP status follows from the code.
type Coded interface {
	error
	WireCode() protocol.Code
}

// codes is the one table from the errors of storage to wire codes, in the
// order they are tried.
var codes = []struct {
	err  error
	code protocol.Code
}{
	{storage.ErrTopicNotFound, protocol.CodeTopicNotFound},
	{storage.ErrTopicExists, protocol.CodeTopicExists},
	{storage.ErrInvalidTopic, protocol.CodeInvalidTopic},
	{storage.ErrInvalidBatch, protocol.CodeBadBatch},
	{storage.ErrOffsetOutOfRange, protocol.CodeOffsetOutOfRange},
	{storage.ErrUnreadable, protocol.CodeUnreadableRange},
	{storage.ErrReadOnly, protocol.CodeTopicReadOnly},
	{storage.ErrClosed, protocol.CodeShuttingDown},
	{storage.ErrNoSpace, protocol.CodeNoSpace},
	{storage.ErrTooManyFiles, protocol.CodeLimitReached},
	{storage.ErrTooManyGroups, protocol.CodeLimitReached},
	{storage.ErrDecodeQueueFull, protocol.CodeLimitReached},
	{storage.ErrGroupBusy, protocol.CodeGroupBusy},
	{storage.ErrCommitConflict, protocol.CodeCommitConflict},
	{storage.ErrInvalidGroup, protocol.CodeInvalidArgument},
	{storage.ErrOutOfOrderSequence, protocol.CodeOutOfOrderSequence},
	{storage.ErrProducerFenced, protocol.CodeProducerFenced},
	{storage.ErrUnknownProducer, protocol.CodeUnknownProducer},
	{storage.ErrOffsetLimit, protocol.CodeLimitReached},
	{storage.ErrOffsetMismatch, protocol.CodeOffsetMismatch},
	{storage.ErrImportRefused, protocol.CodeImportRefused},
	{storage.ErrInvalidImport, protocol.CodeInvalidArgument},
}

// Code maps an error of either port to its wire code: a Coded error's
// own, storage's errors by the table above, then the protocol's (a
// *protocol.Error's code, its sentinels). Anything else is CodeUnknown.
func Code(err error) protocol.Code {
	if err == nil {
		return protocol.CodeOK
	}
	var c Coded
	if errors.As(err, &c) {
		return c.WireCode()
	}
	for _, e := range codes {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return protocol.CodeOf(err)
}

// Message is the text sent to a client for err of code. Storage errors
// carry volume paths in their chain; the client gets the code's meaning
// plus what it sent, never a server path.
func Message(err error, code protocol.Code) string {
	switch code {
	case protocol.CodeUnknown, protocol.CodeTopicReadOnly:
		return code.String()
	}
	if errors.Is(err, storage.ErrClosed) {
		return "server is shutting down"
	}
	var nl *NotLeaderError
	if errors.As(err, &nl) {
		return nl.Leader // the wire's rule: exactly the leader's address
	}
	var ou *OutcomeUnknownError
	if errors.As(err, &ou) {
		return ou.Leader // as for not leader: the new leader's address, or empty
	}
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Message
	}
	// Errors of codes other than the two above are built from sentinels
	// and client input only (topic names, offsets).
	return err.Error()
}
