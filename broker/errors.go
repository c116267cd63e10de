package broker

import (
	"errors"

	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

var (
	// ErrInvalidConfig: Config.Validate failed.
	ErrInvalidConfig = errors.New("broker: invalid config")
	// ErrNotStarted: Addr or Shutdown before Start succeeded.
	ErrNotStarted = errors.New("broker: not started")
	// ErrEngineStopped: the event loops stopped while the broker was not
	// shutting down (Broker.Dead).
	ErrEngineStopped = errors.New("broker: event loops stopped")

	errStalled = errors.New("broker: connection closed")
)

// codeOf maps an error to its wire code: storage's errors first, then the
// protocol's own.
func codeOf(err error) protocol.Code {
	switch {
	case errors.Is(err, storage.ErrTopicNotFound):
		return protocol.CodeTopicNotFound
	case errors.Is(err, storage.ErrTopicExists):
		return protocol.CodeTopicExists
	case errors.Is(err, storage.ErrInvalidTopic):
		return protocol.CodeInvalidTopic
	case errors.Is(err, storage.ErrInvalidBatch):
		return protocol.CodeBadBatch
	case errors.Is(err, storage.ErrOffsetOutOfRange):
		return protocol.CodeOffsetOutOfRange
	case errors.Is(err, storage.ErrUnreadable):
		return protocol.CodeUnreadableRange
	case errors.Is(err, storage.ErrReadOnly):
		return protocol.CodeTopicReadOnly
	case errors.Is(err, storage.ErrClosed):
		return protocol.CodeShuttingDown
	case errors.Is(err, storage.ErrNoSpace):
		return protocol.CodeNoSpace
	case errors.Is(err, storage.ErrTooManyFiles), errors.Is(err, storage.ErrTooManyGroups):
		return protocol.CodeLimitReached
	case errors.Is(err, storage.ErrGroupBusy):
		return protocol.CodeGroupBusy
	case errors.Is(err, storage.ErrCommitConflict):
		return protocol.CodeCommitConflict
	case errors.Is(err, storage.ErrInvalidGroup):
		return protocol.CodeInvalidArgument
	case errors.Is(err, storage.ErrOutOfOrderSequence):
		return protocol.CodeOutOfOrderSequence
	case errors.Is(err, storage.ErrOffsetMismatch):
		return protocol.CodeOffsetMismatch
	case errors.Is(err, storage.ErrImportRefused):
		return protocol.CodeImportRefused
	case errors.Is(err, storage.ErrInvalidImport):
		return protocol.CodeInvalidArgument
	}
	return protocol.CodeOf(err)
}

// clientMessage is the text sent to a client for err. Storage errors carry
// volume paths in their chain; the client gets the code's meaning plus
// what it sent, never a server path.
func clientMessage(err error, code protocol.Code) string {
	switch code {
	case protocol.CodeUnknown, protocol.CodeTopicReadOnly:
		return code.String()
	}
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Message
	}
	// Errors of codes other than the two above are built from sentinels
	// and client input only (topic names, offsets).
	return err.Error()
}
