package client

import (
	"fmt"

	"github.com/haraqa/haraqa/protocol"
)

// maxDecoded is the most bytes one consumed batch may declare it decodes
// to: the response limit (WithMaxResponseBytes, by default what the client
// may produce), so that decoding a small compressed batch never allocates
// more than a response the client accepts could hold. The server bounds
// what it stores the same way (-max-frame).
func (o *options) maxDecoded() int {
	return min(o.responseLimit(), protocol.MaxRawSize)
}

// batchBody returns the uncompressed body of a verified batch, allocating
// at most its declared raw size, which must be within maxRaw.
func batchBody(bt *protocol.Batch, maxRaw int) ([]byte, error) {
	if bt.Codec != protocol.CodecNone && bt.RawSize > maxRaw {
		return nil, fmt.Errorf("%w: batch at offset %d declares %d bytes decompressed, over the client's limit of %d bytes; raise it with WithMaxResponseBytes",
			ErrResponseTooLarge, bt.BaseOffset, bt.RawSize, maxRaw)
	}
	body, err := bt.DecodeBody()
	if err != nil {
		return nil, fmt.Errorf("%w: batch at offset %d: %w", ErrCorrupt, bt.BaseOffset, err)
	}
	return body, nil
}
