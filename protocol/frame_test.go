package protocol

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPeekFrame(t *testing.T) {
	ping := AppendPingRequest(nil, 1)               // 12 bytes
	two := AppendPingRequest(slices.Clone(ping), 2) // two frames back to back
	cases := []struct {
		name     string
		b        []byte
		max      int
		wantSize int
		wantErr  error
	}{
		{"empty", nil, 0, 0, ErrShortFrame},
		{"one byte", []byte{8}, 0, 0, ErrShortFrame},
		{"three bytes", []byte{8, 0, 0}, 0, 0, ErrShortFrame},
		{"length only", []byte{8, 0, 0, 0}, 0, 12, ErrShortFrame},
		{"partial header", ping[:7], 0, 12, ErrShortFrame},
		{"one byte short", ping[:11], 0, 12, ErrShortFrame},
		{"whole", ping, 0, 12, nil},
		{"first of two", two, 0, 12, nil},
		{"length zero", []byte{0, 0, 0, 0}, 0, 4, ErrMalformed},
		{"length seven", []byte{7, 0, 0, 0, 1, 1, 0}, 0, 11, ErrMalformed},
		{"at the limit", ping, 8, 12, nil},
		{"over the limit", ping, 7, 12, ErrFrameTooLarge},
		// The limit is checked from the length field alone, before the
		// frame is buffered.
		{"over default limit", unhex(t, "01000004"), 0, DefaultMaxFrameSize + 5, ErrFrameTooLarge},
		{"at default limit", unhex(t, "00000004"), 0, DefaultMaxFrameSize + 4, ErrShortFrame},
		{"max uint32", unhex(t, "ffffffff"), 0, int(min(uint64(1<<32+3), uint64(maxInt))), ErrFrameTooLarge},
	}
	for _, c := range cases {
		size, err := PeekFrame(c.b, c.max)
		if size != c.wantSize || !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
			t.Errorf("%s: PeekFrame = %d, %v; want %d, %v", c.name, size, err, c.wantSize, c.wantErr)
		}
	}
	if CodeOf(ErrFrameTooLarge) != CodeFrameTooLarge {
		t.Error("ErrFrameTooLarge does not map to CodeFrameTooLarge")
	}
}

// TestStreamOneByteAtATime feeds a stream of frames one byte at a time, as
// a server's read loop would see it.
func TestStreamOneByteAtATime(t *testing.T) {
	var stream []byte
	var want []uint32
	for i, g := range goldenFrames(t) {
		if g.resp {
			continue
		}
		stream = append(stream, g.frame...)
		stream = AppendPingRequest(stream, uint32(1000+i))
		want = append(want, 42, uint32(1000+i))
	}
	var buf []byte
	var got []uint32
	for _, c := range stream {
		buf = append(buf, c)
		for {
			size, err := PeekFrame(buf, 0)
			if errors.Is(err, ErrShortFrame) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			h, p, err := ParseRequestHeader(buf[:size])
			if err != nil {
				t.Fatal(err)
			}
			if err := checkRequest(t, h.Op, p); err != nil {
				t.Fatal(err)
			}
			got = append(got, h.CorrID)
			buf = buf[size:]
		}
	}
	if len(buf) != 0 || !slices.Equal(got, want) {
		t.Errorf("left %d bytes, correlation ids %v, want %v", len(buf), got, want)
	}
}

func TestParseRequestHeader(t *testing.T) {
	good := AppendConsumeRequest(nil, 0xdeadbeef, "t", 0, 0, 0, 0)
	h, p, err := ParseRequestHeader(good)
	if err != nil || h.Op != OpConsume || h.CorrID != 0xdeadbeef || h.Version != Version ||
		int(h.Length) != len(good)-FrameLengthSize || len(p) != len(good)-HeaderSize {
		t.Fatalf("%+v, %d payload bytes, %v", h, len(p), err)
	}

	patch := func(off int, v ...byte) []byte {
		b := slices.Clone(good)
		copy(b[off:], v)
		return b
	}
	cases := []struct {
		name       string
		frame      []byte
		want       error
		wantFilled bool // header fields set despite the error
	}{
		{"empty", nil, ErrShortFrame, false},
		{"short header", good[:HeaderSize-1], ErrShortFrame, false},
		{"short payload", good[:len(good)-1], ErrShortFrame, true},
		{"trailing byte", append(slices.Clone(good), 0), ErrMalformed, true},
		{"length too small", patch(frameLengthOff, 7, 0, 0, 0), ErrMalformed, true},
		{"version 0", patch(frameVersionOff, 0), ErrUnsupportedVersion, true},
		{"version 2", patch(frameVersionOff, 2), ErrUnsupportedVersion, true},
		// A future version may use the reserved bits: the version is checked first.
		{"version 2, reserved set", patch(frameVersionOff, 2, byte(OpConsume), 1), ErrUnsupportedVersion, true},
		{"reserved set", patch(frameReservedOff, 0, 1), ErrMalformed, true},
		{"op 0", patch(frameOpOff, 0), ErrUnknownOp, true},
		{"op past the last", patch(frameOpOff, byte(opMax+1)), ErrUnknownOp, true},
		{"op 255", patch(frameOpOff, 255), ErrUnknownOp, true},
	}
	for _, c := range cases {
		h, p, err := ParseRequestHeader(c.frame)
		if !errors.Is(err, c.want) || p != nil {
			t.Errorf("%s: error %v, payload %x; want %v", c.name, err, p, c.want)
		}
		if filled := h.CorrID == 0xdeadbeef; filled != c.wantFilled {
			t.Errorf("%s: header %+v, filled %v, want %v", c.name, h, filled, c.wantFilled)
		}
	}
	if CodeOf(ErrUnsupportedVersion) != CodeUnsupportedVersion || CodeOf(ErrUnknownOp) != CodeUnknownOp ||
		CodeOf(errReservedHeader) != CodeMalformedRequest {
		t.Error("header errors map to the wrong codes")
	}
}

func TestParseResponseHeader(t *testing.T) {
	ok := AppendProduceResponse(nil, 77, 1, 1)
	h, p, err := ParseResponseHeader(ok)
	if err != nil || h.Op != OpProduce || h.Code != CodeOK || h.CorrID != 77 || len(p) != produceRespSize {
		t.Fatalf("%+v %x %v", h, p, err)
	}
	// A successful response in another version cannot be read...
	v2 := slices.Clone(ok)
	v2[frameVersionOff] = 2
	if h, _, err := ParseResponseHeader(v2); !errors.Is(err, ErrUnsupportedVersion) || h.CorrID != 77 {
		t.Errorf("version 2 success: %+v %v", h, err)
	}
	// ...but an error response can: its layout is the same in every version.
	e := AppendErrorResponse(nil, OpProduce, 77, CodeUnsupportedVersion, "speak version 3")
	e[frameVersionOff] = 3
	h, p, err = ParseResponseHeader(e)
	if err != nil || h.Code != CodeUnsupportedVersion || h.Version != 3 {
		t.Fatalf("version 3 error: %+v %v", h, err)
	}
	if msg, err := ParseErrorResponse(p); err != nil || string(msg) != "speak version 3" {
		t.Errorf("message %q, %v", msg, err)
	}
	// Unknown ops and codes are passed through: the client matches them by
	// correlation id and reports what it got.
	odd := AppendErrorResponse(nil, Op(200), 1, Code(999), "future")
	if h, _, err := ParseResponseHeader(odd); err != nil || h.Op != 200 || h.Code != 999 {
		t.Errorf("odd response: %+v %v", h, err)
	}
	for n := 0; n < len(ok); n++ {
		if _, _, err := ParseResponseHeader(ok[:n]); !errors.Is(err, ErrShortFrame) {
			t.Errorf("cut to %d: %v", n, err)
		}
	}
	if _, _, err := ParseResponseHeader(append(slices.Clone(ok), 1)); !errors.Is(err, ErrMalformed) {
		t.Errorf("trailing byte: %v", err)
	}
}

func TestErrorResponse(t *testing.T) {
	// CodeOK is not an error code.
	f := AppendErrorResponse(nil, OpPing, 1, CodeOK, "oops")
	if h, _, _ := ParseResponseHeader(f); h.Code != CodeUnknown {
		t.Errorf("CodeOK sent as %v", h.Code)
	}
	// Long messages are cut at MaxErrorMessageLen, at a rune boundary.
	long := strings.Repeat("a", MaxErrorMessageLen-1) + "é" + "tail"
	f = AppendErrorResponse(nil, OpPing, 1, CodeUnknown, long)
	_, p, err := ParseResponseHeader(f)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := ParseErrorResponse(p)
	if err != nil || len(msg) != MaxErrorMessageLen-1 || !utf8.Valid(msg) {
		t.Errorf("cut message: %d bytes, valid UTF-8 %v, %v", len(msg), utf8.Valid(msg), err)
	}
	exact := strings.Repeat("b", MaxErrorMessageLen)
	_, p, _ = ParseResponseHeader(AppendErrorResponse(nil, OpPing, 1, CodeUnknown, exact))
	if msg, err := ParseErrorResponse(p); err != nil || string(msg) != exact {
		t.Errorf("message of exactly the limit: %d bytes, %v", len(msg), err)
	}
	// A decoder refuses a message over the limit.
	over := appendString(nil, exact+"b")
	if _, err := ParseErrorResponse(over); !errors.Is(err, ErrMalformed) {
		t.Errorf("message over the limit: %v", err)
	}
	if _, err := ParseErrorResponse(nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("empty payload: %v", err)
	}
}

func TestCodes(t *testing.T) {
	seen := map[string]bool{}
	for c := CodeOK; c <= codeMax; c++ {
		if c == 20 || c == 21 { // given to consumer groups, defined on their own
			continue
		}
		s := c.String()
		if s == "" || seen[s] || strings.HasPrefix(s, "code ") {
			t.Errorf("code %d has name %q", c, s)
		}
		seen[s] = true
	}
	if got := Code(1000).String(); got != "code 1000" {
		t.Errorf("unknown code: %q", got)
	}
	// The numbers are part of the wire format.
	pinned := map[Code]uint16{
		CodeOK: 0, CodeUnknown: 1, CodeUnsupportedVersion: 2, CodeUnknownOp: 3,
		CodeMalformedRequest: 4, CodeFrameTooLarge: 5, CodeTopicNotFound: 6,
		CodeTopicExists: 7, CodeInvalidTopic: 8, CodeOffsetOutOfRange: 9,
		CodeBadBatch: 10, CodeUnreadableRange: 11, CodeTopicReadOnly: 12,
		CodeShuttingDown: 13, CodeInvalidArgument: 14, CodeLimitReached: 15,
		CodeNoSpace: 16, CodeIdleTimeout: 17, CodeUnauthenticated: 18, CodeForbidden: 19,
		CodeOutOfOrderSequence: 22, CodeOffsetMismatch: 23, CodeImportRefused: 24,
	}
	for c, n := range pinned {
		if uint16(c) != n {
			t.Errorf("%v = %d, want %d", c, c, n)
		}
	}
	ops := map[Op]uint8{OpPing: 1, OpCreateTopic: 2, OpDeleteTopic: 3, OpListTopics: 4,
		OpTopicInfo: 5, OpProduce: 6, OpConsume: 7, OpTruncate: 8, OpHello: 9, OpOffsetAt: 10, OpImport: 16}
	for op, n := range ops {
		if uint8(op) != n || !op.Valid() || op.String() == "unknown op" {
			t.Errorf("op %v = %d, want %d", op, op, n)
		}
	}
	if Op(0).Valid() || (opMax + 1).Valid() || (opMax+1).String() != "unknown op" {
		t.Errorf("ops 0 and %d must be invalid", opMax+1)
	}
}

func TestCodeOfAndError(t *testing.T) {
	cases := []struct {
		err  error
		want Code
	}{
		{nil, CodeOK},
		{errors.New("disk on fire"), CodeUnknown},
		{ErrShortFrame, CodeMalformedRequest},
		{errShortPayload, CodeMalformedRequest},
		{errTopicDots, CodeInvalidTopic},
		{errLongRegex, CodeInvalidArgument},
		{ErrCRCMismatch, CodeBadBatch},
		{ErrShortBatch, CodeBadBatch},
		{&Error{Code: CodeTopicReadOnly, Message: "x"}, CodeTopicReadOnly},
	}
	for _, c := range cases {
		if got := CodeOf(c.err); got != c.want {
			t.Errorf("CodeOf(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	e := &Error{Code: CodeTopicNotFound, Message: "no topic orders"}
	if e.Error() != "protocol: topic not found: no topic orders" {
		t.Errorf("Error() = %q", e.Error())
	}
	if (&Error{Code: CodeShuttingDown}).Error() != "protocol: shutting down" {
		t.Errorf("Error() without message = %q", (&Error{Code: CodeShuttingDown}).Error())
	}
	if !errors.Is(e, &Error{Code: CodeTopicNotFound}) || errors.Is(e, &Error{Code: CodeTopicExists}) {
		t.Error("Error.Is must compare codes")
	}
	if !strings.HasPrefix(errTopicByte.Error(), "protocol: invalid topic name: ") {
		t.Errorf("detail error text %q", errTopicByte.Error())
	}
}
