package protocol

import (
	"fmt"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// maxDecodedBody bounds what a zstd body may claim to decode to; a batch's
// RawSize is checked against the decoded length as well.
const maxDecodedBody = 1 << 30

var (
	zstdEnc = sync.OnceValue(func() *zstd.Encoder {
		e, _ := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
		return e
	})
	zstdDec = sync.OnceValue(func() *zstd.Decoder {
		d, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxDecodedBody))
		return d
	})
)

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
	body := raw
	switch codec {
	case CodecS2:
		body = s2.Encode(nil, raw)
	case CodecZstd:
		body = zstdEnc().EncodeAll(raw, nil)
	}
	return AppendBatchBody(dst, codec, count, len(raw), body)
}

// DecodeBody returns the uncompressed body of a verified batch: Body itself
// for CodecNone, a new slice otherwise. A body that does not decode to
// exactly RawSize bytes returns ErrBadBody.
func (bt *Batch) DecodeBody() ([]byte, error) {
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
		raw, err := s2.Decode(make([]byte, n), bt.Body)
		if err != nil {
			return nil, fmt.Errorf("%w: s2: %w", ErrBadBody, err)
		}
		return raw, nil
	case CodecZstd:
		if bt.RawSize > maxDecodedBody {
			return nil, fmt.Errorf("%w: zstd body of %d bytes is over the limit", ErrBadBody, bt.RawSize)
		}
		raw, err := zstdDec().DecodeAll(bt.Body, make([]byte, 0, bt.RawSize))
		if err != nil {
			return nil, fmt.Errorf("%w: zstd: %w", ErrBadBody, err)
		}
		if len(raw) != bt.RawSize {
			return nil, fmt.Errorf("%w: zstd body decodes to %d bytes, header says %d", ErrBadBody, len(raw), bt.RawSize)
		}
		return raw, nil
	}
	return nil, fmt.Errorf("%w: %d", ErrBadCodec, bt.Codec)
}
