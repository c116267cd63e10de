package protocol

import (
	"errors"
	"testing"
)

// TestImportRequestOrder: batches that do not follow each other, or a
// first batch that does not hold the offset, parse filled in with an
// error wrapping ErrInvalidArgument; a bad batch or unknown flags do not
// parse at all.
func TestImportRequestOrder(t *testing.T) {
	stamped := func(base, at int64, msgs ...string) []byte {
		bs := make([][]byte, len(msgs))
		for i, m := range msgs {
			bs[i] = []byte(m)
		}
		b := AppendBatch(nil, bs...)
		StampBatch(b, base, at)
		return b
	}
	cat := func(bs ...[]byte) []byte {
		var out []byte
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	a, b := stamped(10, 100, "x", "y"), stamped(12, 100, "z")
	cases := []struct {
		name    string
		offset  int64
		batches []byte
		want    error
	}{
		{"in order", 10, cat(a, b), nil},
		{"offset inside the first batch", 11, cat(a, b), nil},
		{"no batches", 7, nil, nil},
		{"offset before the first batch", 9, cat(a, b), errImportFirst},
		{"offset after the first batch", 12, cat(a, b), errImportFirst},
		{"gap", 10, cat(a, stamped(13, 100, "z")), errImportGap},
		{"time going back", 10, cat(a, stamped(12, 99, "z")), errImportTime},
		{"negative offset", -1, nil, errImportOffset},
	}
	for _, c := range cases {
		frame := AppendImportRequest(nil, 1, "orders", 0, c.offset, c.batches)
		req, err := ParseImportRequest(frame[HeaderSize:])
		if err != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if c.want != nil && (!errors.Is(err, ErrInvalidArgument) || string(req.Topic) != "orders" || req.Offset != c.offset) {
			t.Errorf("%s: %v, request %+v: want ErrInvalidArgument, filled in", c.name, err, req)
		}
	}
	frame := AppendImportRequest(nil, 1, "orders", 0, 10, cat(a, b[:len(b)-1]))
	if _, err := ParseImportRequest(frame[HeaderSize:]); !errors.Is(err, ErrShortBatch) {
		t.Errorf("cut batch: %v", err)
	}
	frame = AppendImportRequest(nil, 1, "orders", 2, 10, a)
	if _, err := ParseImportRequest(frame[HeaderSize:]); !errors.Is(err, ErrMalformed) {
		t.Errorf("unknown flags: %v", err)
	}
}
