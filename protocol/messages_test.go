package protocol

import (
	"bytes"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"
)

// unhex decodes a hex string, ignoring spaces, which separate fields.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

const (
	// goldenBatch is AppendBatch(nil, []byte("hi")): length, base offset,
	// append time, crc, magic, codec, flags, count, raw size, body.
	goldenBatch = "23000000 0000000000000000 0000000000000000 95576750 01 00 0000 01000000 03000000 02 6869"
	// goldenOrders is the topic "orders" as a string field.
	goldenOrders = "0600 6f7264657273"
)

type golden struct {
	name  string
	frame []byte // the encoder's output
	want  string // hex, fields separated by spaces
	resp  bool   // a response frame
	op    Op
}

// goldenFrames pins one request and one response of every kind, byte by
// byte. Header: length, version, op, reserved or code, correlation id (42).
func goldenFrames(t testing.TB) []golden {
	batch := AppendBatch(nil, []byte("hi"))
	return []golden{
		{"ping request", AppendPingRequest(nil, 42),
			"08000000 01 01 0000 2a000000", false, OpPing},
		{"ping response", AppendEmptyResponse(nil, OpPing, 42),
			"08000000 01 01 0000 2a000000", true, OpPing},
		{"create topic request", AppendCreateTopicRequest(nil, 42, "orders"),
			"10000000 01 02 0000 2a000000 " + goldenOrders, false, OpCreateTopic},
		{"topic replicas request", AppendTopicReplicasRequest(nil, 42, "orders", 3),
			"11000000 01 16 0000 2a000000 03 " + goldenOrders, false, OpTopicReplicas},
		{"create topic response", AppendEmptyResponse(nil, OpCreateTopic, 42),
			"08000000 01 02 0000 2a000000", true, OpCreateTopic},
		{"delete topic request", AppendDeleteTopicRequest(nil, 42, "orders"),
			"10000000 01 03 0000 2a000000 " + goldenOrders, false, OpDeleteTopic},
		{"delete topic response", AppendEmptyResponse(nil, OpDeleteTopic, 42),
			"08000000 01 03 0000 2a000000", true, OpDeleteTopic},
		{"list topics request", AppendListTopicsRequest(nil, 42, "ord", "^o.*s$"),
			"15000000 01 04 0000 2a000000 0300 6f7264 0600 5e6f2e2a7324", false, OpListTopics},
		{"list topics response", AppendListTopicsResponse(nil, 42, []string{"a", "orders"}),
			"17000000 01 04 0000 2a000000 02000000 0100 61 " + goldenOrders, true, OpListTopics},
		{"topic info request", AppendTopicInfoRequest(nil, 42, "orders"),
			"10000000 01 05 0000 2a000000 " + goldenOrders, false, OpTopicInfo},
		{"topic info response", AppendTopicInfoResponse(nil, 42, TopicInfoResponse{
			OldestOffset: 5000, NextOffset: 12345, Bytes: 1 << 20, Segments: 3}),
			"24000000 01 05 0000 2a000000 8813000000000000 3930000000000000 0000100000000000 03000000", true, OpTopicInfo},
		{"produce request", AppendProduceRequest(nil, 42, "orders", ProduceCreateTopic, batch),
			"39000000 01 06 0000 2a000000 0100 " + goldenOrders + " " + goldenBatch, false, OpProduce},
		{"produce request, expected offset 12345", AppendProduceRequestExpect(nil, 42, "orders", ProduceCreateTopic|ProduceExpectOffset, 12345, batch),
			"41000000 01 06 0000 2a000000 0300 3930000000000000 " + goldenOrders + " " + goldenBatch, false, OpProduce},
		{"produce response", AppendProduceResponse(nil, 42, 12345, 1),
			"14000000 01 06 0000 2a000000 3930000000000000 01000000", true, OpProduce},
		{"consume request", AppendConsumeRequest(nil, 42, "orders", -1, 100, 1<<20, 500),
			"24000000 01 07 0000 2a000000 ffffffffffffffff 64000000 00001000 f4010000 " + goldenOrders, false, OpConsume},
		{"consume response", AppendConsumeResponse(nil, 42, 12344, 12345, batch),
			"43000000 01 07 0000 2a000000 3830000000000000 3930000000000000 27000000 " + goldenBatch, true, OpConsume},
		{"empty consume response", AppendConsumeResponse(nil, 42, 12345, 12345, nil),
			"1c000000 01 07 0000 2a000000 3930000000000000 3930000000000000 00000000", true, OpConsume},
		{"truncate request", AppendTruncateRequest(nil, 42, "orders", TruncateByTime, 1700000000000000000),
			"19000000 01 08 0000 2a000000 00002a36fe9c9717 01 " + goldenOrders, false, OpTruncate},
		{"truncate response", AppendTruncateResponse(nil, 42, 5000),
			"10000000 01 08 0000 2a000000 8813000000000000", true, OpTruncate},
		{"hello request", AppendHelloRequest(nil, 42, 1, "hrqa", "t0k"),
			"14000000 01 09 0000 2a000000 01 0400 68727161 0300 74306b", false, OpHello},
		{"hello response", AppendHelloResponse(nil, 42, HelloResponse{Version: 1, Auth: true}),
			"0a000000 01 09 0000 2a000000 01 01", true, OpHello},
		{"offset at request", AppendOffsetAtRequest(nil, 42, "orders", 1700000000000000000),
			"18000000 01 0a 0000 2a000000 00002a36fe9c9717 " + goldenOrders, false, OpOffsetAt},
		{"offset at response", AppendOffsetAtResponse(nil, 42, 5000),
			"10000000 01 0a 0000 2a000000 8813000000000000", true, OpOffsetAt},
		{"import request", AppendImportRequest(nil, 42, "orders", ImportCreateTopic, 0, batch),
			"45000000 01 10 0000 2a000000 0100 0000000000000000 27000000 " + goldenOrders + " " + goldenBatch, false, OpImport},
		{"import request without batches", AppendImportRequest(nil, 42, "orders", 0, 12345, nil),
			"1e000000 01 10 0000 2a000000 0000 3930000000000000 00000000 " + goldenOrders, false, OpImport},
		{"import response", AppendImportResponse(nil, 42, ImportResponse{OldestOffset: 5000, NextOffset: 12345}),
			"18000000 01 10 0000 2a000000 8813000000000000 3930000000000000", true, OpImport},
		{"import refused response", AppendErrorResponse(nil, OpImport, 42, CodeImportRefused, "no"),
			"0c000000 01 10 1800 2a000000 0200 6e6f", true, OpImport},
		{"error response", AppendErrorResponse(nil, OpConsume, 42, CodeTopicNotFound, "no such topic"),
			"17000000 01 07 0600 2a000000 0d00 6e6f207375636820746f706963", true, OpConsume},
	}
}

func TestGoldenFrames(t *testing.T) {
	for _, g := range goldenFrames(t) {
		if want := unhex(t, g.want); !bytes.Equal(g.frame, want) {
			t.Errorf("%s:\n got %x\nwant %x", g.name, g.frame, want)
		}
	}
}

// TestRoundTrip parses every golden frame back into what made it.
func TestRoundTrip(t *testing.T) {
	for _, g := range goldenFrames(t) {
		t.Run(g.name, func(t *testing.T) {
			size, err := PeekFrame(g.frame, 0)
			if err != nil || size != len(g.frame) {
				t.Fatalf("PeekFrame = %d, %v; want %d, nil", size, err, len(g.frame))
			}
			var payload []byte
			if g.resp {
				h, p, err := ParseResponseHeader(g.frame)
				if err != nil {
					t.Fatal(err)
				}
				want := ResponseHeader{Length: uint32(len(g.frame) - 4), Version: Version, Op: g.op, CorrID: 42}
				if h.Code == CodeOK {
					if h != want {
						t.Fatalf("header %+v, want %+v", h, want)
					}
				}
				payload = p
				if err := checkResponse(t, h.Op, h.Code, payload); err != nil {
					t.Fatal(err)
				}
			} else {
				h, p, err := ParseRequestHeader(g.frame)
				if err != nil {
					t.Fatal(err)
				}
				want := RequestHeader{Length: uint32(len(g.frame) - 4), Version: Version, Op: g.op, CorrID: 42}
				if h != want {
					t.Fatalf("header %+v, want %+v", h, want)
				}
				payload = p
				if err := checkRequest(t, h.Op, payload); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// reencodeRequest parses payload as a request of op and encodes the result
// again. err is nil or the parse error; a request that parsed with every
// field set (invalid topic, long regex) is encoded too.
func reencodeRequest(op Op, payload []byte) ([]byte, error) {
	filled := func(err error) bool {
		return err == nil || errors.Is(err, ErrInvalidTopic) || errors.Is(err, ErrInvalidArgument)
	}
	const id = 7
	switch op {
	case OpPing:
		if err := ParsePingRequest(payload); err != nil {
			return nil, err
		}
		return AppendPingRequest(nil, id), nil
	case OpCreateTopic, OpDeleteTopic, OpTopicInfo:
		req, err := ParseTopicRequest(payload)
		if !filled(err) {
			return nil, err
		}
		return appendTopicRequest(nil, op, id, string(req.Topic)), err
	case OpListTopics:
		req, err := ParseListTopicsRequest(payload)
		if !filled(err) {
			return nil, err
		}
		return AppendListTopicsRequest(nil, id, string(req.Prefix), string(req.Regex)), err
	case OpProduce:
		req, err := ParseProduceRequest(payload)
		if !filled(err) {
			return nil, err
		}
		return AppendProduceRequestExpect(nil, id, string(req.Topic), req.Flags, req.Expect, req.Batch), err
	case OpConsume:
		req, err := ParseConsumeRequest(payload)
		if !filled(err) {
			return nil, err
		}
		return AppendConsumeRequest(nil, id, string(req.Topic), req.Offset, req.Limit, req.MaxBytes, req.MaxWaitMs), err
	case OpTruncate:
		req, err := ParseTruncateRequest(payload)
		if !filled(err) {
			return nil, err
		}
		return AppendTruncateRequest(nil, id, string(req.Topic), req.By, req.Before), err
	case OpHello:
		req, err := ParseHelloRequest(payload)
		if !filled(err) {
			return nil, err
		}
		return AppendHelloRequest(nil, id, req.Version, string(req.Name), string(req.Token)), err
	case OpOffsetAt:
		req, err := ParseOffsetAtRequest(payload)
		if !filled(err) {
			return nil, err
		}
		return AppendOffsetAtRequest(nil, id, string(req.Topic), req.Time), err
	case OpImport:
		req, err := ParseImportRequest(payload)
		if !filled(err) {
			return nil, err
		}
		return AppendImportRequest(nil, id, string(req.Topic), req.Flags, req.Offset, req.Batches), err
	case OpTopicReplicas:
		topic, n, err := ParseTopicReplicasRequest(payload)
		if !filled(err) {
			return nil, err
		}
		return AppendTopicReplicasRequest(nil, id, string(topic), n), err
	}
	return nil, ErrUnknownOp
}

// reencodeResponse is reencodeRequest for responses.
func reencodeResponse(op Op, code Code, payload []byte) ([]byte, error) {
	const id = 7
	if code != CodeOK {
		msg, err := ParseErrorResponse(payload)
		if err != nil {
			return nil, err
		}
		return AppendErrorResponse(nil, op, id, code, string(msg)), nil
	}
	switch op {
	case OpPing, OpCreateTopic, OpDeleteTopic:
		if err := ParseEmptyResponse(payload); err != nil {
			return nil, err
		}
		return AppendEmptyResponse(nil, op, id), nil
	case OpListTopics:
		resp, err := ParseListTopicsResponse(payload)
		if err != nil {
			return nil, err
		}
		return AppendListTopicsResponse(nil, id, resp.Strings()), nil
	case OpTopicInfo:
		resp, err := ParseTopicInfoResponse(payload)
		if err != nil {
			return nil, err
		}
		return AppendTopicInfoResponse(nil, id, resp), nil
	case OpProduce:
		resp, err := ParseProduceResponse(payload)
		if err != nil {
			return nil, err
		}
		return AppendProduceResponse(nil, id, resp.BaseOffset, resp.Count), nil
	case OpConsume:
		resp, err := ParseConsumeResponse(payload)
		if err != nil {
			return nil, err
		}
		return AppendConsumeResponse(nil, id, resp.StartOffset, resp.NextOffset, resp.Batches), nil
	case OpTruncate:
		resp, err := ParseTruncateResponse(payload)
		if err != nil {
			return nil, err
		}
		return AppendTruncateResponse(nil, id, resp.OldestOffset), nil
	case OpHello:
		resp, err := ParseHelloResponse(payload)
		if err != nil {
			return nil, err
		}
		return AppendHelloResponse(nil, id, resp), nil
	case OpOffsetAt:
		resp, err := ParseOffsetAtResponse(payload)
		if err != nil {
			return nil, err
		}
		return AppendOffsetAtResponse(nil, id, resp.Offset), nil
	case OpImport:
		resp, err := ParseImportResponse(payload)
		if err != nil {
			return nil, err
		}
		return AppendImportResponse(nil, id, resp), nil
	}
	return nil, ErrUnknownOp
}

// checkRequest parses payload as a request of op and checks that encoding
// what it parsed gives payload back, byte for byte, and that a parse error
// maps to a specific wire code; it fails t if not. It returns the parse
// error.
func checkRequest(t testing.TB, op Op, payload []byte) error {
	t.Helper()
	re, err := reencodeRequest(op, payload)
	checkParse(t, op, payload, re, err)
	return err
}

// checkResponse is checkRequest for responses.
func checkResponse(t testing.TB, op Op, code Code, payload []byte) error {
	t.Helper()
	re, err := reencodeResponse(op, code, payload)
	checkParse(t, op, payload, re, err)
	return err
}

func checkParse(t testing.TB, op Op, payload, re []byte, err error) {
	t.Helper()
	if err != nil {
		if c := CodeOf(err); c == CodeOK || c == CodeUnknown {
			t.Fatalf("%v: parse error %q maps to code %v", op, err, c)
		}
	}
	if re != nil && !bytes.Equal(re[HeaderSize:], payload) {
		t.Fatalf("%v: round trip changed the payload\n got %x\nwant %x", op, re[HeaderSize:], payload)
	}
}

// TestTruncatedFrames cuts every golden frame at every length: the frame
// decoders and, with the length field patched to match, the payload
// decoders must return an error and never panic.
func TestTruncatedFrames(t *testing.T) {
	for _, g := range goldenFrames(t) {
		for n := 0; n < len(g.frame); n++ {
			cut := slices.Clone(g.frame[:n])
			if _, err := PeekFrame(cut, 0); n >= FrameLengthSize && !errors.Is(err, ErrShortFrame) {
				t.Fatalf("%s cut to %d: PeekFrame error %v, want ErrShortFrame", g.name, n, err)
			}
			var err error
			if g.resp {
				_, _, err = ParseResponseHeader(cut)
			} else {
				_, _, err = ParseRequestHeader(cut)
			}
			if err == nil {
				t.Fatalf("%s cut to %d: header parsed", g.name, n)
			}
			if n < HeaderSize {
				continue
			}
			// The same cut with a consistent length field: only the payload
			// decoder can notice.
			addFrameLength(cut, 0, n-len(g.frame))
			if _, err := PeekFrame(cut, 0); err != nil {
				t.Fatalf("%s cut to %d, patched: PeekFrame: %v", g.name, n, err)
			}
			if g.resp {
				h, p, err := ParseResponseHeader(cut)
				if err != nil {
					t.Fatalf("%s cut to %d, patched: %v", g.name, n, err)
				}
				err = checkResponse(t, h.Op, h.Code, p)
				if err == nil {
					t.Fatalf("%s cut to %d: payload parsed", g.name, n)
				}
			} else {
				h, p, err := ParseRequestHeader(cut)
				if err != nil {
					t.Fatalf("%s cut to %d, patched: %v", g.name, n, err)
				}
				err = checkRequest(t, h.Op, p)
				if err == nil {
					t.Fatalf("%s cut to %d: payload parsed", g.name, n)
				}
			}
		}
	}
}

// TestTrailingBytes: one byte too many in the payload is an error too.
func TestTrailingBytes(t *testing.T) {
	for _, g := range goldenFrames(t) {
		frame := append(slices.Clone(g.frame), 0)
		addFrameLength(frame, 0, 1)
		var err error
		if g.resp {
			h, p, herr := ParseResponseHeader(frame)
			if herr != nil {
				t.Fatalf("%s: %v", g.name, herr)
			}
			err = checkResponse(t, h.Op, h.Code, p)
		} else {
			h, p, herr := ParseRequestHeader(frame)
			if herr != nil {
				t.Fatalf("%s: %v", g.name, herr)
			}
			err = checkRequest(t, h.Op, p)
		}
		if !errors.Is(err, ErrMalformed) && CodeOf(err) != CodeBadBatch {
			t.Errorf("%s with a trailing byte: %v", g.name, err)
		}
	}
}

func TestRequestsWithInvalidTopic(t *testing.T) {
	frames := [][]byte{
		AppendCreateTopicRequest(nil, 1, ".."),
		AppendDeleteTopicRequest(nil, 1, ""),
		AppendTopicInfoRequest(nil, 1, "a/b"),
		AppendProduceRequest(nil, 1, "../etc", 0, AppendBatch(nil, []byte("x"))),
		AppendConsumeRequest(nil, 1, strings.Repeat("a", 256), 0, 0, 0, 0),
		AppendTruncateRequest(nil, 1, "a b", TruncateByOffset, 10),
		// A topic too long for its length field is cut to 65535 bytes,
		// which is still invalid.
		AppendCreateTopicRequest(nil, 1, strings.Repeat("a", 70000)),
	}
	for i, f := range frames {
		h, p, err := ParseRequestHeader(f)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		err = checkRequest(t, h.Op, p)
		if !errors.Is(err, ErrInvalidTopic) || CodeOf(err) != CodeInvalidTopic {
			t.Errorf("%d (%v): error %v, want ErrInvalidTopic", i, h.Op, err)
		}
	}
}

func TestProduceRequestErrors(t *testing.T) {
	batch := AppendBatch(nil, []byte("hello"), []byte("world"))
	payload := func(f []byte) []byte { return f[HeaderSize:] }

	req, err := ParseProduceRequest(payload(AppendProduceRequest(nil, 1, "t", 0, batch)))
	if err != nil || string(req.Topic) != "t" || req.Flags != 0 || !bytes.Equal(req.Batch, batch) {
		t.Fatalf("got %+v, %v", req, err)
	}
	// Batch must be the frame's tail without a copy.
	frame := AppendProduceRequest(nil, 1, "t", 0, batch)
	req, _ = ParseProduceRequest(payload(frame))
	if &req.Batch[0] != &frame[len(frame)-len(batch)] {
		t.Error("Batch is not a sub-slice of the frame")
	}

	cases := []struct {
		name string
		p    []byte
		want error
	}{
		{"unknown flag", payload(AppendProduceRequest(nil, 1, "t", 0x8000, batch)), ErrMalformed},
		{"no batch", payload(AppendProduceRequest(nil, 1, "t", 0, nil)), ErrShortBatch},
		{"two batches", payload(AppendProduceRequest(nil, 1, "t", 0, append(slices.Clone(batch), batch...))), ErrMalformed},
		{"bad magic", payload(AppendProduceRequest(nil, 1, "t", 0, func() []byte {
			b := slices.Clone(batch)
			b[batchMagicOff] = 9
			return b
		}())), ErrBadMagic},
	}
	for _, c := range cases {
		if _, err := ParseProduceRequest(c.p); !errors.Is(err, c.want) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.want)
		}
	}
	if CodeOf(ErrBadMagic) != CodeBadBatch || CodeOf(ErrCRCMismatch) != CodeBadBatch {
		t.Error("batch errors do not map to CodeBadBatch")
	}
}

// TestProduceRequestHeader: the writev path gives the same bytes as the
// appending one.
func TestProduceRequestHeader(t *testing.T) {
	batch := AppendBatch(nil, []byte("hello"))
	whole := AppendProduceRequest(nil, 9, "t", ProduceCreateTopic, batch)
	head := AppendProduceRequestHeader([]byte("xyz"), 9, "t", ProduceCreateTopic, len(batch))
	if got := append(head[3:], batch...); !bytes.Equal(got, whole) {
		t.Errorf("header+batch = %x, want %x", got, whole)
	}
}

// TestConsumeResponseHeader: the sendfile path sends
// ConsumeResponseHeaderSize bytes, then the batches.
func TestConsumeResponseHeader(t *testing.T) {
	batches := AppendBatch(nil, []byte("a"), []byte("b"))
	batches = AppendBatchBody(batches, CodecS2, 3, 10, []byte("opaque"))
	head := AppendConsumeResponseHeader(nil, 5, 10, 20, len(batches))
	if len(head) != ConsumeResponseHeaderSize {
		t.Fatalf("header is %d bytes, want %d", len(head), ConsumeResponseHeaderSize)
	}
	frame := append(head, batches...)
	if whole := AppendConsumeResponse(nil, 5, 10, 20, batches); !bytes.Equal(frame, whole) {
		t.Fatalf("header+batches = %x, want %x", frame, whole)
	}
	h, p, err := ParseResponseHeader(frame)
	if err != nil || h.Op != OpConsume || h.CorrID != 5 {
		t.Fatalf("%+v %v", h, err)
	}
	resp, err := ParseConsumeResponse(p)
	if err != nil || resp.StartOffset != 10 || resp.NextOffset != 20 || !bytes.Equal(resp.Batches, batches) {
		t.Fatalf("%+v %v", resp, err)
	}

	// A size field that disagrees with the frame.
	bad := slices.Clone(p)
	bad[16]++
	if _, err := ParseConsumeResponse(bad); !errors.Is(err, ErrMalformed) {
		t.Errorf("wrong batches size: %v", err)
	}
	// Batches that do not parse.
	bad = slices.Clone(p)
	bad[consumeRespFixedSize+batchMagicOff] = 0
	if _, err := ParseConsumeResponse(bad); !errors.Is(err, ErrBadMagic) {
		t.Errorf("bad batch: %v", err)
	}
}

func TestListTopics(t *testing.T) {
	names := []string{"a", "b.c", "orders-2024", strings.Repeat("z", MaxTopicLen)}
	f := AppendListTopicsResponse(nil, 3, names)
	resp, err := ParseListTopicsResponse(f[HeaderSize:])
	if err != nil || resp.Count != len(names) {
		t.Fatalf("%+v %v", resp, err)
	}
	if got := resp.Strings(); !slices.Equal(got, names) {
		t.Errorf("names %q, want %q", got, names)
	}
	for name := range resp.Names() { // stopping early is fine
		if string(name) != "a" {
			t.Errorf("first name %q", name)
		}
		break
	}
	empty := AppendListTopicsResponse(nil, 3, nil)
	if resp, err := ParseListTopicsResponse(empty[HeaderSize:]); err != nil || resp.Count != 0 || len(resp.Strings()) != 0 {
		t.Errorf("empty list: %+v %v", resp, err)
	}
	// A count the payload cannot hold is refused before any name is read.
	huge := unhex(t, "ffffffff 0100 61")
	if _, err := ParseListTopicsResponse(huge); !errors.Is(err, ErrMalformed) {
		t.Errorf("huge count: %v", err)
	}

	req := AppendListTopicsRequest(nil, 1, "", strings.Repeat("x", MaxRegexLen+1))
	r, err := ParseListTopicsRequest(req[HeaderSize:])
	if !errors.Is(err, ErrInvalidArgument) || CodeOf(err) != CodeInvalidArgument || len(r.Regex) != MaxRegexLen+1 {
		t.Errorf("long regex: %v", err)
	}
}

func TestTruncateRequestMode(t *testing.T) {
	f := AppendTruncateRequest(nil, 1, "t", 2, 0)
	if _, err := ParseTruncateRequest(f[HeaderSize:]); !errors.Is(err, ErrMalformed) {
		t.Errorf("unknown mode: %v", err)
	}
	f = AppendTruncateRequest(nil, 1, "t", TruncateByOffset, 77)
	req, err := ParseTruncateRequest(f[HeaderSize:])
	if err != nil || req.By != TruncateByOffset || req.Before != 77 || string(req.Topic) != "t" {
		t.Errorf("%+v %v", req, err)
	}
	if TruncateByTime.String() != "time" || TruncateBy(9).String() != "unknown" {
		t.Error("TruncateBy.String")
	}
}

func TestValidTopic(t *testing.T) {
	good := []string{"a", "A", "0", "orders", "my.topic_v2-x", "...", ".a", "a..", "a:b", "chat:bob@example.com:alice@example.com", strings.Repeat("x", MaxTopicLen)}
	for _, name := range good {
		if err := ValidTopic(name); err != nil {
			t.Errorf("ValidTopic(%q) = %v", name, err)
		}
		if err := validTopic([]byte(name)); err != nil {
			t.Errorf("validTopic([]byte(%q)) = %v", name, err)
		}
	}
	bad := []string{"", ".", "..", "a/b", "/", "a b", "a\x00", "é", "a\\b", "a\nb", "a\x7f", "*", strings.Repeat("x", MaxTopicLen+1)}
	for _, name := range bad {
		if err := ValidTopic(name); !errors.Is(err, ErrInvalidTopic) {
			t.Errorf("ValidTopic(%q) = %v, want ErrInvalidTopic", name, err)
		}
	}
	for c := 0; c < 256; c++ {
		want := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':' || c == '@'
		if got := ValidTopic(string([]byte{'x', byte(c)})) == nil; got != want {
			t.Errorf("byte %#x: valid %v, want %v", c, got, want)
		}
		if got := validTopic([]byte{'x', byte(c)}) == nil; got != want {
			t.Errorf("byte %#x: valid %v, want %v", c, got, want)
		}
	}
}

// TestParseAllocs: decoders borrow; they do not allocate, even on errors.
func TestParseAllocs(t *testing.T) {
	frames := goldenFrames(t)
	bad := AppendCreateTopicRequest(nil, 1, "..")
	allocs := testing.AllocsPerRun(100, func() {
		for _, g := range frames {
			if g.resp {
				h, p, _ := ParseResponseHeader(g.frame)
				if h.Code != CodeOK {
					_, _ = ParseErrorResponse(p)
					continue
				}
				switch h.Op {
				case OpListTopics:
					_, _ = ParseListTopicsResponse(p)
				case OpTopicInfo:
					_, _ = ParseTopicInfoResponse(p)
				case OpProduce:
					_, _ = ParseProduceResponse(p)
				case OpConsume:
					_, _ = ParseConsumeResponse(p)
				case OpTruncate:
					_, _ = ParseTruncateResponse(p)
				case OpOffsetAt:
					_, _ = ParseOffsetAtResponse(p)
				}
				continue
			}
			_, p, _ := ParseRequestHeader(g.frame)
			switch g.op {
			case OpCreateTopic, OpDeleteTopic, OpTopicInfo:
				_, _ = ParseTopicRequest(p)
			case OpListTopics:
				_, _ = ParseListTopicsRequest(p)
			case OpProduce:
				_, _ = ParseProduceRequest(p)
			case OpConsume:
				_, _ = ParseConsumeRequest(p)
			case OpTruncate:
				_, _ = ParseTruncateRequest(p)
			case OpOffsetAt:
				_, _ = ParseOffsetAtRequest(p)
			}
		}
		_, p, _ := ParseRequestHeader(bad)
		_, _ = ParseTopicRequest(p)
		_, _ = PeekFrame([]byte{1, 2}, 0)
	})
	if allocs != 0 {
		t.Errorf("parsing allocates %v times per run", allocs)
	}
}

// TestAppendAllocs: encoders append to a buffer with room and do not allocate.
func TestAppendAllocs(t *testing.T) {
	buf := make([]byte, 0, 4096)
	batch := AppendBatch(nil, []byte("hi"))
	allocs := testing.AllocsPerRun(100, func() {
		b := AppendProduceRequest(buf[:0], 1, "orders", 0, batch)
		b = AppendConsumeRequest(b, 2, "orders", -1, 10, 1<<20, 100)
		b = AppendConsumeResponseHeader(b, 2, 0, 1, len(batch))
		b = AppendErrorResponse(b, OpConsume, 3, CodeTopicNotFound, "no such topic")
		_ = AppendListTopicsRequest(b, 4, "a", "b")
	})
	if allocs != 0 {
		t.Errorf("encoding allocates %v times per run", allocs)
	}
}

// TestLayoutSizes pins the fixed-size parts of the payloads to the named
// constants that doc.go draws.
func TestLayoutSizes(t *testing.T) {
	const str = 2 // an empty string: its uint16 length
	cases := []struct {
		name string
		got  int
		want int
	}{
		{"produce request", len(AppendProduceRequestHeader(nil, 0, "", 0, 0)) - HeaderSize - str, produceReqFixedSize},
		{"consume request", len(AppendConsumeRequest(nil, 0, "", 0, 0, 0, 0)) - HeaderSize - str, consumeReqFixedSize},
		{"truncate request", len(AppendTruncateRequest(nil, 0, "", 0, 0)) - HeaderSize - str, truncateReqFixedSize},
		{"produce response", len(AppendProduceResponse(nil, 0, 0, 0)) - HeaderSize, produceRespSize},
		{"topic info response", len(AppendTopicInfoResponse(nil, 0, TopicInfoResponse{})) - HeaderSize, topicInfoRespSize},
		{"truncate response", len(AppendTruncateResponse(nil, 0, 0)) - HeaderSize, truncateRespSize},
		{"consume response header", len(AppendConsumeResponseHeader(nil, 0, 0, 0, 0)), ConsumeResponseHeaderSize},
		{"empty list response", len(AppendListTopicsResponse(nil, 0, nil)) - HeaderSize, 4},
		{"empty request", len(AppendPingRequest(nil, 0)), HeaderSize},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s: %d bytes, want %d", c.name, c.got, c.want)
		}
	}
}
