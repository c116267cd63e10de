package storage

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// TestAppendValidatesCompressed: a compressed batch whose body does not
// hold what its header claims is refused before it is stored, so that it
// cannot fail every consumer of its offsets later.
func TestAppendValidatesCompressed(t *testing.T) {
	opts := DefaultOptions(t.TempDir())
	opts.MaxBatchBytes = 1 << 20
	s := mustOpen(t, opts)
	defer s.Close()
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	raw := protocol.AppendMessage(protocol.AppendMessage(nil, []byte("a")), []byte("b"))
	good := protocol.AppendBatchRaw(nil, protocol.CodecZstd, 2, raw)
	if _, err := s.Append("t", good); err != nil {
		t.Fatalf("a true zstd batch: %v", err)
	}
	zeros := protocol.AppendBatchRaw(nil, protocol.CodecZstd, 1, protocol.AppendMessage(nil, bytes.Repeat([]byte{0}, 2<<20)))
	for name, b := range map[string][]byte{
		"16 bytes of garbage labelled zstd, 5000 messages": protocol.AppendBatchBody(nil, protocol.CodecZstd, 5000, 5000, []byte("0123456789abcdef")),
		"a true body with a wrong count":                   protocol.AppendBatchRaw(nil, protocol.CodecS2, 3, raw),
		"decoding past MaxBatchBytes":                      zeros,
	} {
		if _, err := s.Append("t", b); !errors.Is(err, ErrInvalidBatch) {
			t.Errorf("%s: %v, want ErrInvalidBatch", name, err)
		}
	}
	if info, err := s.Info("t"); err != nil || info.Next != 2 {
		t.Fatalf("after refused batches: %+v %v, want next 2", info, err)
	}
}

// TestTruncateTimeOutOfRange: a time before any int64 of nanoseconds
// truncates nothing, one after all of them truncates everything; neither
// wraps around.
func TestTruncateTimeOutOfRange(t *testing.T) {
	s := mustOpen(t, DefaultOptions(t.TempDir()))
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.Append("t", protocol.AppendBatch(nil, []byte("m"))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.TruncateTime("t", time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	if info, _ := s.Info("t"); info.Oldest != 0 {
		t.Fatalf("truncate before 1600 moved the start to %d", info.Oldest)
	}
	if err := s.TruncateTime("t", time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	if info, _ := s.Info("t"); info.Oldest != 3 {
		t.Fatalf("truncate before 9999: oldest %d, want 3", info.Oldest)
	}
}
