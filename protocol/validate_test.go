package protocol

import (
	"bytes"
	"errors"
	"runtime"
	"testing"
)

// parsed builds a batch from a body and its header fields as a producer
// may send them, truthful or not.
func parsed(t *testing.T, codec Codec, count, rawSize int, body []byte) *Batch {
	t.Helper()
	bt, _, err := ParseBatch(AppendBatchBody(nil, codec, count, rawSize, body))
	if err != nil {
		t.Fatal(err)
	}
	return &bt
}

func TestValidateBody(t *testing.T) {
	raw := AppendMessage(AppendMessage(nil, []byte("hello")), []byte("world"))
	zbody := zstdEnc().EncodeAll(raw, nil)
	var scratch []byte
	var err error
	if scratch, err = parsed(t, CodecZstd, 2, len(raw), zbody).ValidateBody(1<<20, scratch); err != nil {
		t.Fatalf("a true zstd batch: %v", err)
	}
	for name, bt := range map[string]*Batch{
		"garbage labelled zstd, 5000 messages": parsed(t, CodecZstd, 5000, 5000, []byte("0123456789abcdef")),
		"true body, count too high":            parsed(t, CodecZstd, 3, len(raw), zbody),
		"true body, count too low":             parsed(t, CodecZstd, 1, len(raw), zbody),
		"true body, raw size too small":        parsed(t, CodecZstd, 2, len(raw)-1, zbody),
		"raw size over the limit":              parsed(t, CodecS2, 2, 2<<20, zbody),
		"garbage labelled s2":                  parsed(t, CodecS2, 2, len(raw), []byte("0123456789abcdef")),
	} {
		if scratch, err = bt.ValidateBody(1<<20, scratch); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := parsed(t, CodecNone, 2, len(raw), raw).ValidateBody(1, nil); err != nil {
		t.Errorf("an uncompressed batch is not held to the decoded limit: %v", err)
	}
}

// TestDecodeBodyBounded: a small zstd body that expands far past the size
// its batch declares fails at that size, allocating about that much, not
// what it expands to.
func TestDecodeBodyBounded(t *testing.T) {
	big := bytes.Repeat([]byte{0}, 256<<20) // compresses to a few KB
	body := zstdEnc().EncodeAll(big, nil)
	big = nil
	runtime.GC()
	bt := parsed(t, CodecZstd, 1, 4096, body)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := bt.DecodeBody()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrBadBody) {
		t.Fatalf("decode past the declared size: %v, want ErrBadBody", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Fatalf("decoding a body declared as 4096 bytes allocated %d bytes", grew)
	}
}
