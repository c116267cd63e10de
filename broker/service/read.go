package service

import (
	"fmt"

	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// This file: consume, the read and the watch a long poll parks on.

// ReadResult is what a Read found: spans of whole batches in segment
// files, held open until Release (storage's).
type ReadResult = storage.ReadResult

// File is a segment file a ReadResult's span is in.
type File = storage.File

// Read returns the span of whole batches of topic that covers the messages
// [offset, offset+limit) (limit <= 0: any), at most maxBytes of batches
// but the first (the consume right). A negative offset counts back from
// the end (-1: the last message); one before the oldest kept and one past
// the end are ErrOffsetOutOfRange, on both ports. The result's Offset is
// the offset resolved; with no batch there (at the end) the caller may
// Watch and read again. The result must be released.
func (s *Service) Read(c Caller, topic string, offset int64, limit int, maxBytes int64) (*ReadResult, error) {
	if err := s.Allow(c, protocol.OpConsume, topic); err != nil {
		return nil, err
	}
	r, err := s.store.Read(topic, offset, limit, maxBytes)
	if err != nil {
		return nil, err
	}
	if r.Offset > r.End {
		r.Release()
		return nil, fmt.Errorf("%w: topic %q: offset %d is past the end (%d)", storage.ErrOffsetOutOfRange, topic, r.Offset, r.End)
	}
	return r, nil
}

// Watch calls fn once topic's next offset is past offset, or the topic is
// deleted or the store closes (the consume right): at once if that is so
// already, else on the goroutine that appended, and fn must not block.
// cancel removes fn if it has not run yet and reports whether it did so.
func (s *Service) Watch(c Caller, topic string, offset int64, fn func()) (cancel func() bool, err error) {
	if err := s.Allow(c, protocol.OpConsume, topic); err != nil {
		return nil, err
	}
	return s.store.Watch(topic, offset, fn)
}

// DecodeBody decodes the body of bt, a batch of a ReadResult, into dst's
// memory when it is large enough; a compressed body is decoded on the
// store's decode threads, which yield to the event loops. The caller
// bounds bt.RawSize first.
func (s *Service) DecodeBody(bt *protocol.Batch, dst []byte) ([]byte, error) {
	return s.store.DecodeBody(bt, dst)
}
