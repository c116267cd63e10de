package protocol

import (
	"fmt"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// maxDecodedBody bounds what a compressed body may claim to decode to. A
// body decodes into exactly RawSize bytes, allocated once: the zstd decoder
// is held to the capacity it is given (WithDecodeAllCapLimit), so a small
// body that expands past what its batch declares fails at RawSize instead
// of growing its output (or allocating what its frame header claims).
const maxDecodedBody = MaxRawSize

var (
	zstdEnc = sync.OnceValue(func() *zstd.Encoder {
		e, _ := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
		return e
	})
	zstdDec = sync.OnceValue(func() *zstd.Decoder {
		d, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxDecodedBody), zstd.WithDecodeAllCapLimit(true))
		return d
	})
)

// BatchCodec returns the codec field of the batch whose header starts b,
// without parsing or checking anything else (ParseBatch does): CodecNone
// when b is shorter than a header. A server uses it to learn, for the cost
// of one byte, whether checking a batch means decoding it.
func BatchCodec(b []byte) Codec {
	if len(b) < MinBatchHeaderSize {
		return CodecNone
	}
	return Codec(b[batchCodecOff])
}

// AppendBatchCodec appends one batch of msgs, its body compressed with
// codec, to dst. CodecNone is AppendBatch.
func AppendBatchCodec(dst []byte, codec Codec, msgs ...[]byte) []byte {
	if codec == CodecNone {
		return AppendBatch(dst, msgs...)
	}
	raw := make([]byte, 0, MessagesSize(msgs...))
	for _, m := range msgs {
		raw = AppendMessage(raw, m)
	}
	return AppendBatchRaw(dst, codec, len(msgs), raw)
}

// AppendBatchRaw appends a batch of count messages whose uncompressed body
// (length-prefixed messages) is raw, compressed with codec.
func AppendBatchRaw(dst []byte, codec Codec, count int, raw []byte) []byte {
	return AppendBatchRawMeta(dst, BatchMeta{}, codec, count, raw)
}

// AppendBatchRawMeta is AppendBatchRaw for a batch carrying meta.
func AppendBatchRawMeta(dst []byte, meta BatchMeta, codec Codec, count int, raw []byte) []byte {
	return AppendBatchBodyMeta(dst, meta, codec, count, len(raw), CompressBody(codec, raw))
}

// CompressBody returns raw, an uncompressed body, compressed with codec:
// raw itself for CodecNone, a new slice otherwise.
func CompressBody(codec Codec, raw []byte) []byte {
	switch codec {
	case CodecS2:
		return s2.Encode(nil, raw)
	case CodecZstd:
		return zstdEnc().EncodeAll(raw, nil)
	}
	return raw
}

// DecodeBody returns the uncompressed body of a verified batch: Body itself
// for CodecNone, a new slice otherwise. A body that does not decode to
// exactly RawSize bytes returns ErrBadBody. RawSize is what it allocates:
// a caller that takes batches from others bounds it first (ValidateBody).
func (bt *Batch) DecodeBody() ([]byte, error) { return bt.DecodeBodyInto(nil) }

// DecodeBodyInto is DecodeBody decoding into dst's memory when it is large
// enough (a compressed body only; CodecNone returns Body).
func (bt *Batch) DecodeBodyInto(dst []byte) ([]byte, error) {
	if bt.Codec != CodecNone && bt.RawSize > maxDecodedBody {
		return nil, fmt.Errorf("%w: body decodes to %d bytes, over the limit of %d", ErrBadBody, bt.RawSize, maxDecodedBody)
	}
	if bt.Codec != CodecNone && cap(dst) < bt.RawSize {
		dst = make([]byte, 0, bt.RawSize)
	}
	switch bt.Codec {
	case CodecNone:
		return bt.Body, nil
	case CodecS2:
		n, err := s2.DecodedLen(bt.Body)
		if err != nil {
			return nil, fmt.Errorf("%w: s2: %w", ErrBadBody, err)
		}
		if n != bt.RawSize {
			return nil, fmt.Errorf("%w: s2 body decodes to %d bytes, header says %d", ErrBadBody, n, bt.RawSize)
		}
		raw, err := s2.Decode(dst[:n], bt.Body)
		if err != nil {
			return nil, fmt.Errorf("%w: s2: %w", ErrBadBody, err)
		}
		return raw, nil
	case CodecZstd:
		raw, err := zstdDec().DecodeAll(bt.Body, dst[:0:bt.RawSize])
		if err != nil {
			return nil, fmt.Errorf("%w: zstd (the body must decode to the %d bytes its batch declares): %w", ErrBadBody, bt.RawSize, err)
		}
		if len(raw) != bt.RawSize {
			return nil, fmt.Errorf("%w: zstd body decodes to %d bytes, header says %d", ErrBadBody, len(raw), bt.RawSize)
		}
		return raw, nil
	}
	return nil, fmt.Errorf("%w: %d", ErrBadCodec, bt.Codec)
}

// ValidateBody is Validate for a batch from an untrusted producer, whose
// compressed body is not opaque: it must declare at most maxRaw decoded
// bytes, decode to exactly that, and hold exactly Count well-formed
// messages. The body is decoded into scratch's memory when it is large
// enough; ValidateBody returns that memory for reuse.
func (bt *Batch) ValidateBody(maxRaw int, scratch []byte) ([]byte, error) {
	if err := bt.Verify(); err != nil {
		return scratch, err
	}
	if bt.Codec == CodecNone {
		return scratch, bt.ValidateMessages(bt.Body)
	}
	if bt.RawSize > maxRaw {
		return scratch, fmt.Errorf("%w: body decodes to %d bytes, over the limit of %d", ErrBadBody, bt.RawSize, maxRaw)
	}
	raw, err := bt.DecodeBodyInto(scratch)
	if err != nil {
		return scratch, err
	}
	return raw[:0], bt.ValidateMessages(raw)
}
