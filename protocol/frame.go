package protocol

import (
	"encoding/binary"
	"unicode/utf8"
)

// Frame layout; see doc.go for the drawing. Requests and responses share the
// first 12 bytes; only bytes 6-7 differ (reserved in a request, the status
// code in a response). The length, version, op and correlation id sit at the
// same place in every protocol version, so a server can always answer a
// request it cannot parse.
const (
	frameLengthOff   = 0 // uint32: bytes that follow this field
	frameVersionOff  = 4 // uint8: protocol version
	frameOpOff       = 5 // uint8: Op
	frameReservedOff = 6 // uint16: request: reserved, zero in version 1
	frameCodeOff     = 6 // uint16: response: Code, CodeOK on success
	frameCorrIDOff   = 8 // uint32: chosen by the client, echoed by the server

	// FrameLengthSize is the size of the length prefix of every frame.
	FrameLengthSize = 4

	// HeaderSize is the size of the fixed header of every request and
	// response frame, length prefix included. The payload follows it.
	HeaderSize = 12

	// minFrameLength is the smallest valid length field: the rest of the
	// header with an empty payload.
	minFrameLength = HeaderSize - FrameLengthSize

	// Version is the protocol version this package speaks.
	Version = 1

	// DefaultMaxFrameSize is the default bound on a frame's length field
	// (64 MiB). Servers and clients may configure another.
	DefaultMaxFrameSize = 64 << 20

	// MaxErrorMessageLen bounds the human-readable message of an error
	// response, in bytes.
	MaxErrorMessageLen = 1024

	// maxStringLen is the largest string a uint16 length prefix can hold.
	maxStringLen = 1<<16 - 1
)

// Op is the operation of a request, echoed in its response.
type Op uint8

// Operations. Zero is never a valid op.
const (
	OpPing           Op = 1  // liveness check, empty payloads
	OpCreateTopic    Op = 2  // create a topic
	OpDeleteTopic    Op = 3  // delete a topic and its data
	OpListTopics     Op = 4  // list topic names, filtered by prefix and regex
	OpTopicInfo      Op = 5  // offsets and size of a topic
	OpProduce        Op = 6  // append one batch to a topic
	OpConsume        Op = 7  // read whole batches from an offset, long polling
	OpTruncate       Op = 8  // drop old messages before an offset or a time
	OpHello          Op = 9  // present the client's version, name and token
	OpOffsetAt       Op = 10 // the first offset appended at or after a time
	OpCommitOffset   Op = 11 // set a group's committed offset on a topic, optionally compare-and-set
	OpFetchOffset    Op = 12 // read a group's committed offset on a topic
	OpGroupLease     Op = 13 // take, renew or release the lease on a (group, topic)
	OpListGroups     Op = 14 // the groups of a topic and their offsets
	OpDeleteGroup    Op = 15 // forget a group's offset on a topic
	OpImport         Op = 16 // append batches at their own offsets and append times (moving a topic)
	OpReplicaFetch   Op = 17 // a follower's read of its leader's log (servers only)
	OpEpochEnd       Op = 18 // where the leader's log of a leader epoch ends (servers only)
	OpClusterStatus  Op = 19 // the cluster's members, and each replicated topic's replicas and leader
	OpProducerOwners Op = 20 // which owners a leader binds idempotent producer ids to (servers only)
	OpClusterMember  Op = 21 // add a server to the cluster, or remove one
	OpTopicReplicas  Op = 22 // create a topic on n replicas, or change a topic's replication factor
	OpLogEnds        Op = 23 // where a replica's logs of topics end, by last leader epoch and next offset (servers only)
	OpReplicaWait    Op = 24 // a follower's wait until any of many topics has something for it (servers only)

	opMax = OpReplicaWait
)

// Valid reports whether op is known to this protocol version.
func (op Op) Valid() bool { return op >= OpPing && op <= opMax }

func (op Op) String() string {
	switch op {
	case OpPing:
		return "ping"
	case OpCreateTopic:
		return "create topic"
	case OpDeleteTopic:
		return "delete topic"
	case OpListTopics:
		return "list topics"
	case OpTopicInfo:
		return "topic info"
	case OpProduce:
		return "produce"
	case OpConsume:
		return "consume"
	case OpTruncate:
		return "truncate"
	case OpHello:
		return "hello"
	case OpOffsetAt:
		return "offset at"
	case OpCommitOffset:
		return "commit offset"
	case OpFetchOffset:
		return "fetch offset"
	case OpGroupLease:
		return "group lease"
	case OpListGroups:
		return "list groups"
	case OpDeleteGroup:
		return "delete group"
	case OpImport:
		return "import"
	case OpReplicaFetch:
		return "replica fetch"
	case OpEpochEnd:
		return "epoch end"
	case OpClusterStatus:
		return "cluster status"
	case OpProducerOwners:
		return "producer owners"
	case OpClusterMember:
		return "cluster member"
	case OpTopicReplicas:
		return "topic replicas"
	case OpLogEnds:
		return "log ends"
	case OpReplicaWait:
		return "replica wait"
	}
	return "unknown op"
}

// RequestHeader is the fixed header of a request frame.
type RequestHeader struct {
	Length  uint32 // bytes after the length field: 8 + payload size
	Version uint8  // protocol version of the request
	Op      Op
	CorrID  uint32 // correlation id, echoed in the response
}

// ResponseHeader is the fixed header of a response frame.
type ResponseHeader struct {
	Length  uint32 // bytes after the length field: 8 + payload size
	Version uint8  // protocol version of the response
	Op      Op     // the op of the request, echoed
	Code    Code   // CodeOK, or the error; then the payload is an error message
	CorrID  uint32 // the correlation id of the request, echoed
}

// PeekFrame inspects the start of b, which may hold any part of a stream of
// frames, and returns the total size of the first frame (FrameLengthSize +
// its length field) as soon as the length field is complete. The error is
//
//   - nil when b holds the whole frame: b[:size] is the frame;
//   - ErrShortFrame when more bytes are needed: size is 0 while b holds
//     fewer than FrameLengthSize bytes, otherwise the size to wait for;
//   - ErrFrameTooLarge when the length field is over maxFrameSize, checked
//     before the frame is buffered (size is the declared size);
//   - ErrMalformed when the length field is too small to hold a header.
//
// maxFrameSize <= 0 means DefaultMaxFrameSize. After ErrFrameTooLarge or
// ErrMalformed the stream cannot be trusted: answer and close it.
func PeekFrame(b []byte, maxFrameSize int) (size int, err error) {
	if len(b) < FrameLengthSize {
		return 0, ErrShortFrame
	}
	if maxFrameSize <= 0 {
		maxFrameSize = DefaultMaxFrameSize
	}
	n := uint64(binary.LittleEndian.Uint32(b[frameLengthOff:]))
	total := n + FrameLengthSize
	if n > uint64(maxFrameSize) || total > uint64(maxInt) {
		return int(min(total, uint64(maxInt))), ErrFrameTooLarge
	}
	if n < minFrameLength {
		return int(total), errShortLength
	}
	if uint64(len(b)) < total {
		return int(total), ErrShortFrame
	}
	return int(total), nil
}

const maxInt = int(^uint(0) >> 1)

// ParseRequestHeader parses the header of frame, one whole request frame as
// PeekFrame measured it, and returns the payload that follows the header.
// The payload borrows from frame.
//
// Whenever len(frame) >= HeaderSize the returned header is filled in, even
// with an error, so a server can echo the op and correlation id in its error
// response. Errors: ErrShortFrame (frame shorter than its length field says),
// ErrMalformed (length field too small, bytes after the frame, reserved bits
// set), ErrUnsupportedVersion, ErrUnknownOp.
func ParseRequestHeader(frame []byte) (RequestHeader, []byte, error) {
	var h RequestHeader
	if len(frame) < HeaderSize {
		return h, nil, ErrShortFrame
	}
	h.Length = binary.LittleEndian.Uint32(frame[frameLengthOff:])
	h.Version = frame[frameVersionOff]
	h.Op = Op(frame[frameOpOff])
	h.CorrID = binary.LittleEndian.Uint32(frame[frameCorrIDOff:])
	if err := checkFrameLength(frame, h.Length); err != nil {
		return h, nil, err
	}
	if h.Version != Version {
		return h, nil, ErrUnsupportedVersion
	}
	if binary.LittleEndian.Uint16(frame[frameReservedOff:]) != 0 {
		return h, nil, errReservedHeader
	}
	if !h.Op.Valid() {
		return h, nil, ErrUnknownOp
	}
	return h, frame[HeaderSize:], nil
}

// ParseResponseHeader parses the header of frame, one whole response frame,
// and returns the payload that follows the header, borrowed from frame. When
// h.Code is not CodeOK the payload is an error message: see
// ParseErrorResponse.
//
// The header is filled in whenever len(frame) >= HeaderSize, even with an
// error. Errors: ErrShortFrame, ErrMalformed (length field too small, bytes
// after the frame), ErrUnsupportedVersion (a successful response in another
// version; error responses have the same layout in every version and are
// accepted from any).
func ParseResponseHeader(frame []byte) (ResponseHeader, []byte, error) {
	var h ResponseHeader
	if len(frame) < HeaderSize {
		return h, nil, ErrShortFrame
	}
	h.Length = binary.LittleEndian.Uint32(frame[frameLengthOff:])
	h.Version = frame[frameVersionOff]
	h.Op = Op(frame[frameOpOff])
	h.Code = Code(binary.LittleEndian.Uint16(frame[frameCodeOff:]))
	h.CorrID = binary.LittleEndian.Uint32(frame[frameCorrIDOff:])
	if err := checkFrameLength(frame, h.Length); err != nil {
		return h, nil, err
	}
	if h.Version != Version && h.Code == CodeOK {
		return h, nil, ErrUnsupportedVersion
	}
	return h, frame[HeaderSize:], nil
}

func checkFrameLength(frame []byte, length uint32) error {
	if length < minFrameLength {
		return errShortLength
	}
	total := uint64(length) + FrameLengthSize
	if uint64(len(frame)) < total {
		return ErrShortFrame
	}
	if uint64(len(frame)) > total {
		return errTrailingFrame
	}
	return nil
}

// appendHeader appends a frame header with a zero length field. Complete the
// frame with finishFrame(dst, start), start being len(dst) before the call.
func appendHeader(dst []byte, op Op, word uint16, corrID uint32) []byte {
	return append(dst,
		0, 0, 0, 0, // length, set by finishFrame
		Version, byte(op),
		byte(word), byte(word>>8),
		byte(corrID), byte(corrID>>8), byte(corrID>>16), byte(corrID>>24))
}

func appendRequestHeader(dst []byte, op Op, corrID uint32) []byte {
	return appendHeader(dst, op, 0, corrID)
}

func appendResponseHeader(dst []byte, op Op, code Code, corrID uint32) []byte {
	return appendHeader(dst, op, uint16(code), corrID)
}

// finishFrame sets the length field of the frame that starts at dst[start].
func finishFrame(dst []byte, start int) []byte {
	binary.LittleEndian.PutUint32(dst[start+frameLengthOff:], uint32(len(dst)-start-FrameLengthSize))
	return dst
}

// addFrameLength adds n to the length field of the frame at dst[start], for
// bytes the caller sends after dst.
func addFrameLength(dst []byte, start, n int) []byte {
	l := binary.LittleEndian.Uint32(dst[start+frameLengthOff:])
	binary.LittleEndian.PutUint32(dst[start+frameLengthOff:], l+uint32(n))
	return dst
}

// AppendErrorResponse appends a response frame that reports code with a
// human-readable msg. msg is cut to MaxErrorMessageLen bytes, at a UTF-8
// boundary. CodeOK is not an error: it is sent as CodeUnknown. The response
// is in this package's Version, also when it answers a request of an
// unsupported version, which tells the client what the server speaks.
func AppendErrorResponse(dst []byte, op Op, corrID uint32, code Code, msg string) []byte {
	if code == CodeOK {
		code = CodeUnknown
	}
	msg = truncateUTF8(msg, MaxErrorMessageLen)
	start := len(dst)
	dst = appendResponseHeader(dst, op, code, corrID)
	dst = appendString(dst, msg)
	return finishFrame(dst, start)
}

// ParseErrorResponse parses the payload of a response whose code is not
// CodeOK and returns its message, which borrows from payload.
func ParseErrorResponse(payload []byte) (msg []byte, err error) {
	r := reader{b: payload}
	msg = r.str()
	if r.err == nil && len(msg) > MaxErrorMessageLen {
		return nil, errLongMessage
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	return msg, nil
}

// truncateUTF8 cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// reader decodes fields from the front of a payload. The first field that
// does not fit sets err, which stays set; later reads return zero values.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.err = errShortPayload
		r.b = nil
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() uint8 {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if v := r.take(2); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if v := r.take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (r *reader) i32() int32 { return int32(r.u32()) }

func (r *reader) i64() int64 {
	if v := r.take(8); v != nil {
		return int64(binary.LittleEndian.Uint64(v))
	}
	return 0
}

// str reads a string: a uint16 length and that many bytes.
func (r *reader) str() []byte {
	n := r.u16()
	if r.err != nil {
		return nil
	}
	return r.take(int(n))
}

// rest returns every byte left.
func (r *reader) rest() []byte {
	if r.err != nil {
		return nil
	}
	v := r.b[:len(r.b):len(r.b)]
	r.b = r.b[len(r.b):]
	return v
}

// end returns the sticky error, or an error when bytes are left over.
func (r *reader) end() error {
	if r.err != nil {
		return r.err
	}
	if len(r.b) != 0 {
		return errTrailingPayload
	}
	return nil
}

func appendU16(dst []byte, v uint16) []byte { return binary.LittleEndian.AppendUint16(dst, v) }
func appendU32(dst []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(dst, v) }
func appendI64(dst []byte, v int64) []byte  { return binary.LittleEndian.AppendUint64(dst, uint64(v)) }

// appendString appends a string as a uint16 length and its bytes. A string
// longer than 65535 bytes is cut to 65535: every string field has a lower
// limit, so the receiver rejects the cut string as it would the whole one.
func appendString(dst []byte, s string) []byte {
	if len(s) > maxStringLen {
		s = s[:maxStringLen]
	}
	dst = appendU16(dst, uint16(len(s)))
	return append(dst, s...)
}
