package bench

import (
	"bytes"
	"testing"
)

func TestPayloadRoundTrip(t *testing.T) {
	for _, size := range []int{HeaderSize, HeaderSize + 1, 100, 1024, fillPoolSize + 100} {
		for _, vary := range []bool{false, true} {
			pay := newPayload(size, vary)
			m := pay.newMessage()
			for seq := range uint64(3) {
				pay.stamp(m, 7, seq, int64(1000+seq))
				if !verify(m, size) {
					t.Fatalf("size %d vary %v seq %d: stamped message fails verify", size, vary, seq)
				}
				h, ok := parseHeader(m)
				if !ok || h.producer != 7 || h.seq != seq || h.sendNs != int64(1000+seq) {
					t.Fatalf("size %d: header %+v", size, h)
				}
			}
			if verify(m, size+1) || verify(m[:size-1], size) {
				t.Fatalf("size %d: a wrong length verifies", size)
			}
			for i := 0; i < size; i += max(1, size/17) {
				if i >= hdrSumOff && i < headerSize {
					continue
				}
				m[i] ^= 0x10
				if verify(m, size) {
					t.Fatalf("size %d vary %v: bit flip at byte %d not detected", size, vary, i)
				}
				m[i] ^= 0x10
			}
		}
	}
}

// With compression on, fillers differ between messages.
func TestPayloadVaries(t *testing.T) {
	pay := newPayload(200, true)
	a, b := pay.newMessage(), pay.newMessage()
	pay.stamp(a, 1, 0, 0)
	pay.stamp(b, 1, 1, 0)
	if bytes.Equal(a[headerSize:], b[headerSize:]) {
		t.Fatal("fillers of two messages are equal with vary on")
	}
	fixed := newPayload(200, false)
	c, d := fixed.newMessage(), fixed.newMessage()
	fixed.stamp(c, 1, 0, 0)
	fixed.stamp(d, 1, 1, 0)
	if !bytes.Equal(c[headerSize:], d[headerSize:]) {
		t.Fatal("fillers differ with vary off")
	}
}

func TestParseHeaderShort(t *testing.T) {
	if _, ok := parseHeader(make([]byte, HeaderSize-1)); ok {
		t.Fatal("short header parsed")
	}
}
