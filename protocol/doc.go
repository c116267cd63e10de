// Package protocol holds haraqa's byte formats: the batch, which is the unit
// that producers send, storage keeps on disk and consumers receive, byte for
// byte the same everywhere. It is pure []byte in and out and imports nothing
// else of the module.
//
// # Conventions
//
// All integers are little-endian. Encoders append to a caller's buffer
// (AppendX(dst, ...) []byte). Decoders borrow from their input (ParseX(b)
// returns views into b, valid as long as b is) and check every length before
// using it: a bad length is an error, never a panic or an allocation.
//
// # Batch
//
// A batch holds one or more messages. Its 36-byte header:
//
//	offset size field        meaning
//	0      4    length       uint32, bytes after this field: 32 + len(body)
//	4      8    base offset  int64, offset of the first message (set by the server)
//	12     8    append time  int64, Unix nanoseconds (set by the server)
//	20     4    crc          uint32, CRC32C (Castagnoli) of bytes [24, 4+length)
//	24     1    magic        uint8, format version, 1
//	25     1    codec        uint8, 0 none, 1 s2, 2 zstd
//	26     2    flags        uint16, reserved, 0
//	28     4    count        uint32, number of messages, 1 or more
//	32     4    raw size     uint32, body size once decompressed
//	36     -    body         length-32 bytes
//
// The CRC covers everything after itself (magic, codec, flags, count, raw
// size and body) but not the length, base offset or append time: the server
// stamps the last two into the batch as it stores it without recomputing the
// CRC, and the length is checked by the framing around it. A producer sends
// zeros in the stamped fields; the server overwrites them.
//
// The body of an uncompressed batch (codec 0) is count messages, each a
// uvarint length (encoding/binary's Uvarint: 7 bits per byte, low bits
// first, high bit set on all but the last byte) followed by that many bytes.
// The body must end exactly after the last message, and raw size equals the
// body length. With codec 1 the body is that same byte sequence compressed
// with S2 in block format; with codec 2, one zstd frame. Raw size lets a
// consumer bound its decompression buffer; the server never decompresses.
//
// Message offsets in a batch are base offset, base offset + 1, ... base
// offset + count - 1; every message of a batch shares its append time.
//
// A batch is valid when its length is at least 32 and within the reader's
// limit, magic is 1, codec is known, flags are 0, count is at least 1, raw
// size is at least count (every message takes one length byte or more), raw
// size equals the body length for codec 0, the CRC matches, and for codec 0
// the body parses into exactly count messages.
package protocol
