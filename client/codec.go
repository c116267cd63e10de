package client

import (
	"fmt"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"

	"github.com/haraqa/haraqa/protocol"
)

var (
	zstdEnc = sync.OnceValue(func() *zstd.Encoder {
		e, _ := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
		return e
	})
	zstdDec = sync.OnceValue(func() *zstd.Decoder {
		d, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(1<<30))
		return d
	})
)

// encodeBatch builds one batch of msgs with codec.
func encodeBatch(dst []byte, codec protocol.Codec, msgs [][]byte) []byte {
	if codec == protocol.CodecNone {
		return protocol.AppendBatch(dst, msgs...)
	}
	raw := make([]byte, 0, protocol.MessagesSize(msgs...))
	for _, m := range msgs {
		raw = protocol.AppendMessage(raw, m)
	}
	return encodeBody(dst, codec, len(msgs), raw)
}

// encodeBody builds a batch around raw, count uncompressed messages.
func encodeBody(dst []byte, codec protocol.Codec, count int, raw []byte) []byte {
	body := raw
	switch codec {
	case protocol.CodecS2:
		body = s2.Encode(nil, raw)
	case protocol.CodecZstd:
		body = zstdEnc().EncodeAll(raw, nil)
	}
	return protocol.AppendBatchBody(dst, codec, count, len(raw), body)
}

// batchBody returns the uncompressed body of a verified batch.
func batchBody(bt *protocol.Batch) ([]byte, error) {
	switch bt.Codec {
	case protocol.CodecNone:
		return bt.Body, nil
	case protocol.CodecS2:
		n, err := s2.DecodedLen(bt.Body)
		if err != nil || n != bt.RawSize {
			return nil, fmt.Errorf("%w: s2 body of %d bytes, header says %d: %v", ErrCorrupt, n, bt.RawSize, err)
		}
		raw, err := s2.Decode(make([]byte, n), bt.Body)
		if err != nil {
			return nil, fmt.Errorf("%w: s2: %w", ErrCorrupt, err)
		}
		return raw, nil
	case protocol.CodecZstd:
		raw, err := zstdDec().DecodeAll(bt.Body, make([]byte, 0, bt.RawSize))
		if err != nil || len(raw) != bt.RawSize {
			return nil, fmt.Errorf("%w: zstd body: %d bytes, header says %d: %v", ErrCorrupt, len(raw), bt.RawSize, err)
		}
		return raw, nil
	}
	return nil, fmt.Errorf("%w: codec %d", ErrCorrupt, bt.Codec)
}
