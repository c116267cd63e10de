package storage

import (
	"bytes"
	"errors"
	"testing"

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
