package protocol

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

// goldenBatchHex pins the batch layout of doc.go: two messages "a" and "bc",
// base offset 7, append time 9.
const goldenBatchHex = "25000000" + // length 37: 32 + 5 body bytes
	"0700000000000000" + // base offset 7
	"0900000000000000" + // append time 9
	"0cb2abcd" + // crc32c of the bytes after it
	"01" + "00" + "0000" + // magic 1, codec none, flags 0
	"02000000" + // count 2
	"05000000" + // raw size 5
	"0161" + "026263" // "a", "bc"

func TestBatchGolden(t *testing.T) {
	b := AppendBatch(nil, []byte("a"), []byte("bc"))
	StampBatch(b, 7, 9)
	if got := hex.EncodeToString(b); got != goldenBatchHex {
		t.Fatalf("batch bytes\n got %s\nwant %s", got, goldenBatchHex)
	}
	bt, n, err := ParseBatch(b)
	if err != nil || n != len(b) {
		t.Fatalf("parse: n=%d err=%v", n, err)
	}
	if err := bt.Validate(); err != nil {
		t.Fatal(err)
	}
	if bt.BaseOffset != 7 || bt.AppendTime != 9 || bt.Count != 2 || bt.RawSize != 5 || bt.Codec != CodecNone {
		t.Fatalf("fields %+v", bt)
	}
	var got []string
	err = Messages(bt.Body, bt.Count, bt.BaseOffset, func(off int64, m []byte) error {
		got = append(got, string(m))
		if off != 7+int64(len(got)-1) {
			t.Errorf("offset %d", off)
		}
		return nil
	})
	if err != nil || len(got) != 2 || got[0] != "a" || got[1] != "bc" {
		t.Fatalf("messages %q %v", got, err)
	}
	if BatchAppendTime(b) != 9 {
		t.Fatal("append time")
	}
}

func TestBatchStampKeepsCRC(t *testing.T) {
	b := AppendBatch(nil, []byte("hello"))
	StampBatch(b, 1<<40, -5)
	bt, _, err := ParseBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := bt.Verify(); err != nil {
		t.Fatal(err)
	}
}

func TestBatchErrors(t *testing.T) {
	good := AppendBatch(nil, []byte("one"), []byte(""), []byte("three"))
	for i := 0; i < len(good); i++ {
		if _, _, err := ParseBatch(good[:i]); !errors.Is(err, ErrShortBatch) && i >= 4 {
			t.Fatalf("cut at %d: %v", i, err)
		} else if err == nil {
			t.Fatalf("cut at %d parsed", i)
		}
	}
	mutate := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"length too small", mutate(func(b []byte) { b[0] = 10 }), ErrBadLength},
		{"magic", mutate(func(b []byte) { b[batchMagicOff] = 9 }), ErrBadMagic},
		{"codec", mutate(func(b []byte) { b[batchCodecOff] = 3 }), ErrBadCodec},
		{"flags", mutate(func(b []byte) { b[batchFlagsOff] = 1 }), ErrBadFlags},
		{"zero count", mutate(func(b []byte) { b[batchCountOff] = 0 }), ErrBadCount},
		{"raw size", mutate(func(b []byte) { b[batchRawSizeOff]++ }), ErrBadCount},
	}
	for _, c := range cases {
		if _, _, err := ParseBatch(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	if _, _, err := ParseBatchLimit(good, len(good)-1); !errors.Is(err, ErrBatchTooLarge) {
		t.Errorf("limit: %v", err)
	}
	// A flipped body byte fails the CRC; a wrong count (CRC recomputed) fails validation.
	flipped := mutate(func(b []byte) { b[len(b)-1] ^= 1 })
	bt, _, err := ParseBatch(flipped)
	if err != nil {
		t.Fatal(err)
	}
	if err := bt.Validate(); !errors.Is(err, ErrCRCMismatch) {
		t.Errorf("flip: %v", err)
	}
	wrongCount := bytes.Clone(good)
	SealBatch(wrongCount, CodecNone, 2, len(good)-MinBatchHeaderSize)
	bt, _, err = ParseBatch(wrongCount)
	if err != nil {
		t.Fatal(err)
	}
	if err := bt.Validate(); !errors.Is(err, ErrBadCount) {
		t.Errorf("count: %v", err)
	}
}

func FuzzParseBatch(f *testing.F) {
	f.Add(AppendBatch(nil, []byte("a"), []byte("bc")))
	f.Add(AppendBatch(nil, make([]byte, 300)))
	f.Add([]byte{0x20, 0, 0, 0})
	f.Add(AppendBatchMeta(nil, BatchMeta{ProducerID: 3, Sequence: 9}, []byte("a"), []byte("bc")))
	f.Add(AppendBatchMeta(nil, BatchMeta{Headers: true},
		AppendHeaders(nil, []Header{{Key: []byte("k"), Value: []byte("v")}}, []byte("a")), AppendHeaders(nil, nil, nil)))
	f.Fuzz(func(t *testing.T, b []byte) {
		bt, n, err := ParseBatchLimit(b, 1<<20)
		if err != nil {
			return
		}
		if n < MinBatchHeaderSize || n > len(b) || len(bt.Raw) != n {
			t.Fatalf("bad size %d of %d", n, len(b))
		}
		if err := bt.Validate(); err != nil {
			return
		}
		if bt.Codec != CodecNone {
			return
		}
		// The messages of a valid uncompressed batch survive a re-encoding.
		var msgs [][]byte
		if err := Messages(bt.Body, bt.Count, 0, func(_ int64, m []byte) error {
			msgs = append(msgs, m)
			return nil
		}); err != nil {
			t.Fatalf("valid batch has bad messages: %v", err)
		}
		if bt.Flags&FlagHeaders != 0 {
			// Every message of a valid batch with headers splits, and
			// its headers and value encode back to the same bytes.
			for i, m := range msgs {
				hs, v, err := SplitHeaders(nil, m)
				if err != nil {
					t.Fatalf("message %d of a valid batch: %v", i, err)
				}
				if CheckHeaders(hs) != nil || !bytes.Equal(AppendHeaders(nil, hs, v), m) {
					t.Fatalf("message %d does not re-encode", i)
				}
			}
		}
		re := AppendBatchMeta(nil, bt.Meta(), msgs...)
		rt, _, err := ParseBatch(re)
		if err != nil || rt.Validate() != nil || rt.Count != len(msgs) || rt.Meta() != bt.Meta() {
			t.Fatalf("re-encoded batch invalid: %v", err)
		}
		i := 0
		_ = Messages(rt.Body, rt.Count, 0, func(_ int64, m []byte) error {
			if !bytes.Equal(m, msgs[i]) {
				t.Fatalf("message %d differs after re-encoding", i)
			}
			i++
			return nil
		})
	})
}
