package protocol

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

// goldenBatchV2Hex pins the version 2 layout of doc.go: producer 5,
// sequence 3, headers, two messages: "a" with header ct=json, and "bc"
// with none; base offset 7, append time 9.
const goldenBatchV2Hex = "3f000000" + // length 63: 48 + 15 body bytes
	"0700000000000000" + // base offset 7
	"0900000000000000" + // append time 9
	"c56e1aef" + // crc32c of the bytes after it
	"02" + "00" + "0300" + // magic 2, codec none, flags producer|headers
	"02000000" + // count 2
	"0f000000" + // raw size 15
	"0500000000000000" + // producer id 5
	"0300000000000000" + // sequence 3
	"0a" + "01" + "02" + "6374" + "04" + "6a736f6e" + "61" + // 10 bytes: 1 header, "ct", "json", value "a"
	"03" + "00" + "6263" // 3 bytes: no header, value "bc"

func TestBatchV2Golden(t *testing.T) {
	hs := []Header{{Key: []byte("ct"), Value: []byte("json")}}
	b := AppendBatchMeta(nil, BatchMeta{ProducerID: 5, Sequence: 3, Headers: true},
		AppendHeaders(nil, hs, []byte("a")), AppendHeaders(nil, nil, []byte("bc")))
	StampBatch(b, 7, 9)
	if got := hex.EncodeToString(b); got != goldenBatchV2Hex {
		t.Fatalf("batch bytes\n got %s\nwant %s", got, goldenBatchV2Hex)
	}
	bt, n, err := ParseBatch(b)
	if err != nil || n != len(b) {
		t.Fatalf("parse: n=%d err=%v", n, err)
	}
	if err := bt.Validate(); err != nil {
		t.Fatal(err)
	}
	if bt.Magic != BatchMagic || bt.ProducerID != 5 || bt.Sequence != 3 || bt.Flags != FlagProducer|FlagHeaders || bt.BaseOffset != 7 {
		t.Fatalf("parsed %+v", bt)
	}
	var got []string
	err = Messages(bt.Body, bt.Count, 0, func(_ int64, m []byte) error {
		h, v, err := SplitHeaders(nil, m)
		if err != nil {
			return err
		}
		s := string(v)
		for _, x := range h {
			s += "|" + string(x.Key) + "=" + string(x.Value)
		}
		got = append(got, s)
		return nil
	})
	if err != nil || len(got) != 2 || got[0] != "a|ct=json" || got[1] != "bc" {
		t.Fatalf("messages %q, %v", got, err)
	}
	// The same body built with AppendHeaderMessage.
	body := AppendHeaderMessage(nil, hs, []byte("a"))
	body = AppendHeaderMessage(body, nil, []byte("bc"))
	if !bytes.Equal(body, bt.Body) {
		t.Fatalf("AppendHeaderMessage body %x, want %x", body, bt.Body)
	}
}

// A version 2 batch without headers nor producer is never written: the
// zero BatchMeta gives version 1, byte for byte AppendBatch.
func TestBatchMetaZeroIsV1(t *testing.T) {
	a := AppendBatchMeta(nil, BatchMeta{}, []byte("a"), []byte("bc"))
	if !bytes.Equal(a, AppendBatch(nil, []byte("a"), []byte("bc"))) || a[batchMagicOff] != BatchMagicV1 {
		t.Fatal("zero meta is not version 1")
	}
	b := AppendBatchMeta(nil, BatchMeta{Sequence: 4, Headers: true}, AppendHeaders(nil, nil, []byte("x")))
	bt, _, err := ParseBatch(b)
	if err != nil || bt.Validate() != nil || bt.Sequence != 0 {
		t.Fatalf("sequence without producer: %+v %v", bt, err)
	}
}

func TestBatchV2Errors(t *testing.T) {
	good := AppendBatchMeta(nil, BatchMeta{ProducerID: 1, Sequence: 2}, []byte("one"))
	reseal := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"unknown flag", reseal(func(b []byte) { b[batchFlagsOff] |= 4 }), ErrBadFlags},
		{"producer flag without id", reseal(func(b []byte) { clear(b[batchProducerOff : batchProducerOff+8]) }), ErrBadFlags},
		{"id without producer flag", reseal(func(b []byte) { b[batchFlagsOff] = 0 }), ErrBadFlags},
		{"version 1 with flags", AppendBatch(nil, []byte("x"))[:0], ErrShortBatch},
		{"v2 length below its header", reseal(func(b []byte) { b[0] = 40 }), ErrBadLength},
	}
	v1 := AppendBatch(nil, []byte("x"))
	v1[batchFlagsOff] = 1
	cases = append(cases, struct {
		name string
		b    []byte
		want error
	}{"version 1 with a flag", v1, ErrBadFlags})
	for _, c := range cases {
		if _, _, err := ParseBatch(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	for i := 0; i < len(good); i++ {
		if _, _, err := ParseBatch(good[:i]); err == nil {
			t.Fatalf("cut at %d parsed", i)
		}
	}
}

func TestHeadersLimits(t *testing.T) {
	long := bytes.Repeat([]byte("k"), MaxHeaderKeyLen+1)
	for _, hs := range [][]Header{
		{{Key: nil, Value: []byte("v")}},
		{{Key: long}},
		{{Key: []byte("k"), Value: make([]byte, MaxHeaderValueLen+1)}},
		make([]Header, MaxHeaders+1),
	} {
		if err := CheckHeaders(hs); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%d headers: CheckHeaders %v", len(hs), err)
		}
		// Encoded anyway, a reader refuses them.
		m := AppendHeaders(nil, hs, []byte("v"))
		if _, _, err := SplitHeaders(nil, m); !errors.Is(err, ErrBadMessage) {
			t.Errorf("%d headers: SplitHeaders %v", len(hs), err)
		}
		b := AppendBatchMeta(nil, BatchMeta{Headers: true}, m)
		bt, _, err := ParseBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := bt.Validate(); !errors.Is(err, ErrBadMessage) {
			t.Errorf("%d headers: Validate %v", len(hs), err)
		}
	}
	// Cut anywhere, a header section is refused, never read past.
	m := AppendHeaders(nil, []Header{{Key: []byte("key"), Value: []byte("value")}}, nil)
	for i := range len(m) {
		if _, _, err := SplitHeaders(nil, m[:i]); err == nil {
			t.Errorf("cut at %d split", i)
		}
	}
}

// FuzzSplitHeaders checks that no input panics SplitHeaders, that what it
// accepts is within the limits and encodes back to the same bytes.
func FuzzSplitHeaders(f *testing.F) {
	f.Add(AppendHeaders(nil, []Header{{Key: []byte("ct"), Value: []byte("json")}}, []byte("a")))
	f.Add(AppendHeaders(nil, nil, []byte("a")))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, m []byte) {
		hs, v, err := SplitHeaders(nil, m)
		_, ok := skipHeaders(m)
		if (err == nil) != ok {
			t.Fatalf("SplitHeaders %v, skipHeaders %v", err, ok)
		}
		if err != nil {
			return
		}
		if CheckHeaders(hs) != nil {
			t.Fatalf("accepted headers over the limits: %d", len(hs))
		}
		if !bytes.Equal(AppendHeaders(nil, hs, v), m) {
			t.Fatal("headers do not re-encode")
		}
		if hv, err := HeaderValue(m); err != nil || !bytes.Equal(hv, v) {
			t.Fatalf("HeaderValue %q, %v; SplitHeaders %q", hv, err, v)
		}
	})
}
