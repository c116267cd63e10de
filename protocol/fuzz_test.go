package protocol

import (
	"errors"
	"testing"
)

// Fuzz targets for every frame decoder. Each checks that a decoder never
// panics, that what it accepts encodes back to the same bytes, and that what
// it refuses maps to a specific wire code. Run one with, for example:
//
//	go test -run '^$' -fuzz '^FuzzParseRequest$' -fuzztime 30s ./protocol

// addGoldenSeeds adds the golden frames (resp selects responses or requests)
// to f's corpus: whole frames when payloads is false, else the payloads of
// frames of the given ops (all ops when none is given).
func addGoldenSeeds(f *testing.F, resp, payloads bool, ops ...Op) {
	for _, g := range goldenFrames(f) {
		if g.resp != resp {
			continue
		}
		if !payloads {
			f.Add(g.frame)
			continue
		}
		if len(ops) > 0 && !containsOp(ops, g.op) {
			continue
		}
		if resp && g.frame[frameCodeOff] != 0 {
			continue
		}
		f.Add(g.frame[HeaderSize:])
	}
}

func containsOp(ops []Op, op Op) bool {
	for _, o := range ops {
		if o == op {
			return true
		}
	}
	return false
}

// FuzzParseFrame checks PeekFrame and the header decoders on arbitrary bytes
// and limits.
func FuzzParseFrame(f *testing.F) {
	for _, g := range goldenFrames(f) {
		f.Add(g.frame, uint32(0))
		f.Add(g.frame[:len(g.frame)/2], uint32(len(g.frame)-5))
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, uint32(1<<20))
	f.Fuzz(func(t *testing.T, b []byte, limit uint32) {
		lim := int(limit)
		size, err := PeekFrame(b, lim)
		if lim <= 0 {
			lim = DefaultMaxFrameSize
		}
		switch {
		case err == nil:
			if size < HeaderSize || size > len(b) || size-FrameLengthSize > lim {
				t.Fatalf("PeekFrame accepted size %d of %d bytes, limit %d", size, len(b), lim)
			}
		case errors.Is(err, ErrShortFrame):
			if (len(b) < FrameLengthSize) != (size == 0) || (size != 0 && size <= len(b)) {
				t.Fatalf("ErrShortFrame with size %d of %d bytes", size, len(b))
			}
			if size != 0 && size-FrameLengthSize > lim {
				t.Fatalf("ErrShortFrame for a frame over the limit: %d > %d", size, lim)
			}
		case errors.Is(err, ErrFrameTooLarge):
			if size-FrameLengthSize <= lim {
				t.Fatalf("ErrFrameTooLarge for size %d, limit %d", size, lim)
			}
		case errors.Is(err, ErrMalformed):
			if size >= HeaderSize {
				t.Fatalf("ErrMalformed for size %d", size)
			}
		default:
			t.Fatalf("unexpected error %v", err)
		}
		// The header decoders do not know the limit: they may accept a
		// frame that PeekFrame finds too large.
		whole := (err == nil || errors.Is(err, ErrFrameTooLarge)) && size == len(b)
		rh, rp, rerr := ParseRequestHeader(b)
		if rerr == nil {
			if !whole || len(rp) != int(rh.Length)-8 || !rh.Op.Valid() || rh.Version != Version {
				t.Fatalf("request header %+v accepted with PeekFrame %d, %v", rh, size, err)
			}
		}
		sh, sp, serr := ParseResponseHeader(b)
		if serr == nil && (!whole || len(sp) != int(sh.Length)-8) {
			t.Fatalf("response header %+v accepted with PeekFrame %d, %v", sh, size, err)
		}
		if err == nil && size == len(b) && (rerr != nil || serr != nil) {
			// A whole frame fails header parsing only for its contents.
			for _, e := range []error{rerr, serr} {
				if e != nil && !errors.Is(e, ErrMalformed) && !errors.Is(e, ErrUnsupportedVersion) && !errors.Is(e, ErrUnknownOp) {
					t.Fatalf("whole frame: %v", e)
				}
			}
		}
	})
}

// FuzzParseRequest parses whole request frames as a server does.
func FuzzParseRequest(f *testing.F) {
	addGoldenSeeds(f, false, false)
	f.Fuzz(func(t *testing.T, frame []byte) {
		if _, err := PeekFrame(frame, 0); err != nil {
			return
		}
		h, p, err := ParseRequestHeader(frame)
		if err != nil {
			if c := CodeOf(err); c == CodeOK || c == CodeUnknown {
				t.Fatalf("header error %v maps to %v", err, c)
			}
			return
		}
		checkRequest(t, h.Op, p)
	})
}

// FuzzParseResponse parses whole response frames as a client does.
func FuzzParseResponse(f *testing.F) {
	addGoldenSeeds(f, true, false)
	f.Fuzz(func(t *testing.T, frame []byte) {
		if _, err := PeekFrame(frame, 0); err != nil {
			return
		}
		h, p, err := ParseResponseHeader(frame)
		if err != nil {
			return
		}
		checkResponse(t, h.Op, h.Code, p)
	})
}

// fuzzRequest fuzzes the payload decoder of op alone.
func fuzzRequest(f *testing.F, op Op) {
	addGoldenSeeds(f, false, true, op)
	f.Fuzz(func(t *testing.T, payload []byte) { checkRequest(t, op, payload) })
}

// fuzzResponse fuzzes the payload decoder of a successful op response alone.
func fuzzResponse(f *testing.F, op Op) {
	addGoldenSeeds(f, true, true, op)
	f.Fuzz(func(t *testing.T, payload []byte) { checkResponse(t, op, CodeOK, payload) })
}

func FuzzParseTopicRequest(f *testing.F)         { fuzzRequest(f, OpCreateTopic) }
func FuzzParseListTopicsRequest(f *testing.F)    { fuzzRequest(f, OpListTopics) }
func FuzzParseProduceRequest(f *testing.F)       { fuzzRequest(f, OpProduce) }
func FuzzParseConsumeRequest(f *testing.F)       { fuzzRequest(f, OpConsume) }
func FuzzParseTruncateRequest(f *testing.F)      { fuzzRequest(f, OpTruncate) }
func FuzzParseHelloRequest(f *testing.F)         { fuzzRequest(f, OpHello) }
func FuzzParseOffsetAtRequest(f *testing.F)      { fuzzRequest(f, OpOffsetAt) }
func FuzzParseImportRequest(f *testing.F)        { fuzzRequest(f, OpImport) }
func FuzzParseTopicReplicasRequest(f *testing.F) { fuzzRequest(f, OpTopicReplicas) }

func FuzzParseListTopicsResponse(f *testing.F) { fuzzResponse(f, OpListTopics) }
func FuzzParseTopicInfoResponse(f *testing.F)  { fuzzResponse(f, OpTopicInfo) }
func FuzzParseProduceResponse(f *testing.F)    { fuzzResponse(f, OpProduce) }
func FuzzParseConsumeResponse(f *testing.F)    { fuzzResponse(f, OpConsume) }
func FuzzParseTruncateResponse(f *testing.F)   { fuzzResponse(f, OpTruncate) }
func FuzzParseHelloResponse(f *testing.F)      { fuzzResponse(f, OpHello) }
func FuzzParseOffsetAtResponse(f *testing.F)   { fuzzResponse(f, OpOffsetAt) }
func FuzzParseImportResponse(f *testing.F)     { fuzzResponse(f, OpImport) }

// FuzzParseErrorResponse fuzzes the error payload decoder.
func FuzzParseErrorResponse(f *testing.F) {
	f.Add(AppendErrorResponse(nil, OpPing, 1, CodeUnknown, "boom")[HeaderSize:])
	f.Add(appendString(nil, "é"))
	f.Fuzz(func(t *testing.T, payload []byte) {
		checkResponse(t, OpPing, CodeTopicNotFound, payload)
	})
}
