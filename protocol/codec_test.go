package protocol

import (
	"bytes"
	"errors"
	"testing"
)

func TestBatchCodecRoundTrip(t *testing.T) {
	msgs := [][]byte{[]byte("alpha"), {}, bytes.Repeat([]byte("b"), 5000)}
	for _, codec := range []Codec{CodecNone, CodecS2, CodecZstd} {
		t.Run(codec.String(), func(t *testing.T) {
			b := AppendBatchCodec(nil, codec, msgs...)
			bt, n, err := ParseBatch(b)
			if err != nil || n != len(b) {
				t.Fatalf("ParseBatch: n=%d err=%v", n, err)
			}
			if err := bt.Verify(); err != nil {
				t.Fatal(err)
			}
			body, err := bt.DecodeBody()
			if err != nil {
				t.Fatal(err)
			}
			var got [][]byte
			if err := Messages(body, bt.Count, 0, func(_ int64, m []byte) error {
				got = append(got, m)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(msgs) {
				t.Fatalf("got %d messages, want %d", len(got), len(msgs))
			}
			for i := range msgs {
				if !bytes.Equal(got[i], msgs[i]) {
					t.Fatalf("message %d differs", i)
				}
			}
		})
	}
}

func TestDecodeBodyRejectsBadBodies(t *testing.T) {
	for _, codec := range []Codec{CodecS2, CodecZstd} {
		t.Run(codec.String(), func(t *testing.T) {
			bt, _, err := ParseBatch(AppendBatchCodec(nil, codec, []byte("hello"), []byte("world")))
			if err != nil {
				t.Fatal(err)
			}
			wrongSize := bt
			wrongSize.RawSize++
			if _, err := wrongSize.DecodeBody(); !errors.Is(err, ErrBadBody) {
				t.Fatalf("RawSize off by one: err = %v, want ErrBadBody", err)
			}
			garbage := bt
			garbage.Body = bytes.Repeat([]byte{0xff}, len(bt.Body))
			if _, err := garbage.DecodeBody(); !errors.Is(err, ErrBadBody) {
				t.Fatalf("garbage body: err = %v, want ErrBadBody", err)
			}
		})
	}
	bt := Batch{Codec: 9}
	if _, err := bt.DecodeBody(); !errors.Is(err, ErrBadCodec) {
		t.Fatalf("unknown codec: err = %v", err)
	}
}

// TestBatchCodec: BatchCodec reads the codec field of a batch header, and
// says CodecNone for bytes too short to be one.
func TestBatchCodec(t *testing.T) {
	for _, c := range []Codec{CodecNone, CodecS2, CodecZstd} {
		b := AppendBatchCodec(nil, c, []byte("m"))
		if got := BatchCodec(b); got != c {
			t.Errorf("BatchCodec of a %v batch: %v", c, got)
		}
		if got := BatchCodec(b[:MinBatchHeaderSize-1]); got != CodecNone {
			t.Errorf("BatchCodec of a short %v header: %v", c, got)
		}
	}
}
