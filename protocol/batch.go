package protocol

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"time"
)

// Batch layout; see doc.go for the drawing. All integers are little-endian.
const (
	batchLengthOff     = 0  // uint32: bytes that follow this field
	batchBaseOffsetOff = 4  // int64: offset of the first message, stamped by the server
	batchAppendTimeOff = 12 // int64: append time in Unix nanoseconds, stamped by the server
	batchCRCOff        = 20 // uint32: CRC32C (Castagnoli) of bytes [24, end)
	batchMagicOff      = 24 // uint8: format version, BatchMagic
	batchCodecOff      = 25 // uint8: Codec of the body
	batchFlagsOff      = 26 // uint16: reserved, must be zero
	batchCountOff      = 28 // uint32: number of messages, at least 1
	batchRawSizeOff    = 32 // uint32: body size once decompressed
	batchProducerOff   = 36 // uint64, version 2: producer id, 0 when FlagProducer is clear
	batchSequenceOff   = 44 // uint64, version 2: the producer's sequence number of this batch

	// MinBatchHeaderSize is the header of version 1, the smallest: what a
	// reader needs to learn a batch's length, version and append time.
	MinBatchHeaderSize = 36
	// BatchHeaderSize is the header of version 2, the largest: the version 1
	// fields and then the producer id and sequence.
	BatchHeaderSize = 52

	// crcStart is where the bytes covered by the CRC begin: everything after the
	// CRC field, so the server can stamp the base offset and the append time
	// without recomputing it.
	crcStart = batchMagicOff

	// BatchMagicV1 is the first batch format version: a 36-byte header,
	// flags always zero. Still read, and still written for a batch that
	// uses nothing of version 2, so such a batch is byte for byte what it
	// was before version 2 existed.
	BatchMagicV1 = 1
	// BatchMagic is the current batch format version: a 52-byte header
	// with the producer id and sequence, and flags.
	BatchMagic = 2

	// MaxBatchSize bounds the length field of any batch (1 GiB). Callers apply
	// their own, usually much smaller, limit with ParseBatchLimit.
	MaxBatchSize = 1 << 30
	// MaxRawSize bounds what any compressed batch's body may decode to
	// (1 GiB); whoever decodes batches from others bounds RawSize more
	// tightly (ValidateBody).
	MaxRawSize = 1 << 30
	// MaxBatchMessages bounds the messages of one batch (1 Mi). Without it
	// a 64 MiB batch could hold 64 Mi empty messages, which every consumer
	// would have to split into as many messages.
	MaxBatchMessages = 1 << 20
)

// BatchFlags are the flags of a version 2 batch.
type BatchFlags uint16

// Batch flags. Other bits are reserved and must be zero.
const (
	// FlagProducer: the batch comes from an idempotent producer; its
	// producer id (not zero) and sequence are set.
	FlagProducer BatchFlags = 1 << 0
	// FlagHeaders: every message of the body carries a header section
	// (AppendHeaderMessage, SplitHeaders).
	FlagHeaders BatchFlags = 1 << 1

	batchFlagsKnown = FlagProducer | FlagHeaders
)

// Codec says how a batch body is encoded. Storage treats every codec's body
// as opaque bytes; only producers and consumers compress and decompress.
type Codec uint8

// Codecs.
const (
	CodecNone Codec = 0 // messages, each prefixed by its uvarint length
	CodecS2   Codec = 1 // the CodecNone body compressed with S2 (block format)
	CodecZstd Codec = 2 // the CodecNone body compressed with zstd (one frame)
)

// Valid reports whether c is a known codec.
func (c Codec) Valid() bool { return c <= CodecZstd }

func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecS2:
		return "s2"
	case CodecZstd:
		return "zstd"
	}
	return "unknown"
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Batch is a parsed view of one batch. Body and Raw borrow from the slice
// given to ParseBatch and are valid only as long as it is.
type Batch struct {
	BaseOffset int64  // offset of the first message
	AppendTime int64  // Unix nanoseconds, set by the server
	CRC        uint32 // CRC32C of Raw[24:]
	Magic      uint8  // format version: BatchMagicV1 or BatchMagic
	Codec      Codec
	Flags      BatchFlags // 0 in version 1
	Count      int        // number of messages, >= 1
	RawSize    int        // body size after decompression
	ProducerID uint64     // FlagProducer: the producer's id, else 0
	Sequence   uint64     // FlagProducer: the producer's sequence of this batch, else 0
	Body       []byte     // the encoded messages
	Raw        []byte     // the whole batch, header included
}

// Meta returns the version 2 fields of the batch.
func (bt *Batch) Meta() BatchMeta {
	return BatchMeta{ProducerID: bt.ProducerID, Sequence: bt.Sequence, Headers: bt.Flags&FlagHeaders != 0}
}

// BatchMeta holds what a version 2 batch adds: the idempotent producer's
// id and sequence, and whether messages carry headers. The zero BatchMeta
// makes a version 1 batch.
type BatchMeta struct {
	ProducerID uint64 // not 0: an idempotent producer's batch
	Sequence   uint64 // the producer's number for this batch (with ProducerID)
	Headers    bool   // every message carries a header section
}

// HeaderSize returns the size of the header of a batch carrying m:
// MinBatchHeaderSize for the zero BatchMeta, else BatchHeaderSize.
func (m BatchMeta) HeaderSize() int {
	if m == (BatchMeta{}) {
		return MinBatchHeaderSize
	}
	return BatchHeaderSize
}

func (m BatchMeta) flags() BatchFlags {
	var f BatchFlags
	if m.ProducerID != 0 {
		f |= FlagProducer
	}
	if m.Headers {
		f |= FlagHeaders
	}
	return f
}

// BatchSize returns the total size of the batch whose first bytes are b, as
// declared by its length field, or -1 when b is shorter than the length field.
func BatchSize(b []byte) int64 {
	if len(b) < 4 {
		return -1
	}
	return int64(binary.LittleEndian.Uint32(b[batchLengthOff:])) + 4
}

// ParseBatch parses the batch at the start of b, checking its header and
// lengths but not its CRC (see Batch.Verify). It returns the batch and its
// size in bytes. When b holds only part of a batch it returns
// ErrShortBatch: in a file that is a torn tail, on the wire an incomplete read.
func ParseBatch(b []byte) (Batch, int, error) {
	return ParseBatchLimit(b, MaxBatchSize)
}

// ParseBatchLimit is ParseBatch with a maximum total batch size.
func ParseBatchLimit(b []byte, limit int) (Batch, int, error) {
	var bt Batch
	if len(b) < MinBatchHeaderSize {
		if len(b) >= 4 {
			if err := checkBatchSize(BatchSize(b), limit); err != nil {
				return bt, 0, err
			}
		}
		return bt, 0, ErrShortBatch
	}
	size := BatchSize(b)
	if err := checkBatchSize(size, limit); err != nil {
		return bt, 0, err
	}
	hdr := MinBatchHeaderSize
	switch b[batchMagicOff] {
	case BatchMagicV1:
	case BatchMagic:
		hdr = BatchHeaderSize
		if size < BatchHeaderSize {
			return bt, 0, ErrBadLength
		}
	default:
		return bt, 0, ErrBadMagic
	}
	if int64(len(b)) < size {
		return bt, 0, ErrShortBatch
	}
	n := int(size)
	bt.Magic = b[batchMagicOff]
	bt.Codec = Codec(b[batchCodecOff])
	if !bt.Codec.Valid() {
		return bt, 0, ErrBadCodec
	}
	bt.Flags = BatchFlags(binary.LittleEndian.Uint16(b[batchFlagsOff:]))
	if hdr == BatchHeaderSize {
		bt.ProducerID = binary.LittleEndian.Uint64(b[batchProducerOff:])
		bt.Sequence = binary.LittleEndian.Uint64(b[batchSequenceOff:])
		// The producer fields are set exactly when the flag says so, so
		// that one batch has one reading.
		if bt.Flags&^batchFlagsKnown != 0 || (bt.Flags&FlagProducer != 0) != (bt.ProducerID != 0) ||
			bt.Flags&FlagProducer == 0 && bt.Sequence != 0 {
			return bt, 0, ErrBadFlags
		}
	} else if bt.Flags != 0 {
		return bt, 0, ErrBadFlags
	}
	count := binary.LittleEndian.Uint32(b[batchCountOff:])
	if count == 0 {
		return bt, 0, ErrBadCount
	}
	if count > MaxBatchMessages {
		return bt, 0, fmt.Errorf("%w: %d messages, at most %d in one batch (MaxBatchMessages)", ErrBadCount, count, MaxBatchMessages)
	}
	bt.BaseOffset = int64(binary.LittleEndian.Uint64(b[batchBaseOffsetOff:]))
	bt.AppendTime = int64(binary.LittleEndian.Uint64(b[batchAppendTimeOff:]))
	bt.CRC = binary.LittleEndian.Uint32(b[batchCRCOff:])
	bt.Count = int(count)
	bt.RawSize = int(binary.LittleEndian.Uint32(b[batchRawSizeOff:]))
	bt.Body = b[hdr:n:n]
	bt.Raw = b[:n:n]
	if bt.Codec == CodecNone && bt.RawSize != len(bt.Body) {
		return bt, 0, ErrBadCount
	}
	// Every message takes at least one byte (its length prefix), once
	// decompressed; with headers, two (and a header count).
	minSize := bt.Count
	if bt.Flags&FlagHeaders != 0 {
		minSize *= 2
	}
	if bt.RawSize < minSize {
		return bt, 0, ErrBadCount
	}
	return bt, n, nil
}

func checkBatchSize(size int64, limit int) error {
	if size < MinBatchHeaderSize {
		return ErrBadLength
	}
	if size > int64(limit) || size > MaxBatchSize {
		return ErrBatchTooLarge
	}
	return nil
}

// Verify checks the batch CRC.
func (bt *Batch) Verify() error {
	if crc32.Checksum(bt.Raw[crcStart:], castagnoli) != bt.CRC {
		return ErrCRCMismatch
	}
	return nil
}

// Validate checks the CRC and, for an uncompressed body, that it holds
// exactly Count well-formed messages. The body of a compressed batch is
// opaque here: its message count is checked by the consumer after
// decompression.
func (bt *Batch) Validate() error {
	if err := bt.Verify(); err != nil {
		return err
	}
	if bt.Codec != CodecNone {
		return nil
	}
	return bt.ValidateMessages(bt.Body)
}

// ValidateMessages checks that body, this batch's body or its decoded
// form, holds exactly Count well-formed messages: with FlagHeaders, each
// with a well-formed header section.
func (bt *Batch) ValidateMessages(body []byte) error {
	if bt.Flags&FlagHeaders != 0 {
		return ValidateHeaderMessages(body, bt.Count)
	}
	return ValidateMessages(body, bt.Count)
}

// ValidateMessages checks that body holds exactly count length-prefixed
// messages and nothing else.
func ValidateMessages(body []byte, count int) error {
	// This walk runs over every appended batch, so it avoids a call per
	// message and takes one-byte lengths (messages under 128 bytes) inline.
	p := 0
	for range count {
		if p >= len(body) {
			return ErrBadMessage
		}
		l := uint64(body[p])
		if l < 0x80 {
			p++
		} else {
			var n int
			if l, n = binary.Uvarint(body[p:]); n <= 0 {
				return ErrBadMessage
			}
			p += n
		}
		if l > uint64(len(body)-p) {
			return ErrBadMessage
		}
		p += int(l)
	}
	if p != len(body) {
		return ErrBadCount
	}
	return nil
}

// NextMessage splits the first length-prefixed message off an uncompressed
// body. msg borrows from body.
func NextMessage(body []byte) (msg, rest []byte, err error) {
	l, n := binary.Uvarint(body)
	if n <= 0 {
		return nil, nil, ErrBadMessage
	}
	if l > uint64(len(body)-n) {
		return nil, nil, ErrBadMessage
	}
	end := n + int(l)
	return body[n:end:end], body[end:], nil
}

// AppendMessage appends one length-prefixed message to an uncompressed body.
func AppendMessage(dst, msg []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(msg)))
	return append(dst, msg...)
}

// MessagesSize returns the size of the uncompressed body holding msgs.
func MessagesSize(msgs ...[]byte) int {
	n := 0
	for _, m := range msgs {
		n += uvarintLen(uint64(len(m))) + len(m)
	}
	return n
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// AppendBatch appends an uncompressed version 1 batch holding msgs to dst,
// with its CRC set and the server-stamped fields zero. It is the common
// producer path.
func AppendBatch(dst []byte, msgs ...[]byte) []byte {
	return AppendBatchMeta(dst, BatchMeta{}, msgs...)
}

// AppendBatchMeta is AppendBatch for a batch carrying meta (a version 2
// batch unless meta is zero). With meta.Headers, each of msgs must be a
// message with its header section (AppendHeaders).
func AppendBatchMeta(dst []byte, meta BatchMeta, msgs ...[]byte) []byte {
	start := len(dst)
	hdr := meta.HeaderSize()
	dst = append(dst, make([]byte, hdr)...)
	for _, m := range msgs {
		dst = AppendMessage(dst, m)
	}
	SealBatchMeta(dst[start:], meta, CodecNone, len(msgs), len(dst)-start-hdr)
	return dst
}

// AppendBatchBody appends a version 1 batch around an already encoded
// body: body is an uncompressed body (CodecNone) or one compressed with
// codec, count is the number of messages and rawSize the uncompressed
// body size.
func AppendBatchBody(dst []byte, codec Codec, count, rawSize int, body []byte) []byte {
	return AppendBatchBodyMeta(dst, BatchMeta{}, codec, count, rawSize, body)
}

// AppendBatchBodyMeta is AppendBatchBody for a batch carrying meta.
func AppendBatchBodyMeta(dst []byte, meta BatchMeta, codec Codec, count, rawSize int, body []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, meta.HeaderSize())...)
	dst = append(dst, body...)
	SealBatchMeta(dst[start:], meta, codec, count, rawSize)
	return dst
}

// SealBatch fills in the header of b, a version 1 batch whose body already
// follows the MinBatchHeaderSize header bytes, and computes its CRC. Base
// offset and append time are left as they are.
func SealBatch(b []byte, codec Codec, count, rawSize int) {
	SealBatchMeta(b, BatchMeta{}, codec, count, rawSize)
}

// SealBatchMeta is SealBatch for a batch carrying meta, whose body follows
// meta.HeaderSize() header bytes.
func SealBatchMeta(b []byte, meta BatchMeta, codec Codec, count, rawSize int) {
	binary.LittleEndian.PutUint32(b[batchLengthOff:], uint32(len(b)-4))
	b[batchMagicOff] = BatchMagicV1
	b[batchCodecOff] = byte(codec)
	binary.LittleEndian.PutUint16(b[batchFlagsOff:], uint16(meta.flags()))
	binary.LittleEndian.PutUint32(b[batchCountOff:], uint32(count))
	binary.LittleEndian.PutUint32(b[batchRawSizeOff:], uint32(rawSize))
	if meta.HeaderSize() == BatchHeaderSize {
		b[batchMagicOff] = BatchMagic
		seq := meta.Sequence
		if meta.ProducerID == 0 {
			seq = 0
		}
		binary.LittleEndian.PutUint64(b[batchProducerOff:], meta.ProducerID)
		binary.LittleEndian.PutUint64(b[batchSequenceOff:], seq)
	}
	binary.LittleEndian.PutUint32(b[batchCRCOff:], crc32.Checksum(b[crcStart:], castagnoli))
}

// SetBatchProducer rewrites the producer id and sequence of b, a version
// 2 batch with FlagProducer (pid not 0), and its CRC: the same messages
// sent under another producer.
func SetBatchProducer(b []byte, pid, seq uint64) {
	binary.LittleEndian.PutUint64(b[batchProducerOff:], pid)
	binary.LittleEndian.PutUint64(b[batchSequenceOff:], seq)
	binary.LittleEndian.PutUint32(b[batchCRCOff:], crc32.Checksum(b[crcStart:], castagnoli))
}

// StampBatch writes the server-stamped fields of the batch at the start of b.
// The CRC does not cover them, so it stays valid.
func StampBatch(b []byte, baseOffset, appendTime int64) {
	binary.LittleEndian.PutUint64(b[batchBaseOffsetOff:], uint64(baseOffset))
	binary.LittleEndian.PutUint64(b[batchAppendTimeOff:], uint64(appendTime))
}

// Messages calls fn for each message of an uncompressed body, in order, with
// the offset of each message starting at base. It stops at the first error
// fn returns.
func Messages(body []byte, count int, base int64, fn func(offset int64, msg []byte) error) error {
	for i := 0; i < count; i++ {
		msg, rest, err := NextMessage(body)
		if err != nil {
			return err
		}
		if err := fn(base+int64(i), msg); err != nil {
			return err
		}
		body = rest
	}
	if len(body) != 0 {
		return ErrBadCount
	}
	return nil
}

// BatchProducer returns the producer id and sequence of the batch header
// at the start of hdr (BatchHeaderSize bytes of a version 2 batch with
// FlagProducer), or 0, 0 for any other header.
func BatchProducer(hdr []byte) (pid, seq uint64) {
	if len(hdr) < BatchHeaderSize || hdr[batchMagicOff] != BatchMagic ||
		BatchFlags(binary.LittleEndian.Uint16(hdr[batchFlagsOff:]))&FlagProducer == 0 {
		return 0, 0
	}
	return binary.LittleEndian.Uint64(hdr[batchProducerOff:]), binary.LittleEndian.Uint64(hdr[batchSequenceOff:])
}

// BatchAppendTime returns the append time stamped in the batch header at the
// start of hdr, or 0 when hdr is shorter than a header.
func BatchAppendTime(hdr []byte) int64 {
	if len(hdr) < MinBatchHeaderSize {
		return 0
	}
	return int64(binary.LittleEndian.Uint64(hdr[batchAppendTimeOff:]))
}

// UnixNano is t in Unix nanoseconds, clamped to the int64 range of append
// times: time.Time.UnixNano alone wraps around for times before 1678 or
// after 2262, so a far-off time would turn into a near one.
func UnixNano(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, math.MinInt64)):
		return math.MinInt64
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}
