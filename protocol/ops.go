package protocol

import (
	"iter"
)

// Payload layouts; see doc.go for the drawings. A string is a uint16 length
// and that many bytes. Fixed-size fields come first, then strings, then (in
// produce requests and consume responses) batches, which always end the frame.
const (
	// MaxTopicLen bounds a topic name, in bytes. Names become directory
	// names; 255 is the common file-name limit.
	MaxTopicLen = 255

	// MaxRegexLen bounds the regex filter of a list topics request, in bytes.
	MaxRegexLen = 4096

	produceReqFixedSize   = 2  // flags uint16, then the topic and the batch
	consumeReqFixedSize   = 20 // offset int64, limit, max bytes, max wait int32; then the topic
	truncateReqFixedSize  = 9  // before int64, by uint8; then the topic
	produceRespSize       = 12 // base offset int64, count uint32
	topicInfoRespSize     = 28 // oldest, next, bytes int64; segments uint32
	truncateRespSize      = 8  // oldest offset int64
	consumeRespFixedSize  = 20 // start offset, next offset int64; batches size uint32
	listTopicsRespMinName = 2  // the smallest name entry: its uint16 length

	// ConsumeResponseHeaderSize is the size of a consume response frame up to
	// its batches: the frame header and the fixed consume fields. A server
	// sends AppendConsumeResponseHeader's bytes and then exactly the batch
	// bytes it declared, for example with sendfile(2).
	ConsumeResponseHeaderSize = HeaderSize + consumeRespFixedSize
)

// ValidTopic reports whether name is a valid topic name: 1 to MaxTopicLen
// bytes of [A-Za-z0-9._:@-], and neither "." nor "..". The error wraps
// ErrInvalidTopic.
func ValidTopic(name string) error { return validTopic(name) }

func validTopic[T string | []byte](name T) error {
	if len(name) == 0 || len(name) > MaxTopicLen {
		return errTopicLength
	}
	if name[0] == '.' && (len(name) == 1 || len(name) == 2 && name[1] == '.') {
		return errTopicDots
	}
	for i := 0; i < len(name); i++ {
		if !topicByte[name[i]] {
			return errTopicByte
		}
	}
	return nil
}

var topicByte = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	t['.'], t['_'], t['-'], t[':'], t['@'] = true, true, true, true, true
	return t
}()

// Requests and responses. Parsed structs borrow their []byte fields from the
// payload given to ParseX; they are valid only as long as it is. Convert with
// string(...) to keep them. A request whose topic breaks the naming rules
// parses with every field set and an error wrapping ErrInvalidTopic, which a
// server answers with CodeInvalidTopic.

// --- ping ----------------------------------------------------------------

// AppendPingRequest appends a ping request. Its payload is empty.
func AppendPingRequest(dst []byte, corrID uint32) []byte {
	return appendEmpty(dst, OpPing, corrID)
}

// ParsePingRequest checks the payload of a ping request, which is empty.
func ParsePingRequest(payload []byte) error { return parseEmpty(payload) }

// AppendEmptyResponse appends a successful response with an empty payload:
// the response to ping, create topic and delete topic.
func AppendEmptyResponse(dst []byte, op Op, corrID uint32) []byte {
	start := len(dst)
	dst = appendResponseHeader(dst, op, CodeOK, corrID)
	return finishFrame(dst, start)
}

// ParseEmptyResponse checks the payload of a successful ping, create topic or
// delete topic response, which is empty.
func ParseEmptyResponse(payload []byte) error { return parseEmpty(payload) }

func appendEmpty(dst []byte, op Op, corrID uint32) []byte {
	start := len(dst)
	dst = appendRequestHeader(dst, op, corrID)
	return finishFrame(dst, start)
}

func parseEmpty(payload []byte) error {
	if len(payload) != 0 {
		return errTrailingPayload
	}
	return nil
}

// --- create topic, delete topic, topic info ------------------------------

// TopicRequest is a create topic, delete topic or topic info request: the
// three have the same payload, one topic name.
type TopicRequest struct {
	Topic []byte
}

// AppendCreateTopicRequest appends a request to create topic.
func AppendCreateTopicRequest(dst []byte, corrID uint32, topic string) []byte {
	return appendTopicRequest(dst, OpCreateTopic, corrID, topic)
}

// AppendDeleteTopicRequest appends a request to delete topic and its data.
func AppendDeleteTopicRequest(dst []byte, corrID uint32, topic string) []byte {
	return appendTopicRequest(dst, OpDeleteTopic, corrID, topic)
}

// AppendTopicInfoRequest appends a request for the offsets and size of topic.
func AppendTopicInfoRequest(dst []byte, corrID uint32, topic string) []byte {
	return appendTopicRequest(dst, OpTopicInfo, corrID, topic)
}

func appendTopicRequest(dst []byte, op Op, corrID uint32, topic string) []byte {
	start := len(dst)
	dst = appendRequestHeader(dst, op, corrID)
	dst = appendString(dst, topic)
	return finishFrame(dst, start)
}

// ParseTopicRequest parses the payload of a create topic, delete topic or
// topic info request.
func ParseTopicRequest(payload []byte) (TopicRequest, error) {
	r := reader{b: payload}
	req := TopicRequest{Topic: r.str()}
	if err := r.end(); err != nil {
		return TopicRequest{}, err
	}
	return req, validTopic(req.Topic)
}

// TopicInfoResponse is the payload of a successful topic info response.
type TopicInfoResponse struct {
	OldestOffset int64  // offset of the oldest message kept; NextOffset when empty
	NextOffset   int64  // offset the next message will get
	Bytes        int64  // bytes on disk in the read volume
	Segments     uint32 // number of segment files
}

// AppendTopicInfoResponse appends a successful topic info response.
func AppendTopicInfoResponse(dst []byte, corrID uint32, info TopicInfoResponse) []byte {
	start := len(dst)
	dst = appendResponseHeader(dst, OpTopicInfo, CodeOK, corrID)
	dst = appendI64(dst, info.OldestOffset)
	dst = appendI64(dst, info.NextOffset)
	dst = appendI64(dst, info.Bytes)
	dst = appendU32(dst, info.Segments)
	return finishFrame(dst, start)
}

// ParseTopicInfoResponse parses the payload of a successful topic info response.
func ParseTopicInfoResponse(payload []byte) (TopicInfoResponse, error) {
	r := reader{b: payload}
	info := TopicInfoResponse{
		OldestOffset: r.i64(),
		NextOffset:   r.i64(),
		Bytes:        r.i64(),
		Segments:     r.u32(),
	}
	if err := r.end(); err != nil {
		return TopicInfoResponse{}, err
	}
	return info, nil
}

// --- list topics ---------------------------------------------------------

// ListTopicsRequest asks for the names of the topics that start with Prefix
// and, when Regex is not empty, match it (Go RE2 syntax, unanchored).
type ListTopicsRequest struct {
	Prefix []byte
	Regex  []byte
}

// AppendListTopicsRequest appends a list topics request. Empty prefix and
// regex list every topic.
func AppendListTopicsRequest(dst []byte, corrID uint32, prefix, regex string) []byte {
	start := len(dst)
	dst = appendRequestHeader(dst, OpListTopics, corrID)
	dst = appendString(dst, prefix)
	dst = appendString(dst, regex)
	return finishFrame(dst, start)
}

// ParseListTopicsRequest parses the payload of a list topics request. A regex
// longer than MaxRegexLen parses with an error wrapping ErrInvalidArgument;
// the regex is not compiled here.
func ParseListTopicsRequest(payload []byte) (ListTopicsRequest, error) {
	r := reader{b: payload}
	req := ListTopicsRequest{Prefix: r.str(), Regex: r.str()}
	if err := r.end(); err != nil {
		return ListTopicsRequest{}, err
	}
	if len(req.Regex) > MaxRegexLen {
		return req, errLongRegex
	}
	return req, nil
}

// ListTopicsResponse is the payload of a successful list topics response.
// Its names were all checked by ParseListTopicsResponse; they borrow from
// the payload.
type ListTopicsResponse struct {
	Count int    // number of names
	names []byte // Count strings, each a uint16 length and its bytes
}

// Names iterates over the topic names, in the order the server sent them.
func (r ListTopicsResponse) Names() iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		rd := reader{b: r.names}
		for i := 0; i < r.Count; i++ {
			if !yield(rd.str()) {
				return
			}
		}
	}
}

// Strings returns copies of the names as strings.
func (r ListTopicsResponse) Strings() []string {
	out := make([]string, 0, r.Count)
	for name := range r.Names() {
		out = append(out, string(name))
	}
	return out
}

// AppendListTopicsResponse appends a successful list topics response holding
// names (valid topic names, in ascending byte order by convention).
func AppendListTopicsResponse(dst []byte, corrID uint32, names []string) []byte {
	start := len(dst)
	dst = appendResponseHeader(dst, OpListTopics, CodeOK, corrID)
	dst = appendU32(dst, uint32(len(names)))
	for _, name := range names {
		dst = appendString(dst, name)
	}
	return finishFrame(dst, start)
}

// ParseListTopicsResponse parses the payload of a successful list topics
// response, checking every name's length without allocating.
func ParseListTopicsResponse(payload []byte) (ListTopicsResponse, error) {
	r := reader{b: payload}
	count := r.u32()
	if r.err != nil {
		return ListTopicsResponse{}, r.err
	}
	names := r.b
	if uint64(count) > uint64(len(names)/listTopicsRespMinName) {
		return ListTopicsResponse{}, errNameCount
	}
	for i := uint32(0); i < count; i++ {
		r.str()
	}
	if err := r.end(); err != nil {
		return ListTopicsResponse{}, err
	}
	return ListTopicsResponse{Count: int(count), names: names}, nil
}

// --- produce -------------------------------------------------------------

// ProduceFlags modify a produce request.
type ProduceFlags uint16

// Produce flags. Other bits are reserved and must be zero.
const (
	// ProduceCreateTopic creates the topic if it does not exist.
	ProduceCreateTopic ProduceFlags = 1 << 0
	// ProduceExpectOffset appends the batch only if the topic's next
	// offset is the request's Expect (optimistic concurrency, NATS's
	// Expected-Last-Sequence); else code CodeOffsetMismatch.
	ProduceExpectOffset ProduceFlags = 1 << 1
	// ProduceAcksLeader answers once the leader has the batch (acks=
	// leader) rather than once every in-sync replica has it (acks=all,
	// the default on a replicated topic). Without replication it changes
	// nothing.
	ProduceAcksLeader ProduceFlags = 1 << 2
	// ProduceStrictSequence stores the batch of an idempotent producer
	// only if its sequence is the producer's highest stored on the topic
	// plus one; else CodeOutOfOrderSequence, nothing written. A batch
	// stored before is answered with its first offset as without it, and a
	// producer the server does not remember takes any sequence. A client
	// that keeps several batches of one producer in flight sets it so that
	// they are stored in sequence order even when an earlier one is
	// refused (not leader) and a later one reaches a new leader first.
	// Without FlagProducer in the batch it changes nothing.
	ProduceStrictSequence ProduceFlags = 1 << 3

	produceFlagsKnown = ProduceCreateTopic | ProduceExpectOffset | ProduceAcksLeader | ProduceStrictSequence
)

// ProduceRequest appends one batch to a topic.
type ProduceRequest struct {
	Flags ProduceFlags
	// Expect is, with ProduceExpectOffset, the next offset the topic must
	// have for the batch to be appended (>= 0); else 0.
	Expect int64
	Topic  []byte
	// Batch is exactly one batch in the batch format, the rest of the frame:
	// a server can store this sub-slice of the frame without copying it.
	Batch []byte
}

// AppendProduceRequest appends a produce request carrying batch, one whole
// batch as built by AppendBatch or AppendBatchBody.
func AppendProduceRequest(dst []byte, corrID uint32, topic string, flags ProduceFlags, batch []byte) []byte {
	return AppendProduceRequestExpect(dst, corrID, topic, flags, 0, batch)
}

// AppendProduceRequestExpect is AppendProduceRequest with the expected
// next offset, sent when flags has ProduceExpectOffset.
func AppendProduceRequestExpect(dst []byte, corrID uint32, topic string, flags ProduceFlags, expect int64, batch []byte) []byte {
	dst = AppendProduceRequestHeaderExpect(dst, corrID, topic, flags, expect, len(batch))
	return append(dst, batch...)
}

// AppendProduceRequestHeader appends a produce request up to its batch, with
// a length field that counts batchSize more bytes: the caller sends the
// batch right after (for example with writev) or appends it to dst.
func AppendProduceRequestHeader(dst []byte, corrID uint32, topic string, flags ProduceFlags, batchSize int) []byte {
	return AppendProduceRequestHeaderExpect(dst, corrID, topic, flags, 0, batchSize)
}

// AppendProduceRequestHeaderExpect is AppendProduceRequestHeader with the
// expected next offset, sent when flags has ProduceExpectOffset.
func AppendProduceRequestHeaderExpect(dst []byte, corrID uint32, topic string, flags ProduceFlags, expect int64, batchSize int) []byte {
	start := len(dst)
	dst = appendRequestHeader(dst, OpProduce, corrID)
	dst = appendU16(dst, uint16(flags))
	if flags&ProduceExpectOffset != 0 {
		dst = appendI64(dst, expect)
	}
	dst = appendString(dst, topic)
	dst = finishFrame(dst, start)
	return addFrameLength(dst, start, batchSize)
}

// ParseProduceRequest parses the payload of a produce request. It checks that
// Batch is exactly one batch whose header parses (ParseBatch, whose errors it
// returns as they are), but not its CRC: verify that before storing it.
func ParseProduceRequest(payload []byte) (ProduceRequest, error) {
	r := reader{b: payload}
	req := ProduceRequest{Flags: ProduceFlags(r.u16())}
	if req.Flags&^produceFlagsKnown != 0 && r.err == nil {
		return ProduceRequest{}, errProduceFlags
	}
	if req.Flags&ProduceExpectOffset != 0 {
		req.Expect = r.i64()
	}
	req.Topic, req.Batch = r.str(), r.rest()
	if r.err != nil {
		return ProduceRequest{}, r.err
	}
	expectErr := error(nil)
	if req.Expect < 0 {
		expectErr = errExpectOffset // well-formed: the request is returned filled, as for a bad topic
	}
	_, n, err := ParseBatch(req.Batch)
	if err != nil {
		return ProduceRequest{}, err
	}
	if n != len(req.Batch) {
		return ProduceRequest{}, errTrailingBatch
	}
	if expectErr != nil {
		return req, expectErr
	}
	return req, validTopic(req.Topic)
}

// ProduceResponse is the payload of a successful produce response.
type ProduceResponse struct {
	BaseOffset int64  // offset given to the batch's first message
	Count      uint32 // messages appended: the batch's count
}

// AppendProduceResponse appends a successful produce response.
func AppendProduceResponse(dst []byte, corrID uint32, baseOffset int64, count uint32) []byte {
	start := len(dst)
	dst = appendResponseHeader(dst, OpProduce, CodeOK, corrID)
	dst = appendI64(dst, baseOffset)
	dst = appendU32(dst, count)
	return finishFrame(dst, start)
}

// ParseProduceResponse parses the payload of a successful produce response.
func ParseProduceResponse(payload []byte) (ProduceResponse, error) {
	r := reader{b: payload}
	resp := ProduceResponse{BaseOffset: r.i64(), Count: r.u32()}
	if err := r.end(); err != nil {
		return ProduceResponse{}, err
	}
	return resp, nil
}

// --- consume -------------------------------------------------------------

// ConsumeRequest asks for the messages of Topic from Offset on.
type ConsumeRequest struct {
	// Offset of the first message wanted. Negative counts back from the
	// topic's next offset: -1 is the last message.
	Offset int64
	// Limit is the number of messages wanted; <= 0 means no limit.
	Limit int32
	// MaxBytes bounds the batch bytes of the response; <= 0 means the
	// server's default. A first batch larger than MaxBytes is still sent
	// whole, so that a consumer always makes progress.
	MaxBytes int32
	// MaxWaitMs is how long, in milliseconds, the server may hold the request
	// when Offset is the topic's next offset, waiting for a message; <= 0
	// answers at once.
	MaxWaitMs int32
	Topic     []byte
}

// AppendConsumeRequest appends a consume request.
func AppendConsumeRequest(dst []byte, corrID uint32, topic string, offset int64, limit, maxBytes, maxWaitMs int32) []byte {
	start := len(dst)
	dst = appendRequestHeader(dst, OpConsume, corrID)
	dst = appendI64(dst, offset)
	dst = appendU32(dst, uint32(limit))
	dst = appendU32(dst, uint32(maxBytes))
	dst = appendU32(dst, uint32(maxWaitMs))
	dst = appendString(dst, topic)
	return finishFrame(dst, start)
}

// ParseConsumeRequest parses the payload of a consume request.
func ParseConsumeRequest(payload []byte) (ConsumeRequest, error) {
	r := reader{b: payload}
	req := ConsumeRequest{
		Offset:    r.i64(),
		Limit:     r.i32(),
		MaxBytes:  r.i32(),
		MaxWaitMs: r.i32(),
		Topic:     r.str(),
	}
	if err := r.end(); err != nil {
		return ConsumeRequest{}, err
	}
	return req, validTopic(req.Topic)
}

// ConsumeResponse is the payload of a successful consume response.
type ConsumeResponse struct {
	// StartOffset is the request's offset once resolved: a negative offset
	// counted back from NextOffset (and raised to the oldest offset).
	StartOffset int64
	// NextOffset is the topic's next offset when the response was made.
	NextOffset int64
	// Batches holds zero or more whole batches, concatenated. The first may
	// begin before StartOffset and the last may run past the limit: the
	// consumer skips the messages outside the range it asked for.
	Batches []byte
}

// AppendConsumeResponseHeader appends the first ConsumeResponseHeaderSize
// bytes of a successful consume response whose batches, batchesSize bytes
// of whole batches, the caller sends right after (for example with
// sendfile). batchesSize must be at most 1<<32-1-28: a frame cannot be
// larger.
func AppendConsumeResponseHeader(dst []byte, corrID uint32, startOffset, nextOffset int64, batchesSize int) []byte {
	start := len(dst)
	dst = appendResponseHeader(dst, OpConsume, CodeOK, corrID)
	dst = appendI64(dst, startOffset)
	dst = appendI64(dst, nextOffset)
	dst = appendU32(dst, uint32(batchesSize))
	dst = finishFrame(dst, start)
	return addFrameLength(dst, start, batchesSize)
}

// AppendConsumeResponse appends a whole successful consume response, batches
// included: the copying path.
func AppendConsumeResponse(dst []byte, corrID uint32, startOffset, nextOffset int64, batches []byte) []byte {
	dst = AppendConsumeResponseHeader(dst, corrID, startOffset, nextOffset, len(batches))
	return append(dst, batches...)
}

// ParseConsumeResponse parses the payload of a successful consume response.
// It checks that Batches is a sequence of whole batches whose headers parse
// (returning ParseBatch's errors as they are), but not their CRCs: the
// consumer verifies each batch before using it.
func ParseConsumeResponse(payload []byte) (ConsumeResponse, error) {
	r := reader{b: payload}
	resp := ConsumeResponse{StartOffset: r.i64(), NextOffset: r.i64()}
	size := r.u32()
	resp.Batches = r.rest()
	if r.err != nil {
		return ConsumeResponse{}, r.err
	}
	if uint64(size) != uint64(len(resp.Batches)) {
		return ConsumeResponse{}, errBatchesSize
	}
	for b := resp.Batches; len(b) > 0; {
		_, n, err := ParseBatch(b)
		if err != nil {
			return ConsumeResponse{}, err
		}
		b = b[n:]
	}
	return resp, nil
}

// --- truncate ------------------------------------------------------------

// TruncateBy says what a truncate request's Before field counts.
type TruncateBy uint8

// Truncate modes.
const (
	// TruncateByOffset drops the messages whose offset is below Before.
	TruncateByOffset TruncateBy = 0
	// TruncateByTime drops the messages appended before Before, in Unix
	// nanoseconds.
	TruncateByTime TruncateBy = 1
)

// Valid reports whether by is a known truncate mode.
func (by TruncateBy) Valid() bool { return by <= TruncateByTime }

func (by TruncateBy) String() string {
	switch by {
	case TruncateByOffset:
		return "offset"
	case TruncateByTime:
		return "time"
	}
	return "unknown"
}

// TruncateRequest drops the old messages of a topic. A server may keep some
// messages before the bound (it may remove whole segment files only): the
// response tells the new oldest offset.
type TruncateRequest struct {
	Before int64 // an offset or a time in Unix nanoseconds, as By says
	By     TruncateBy
	Topic  []byte
}

// AppendTruncateRequest appends a truncate request.
func AppendTruncateRequest(dst []byte, corrID uint32, topic string, by TruncateBy, before int64) []byte {
	start := len(dst)
	dst = appendRequestHeader(dst, OpTruncate, corrID)
	dst = appendI64(dst, before)
	dst = append(dst, byte(by))
	dst = appendString(dst, topic)
	return finishFrame(dst, start)
}

// ParseTruncateRequest parses the payload of a truncate request.
func ParseTruncateRequest(payload []byte) (TruncateRequest, error) {
	r := reader{b: payload}
	req := TruncateRequest{Before: r.i64(), By: TruncateBy(r.u8()), Topic: r.str()}
	if err := r.end(); err != nil {
		return TruncateRequest{}, err
	}
	if !req.By.Valid() {
		return TruncateRequest{}, errTruncateBy
	}
	return req, validTopic(req.Topic)
}

// TruncateResponse is the payload of a successful truncate response.
type TruncateResponse struct {
	OldestOffset int64 // the topic's oldest offset after the truncation
}

// AppendTruncateResponse appends a successful truncate response.
func AppendTruncateResponse(dst []byte, corrID uint32, oldestOffset int64) []byte {
	start := len(dst)
	dst = appendResponseHeader(dst, OpTruncate, CodeOK, corrID)
	dst = appendI64(dst, oldestOffset)
	return finishFrame(dst, start)
}

// ParseTruncateResponse parses the payload of a successful truncate response.
func ParseTruncateResponse(payload []byte) (TruncateResponse, error) {
	r := reader{b: payload}
	resp := TruncateResponse{OldestOffset: r.i64()}
	if err := r.end(); err != nil {
		return TruncateResponse{}, err
	}
	return resp, nil
}

// --- offset at ----------------------------------------------------------

// OffsetAtRequest asks for the first offset of a topic whose append time
// is at or after Time: the oldest offset for a time before the oldest
// message, the next offset for one after the newest.
type OffsetAtRequest struct {
	Time  int64 // Unix nanoseconds
	Topic []byte
}

// AppendOffsetAtRequest appends an offset-at request.
func AppendOffsetAtRequest(dst []byte, corrID uint32, topic string, unixNano int64) []byte {
	start := len(dst)
	dst = appendRequestHeader(dst, OpOffsetAt, corrID)
	dst = appendI64(dst, unixNano)
	dst = appendString(dst, topic)
	return finishFrame(dst, start)
}

// ParseOffsetAtRequest parses the payload of an offset-at request.
func ParseOffsetAtRequest(payload []byte) (OffsetAtRequest, error) {
	r := reader{b: payload}
	req := OffsetAtRequest{Time: r.i64(), Topic: r.str()}
	if err := r.end(); err != nil {
		return OffsetAtRequest{}, err
	}
	return req, validTopic(req.Topic)
}

// OffsetAtResponse is the payload of a successful offset-at response.
type OffsetAtResponse struct {
	Offset int64
}

// AppendOffsetAtResponse appends a successful offset-at response.
func AppendOffsetAtResponse(dst []byte, corrID uint32, offset int64) []byte {
	start := len(dst)
	dst = appendResponseHeader(dst, OpOffsetAt, CodeOK, corrID)
	dst = appendI64(dst, offset)
	return finishFrame(dst, start)
}

// ParseOffsetAtResponse parses the payload of a successful offset-at
// response.
func ParseOffsetAtResponse(payload []byte) (OffsetAtResponse, error) {
	r := reader{b: payload}
	resp := OffsetAtResponse{Offset: r.i64()}
	if err := r.end(); err != nil {
		return OffsetAtResponse{}, err
	}
	return resp, nil
}

// --- hello ---------------------------------------------------------------

// Hello bounds, in bytes.
const (
	// MaxClientNameLen bounds the client name of a hello request.
	MaxClientNameLen = 255
	// MaxTokenLen bounds the token of a hello request.
	MaxTokenLen = 1024
)

// HelloRequest presents a client to the server: the highest protocol
// version it speaks, its name (for logs) and its token (empty: none).
type HelloRequest struct {
	Version uint8
	Name    []byte
	Token   []byte
}

// AppendHelloRequest appends a hello request.
func AppendHelloRequest(dst []byte, corrID uint32, version uint8, name, token string) []byte {
	start := len(dst)
	dst = appendRequestHeader(dst, OpHello, corrID)
	dst = append(dst, version)
	dst = appendString(dst, name)
	dst = appendString(dst, token)
	return finishFrame(dst, start)
}

// ParseHelloRequest parses the payload of a hello request. A name over
// MaxClientNameLen or a token over MaxTokenLen parses with an error
// wrapping ErrInvalidArgument.
func ParseHelloRequest(payload []byte) (HelloRequest, error) {
	r := reader{b: payload}
	req := HelloRequest{Version: r.u8(), Name: r.str(), Token: r.str()}
	if err := r.end(); err != nil {
		return HelloRequest{}, err
	}
	switch {
	case len(req.Name) > MaxClientNameLen:
		return req, errLongName
	case len(req.Token) > MaxTokenLen:
		return req, errLongToken
	}
	return req, nil
}

// HelloResponse is the payload of a successful hello response.
type HelloResponse struct {
	Version uint8 // the highest protocol version the server speaks
	Auth    bool  // the server checks tokens, and accepted this one
}

// AppendHelloResponse appends a successful hello response.
func AppendHelloResponse(dst []byte, corrID uint32, resp HelloResponse) []byte {
	start := len(dst)
	dst = appendResponseHeader(dst, OpHello, CodeOK, corrID)
	var auth uint8
	if resp.Auth {
		auth = 1
	}
	dst = append(dst, resp.Version, auth)
	return finishFrame(dst, start)
}

// ParseHelloResponse parses the payload of a successful hello response.
func ParseHelloResponse(payload []byte) (HelloResponse, error) {
	r := reader{b: payload}
	v, auth := r.u8(), r.u8()
	if err := r.end(); err != nil {
		return HelloResponse{}, err
	}
	if auth > 1 {
		return HelloResponse{}, wrap(ErrMalformed, "hello: unknown auth value")
	}
	return HelloResponse{Version: v, Auth: auth == 1}, nil
}
