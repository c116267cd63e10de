package client

import (
	"fmt"

	"github.com/haraqa/haraqa/protocol"
)

// batchBody returns the uncompressed body of a verified batch.
func batchBody(bt *protocol.Batch) ([]byte, error) {
	body, err := bt.DecodeBody()
	if err != nil {
		return nil, fmt.Errorf("%w: batch at offset %d: %w", ErrCorrupt, bt.BaseOffset, err)
	}
	return body, nil
}
