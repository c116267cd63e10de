package protocol

import (
	"encoding/binary"
	"errors"
	"testing"
)

// A batch may claim at most MaxBatchMessages messages: one that claims
// more is refused before anything is counted or decoded, whatever its
// body. Before, a 64 MiB batch could hold 64 Mi empty messages.
func TestMaxBatchMessages(t *testing.T) {
	ok := AppendBatch(nil, make([][]byte, MaxBatchMessages)...) // empty messages: one length byte each
	if _, _, err := ParseBatch(ok); err != nil {
		t.Fatalf("%d messages: %v", MaxBatchMessages, err)
	}
	over := AppendBatch(nil, make([][]byte, MaxBatchMessages+1)...)
	_, _, err := ParseBatch(over)
	if !errors.Is(err, ErrBadCount) {
		t.Fatalf("%d messages: %v, want ErrBadCount", MaxBatchMessages+1, err)
	}
	// The count field alone decides, before the body is looked at.
	claim := AppendBatch(nil, []byte("x"))
	binary.LittleEndian.PutUint32(claim[batchCountOff:], MaxBatchMessages+1)
	if _, _, err := ParseBatch(claim); !errors.Is(err, ErrBadCount) {
		t.Fatalf("a claim of %d messages: %v, want ErrBadCount", MaxBatchMessages+1, err)
	}
}
