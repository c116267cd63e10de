package client

import (
	"testing"

	"github.com/haraqa/haraqa/protocol"
)

// TestResponseLimitFollowsBatchSize: whatever the client may produce, it
// can read back, a consume response being at least one whole batch.
func TestResponseLimitFollowsBatchSize(t *testing.T) {
	for _, batch := range []int{1 << 20, protocol.DefaultMaxFrameSize, 100 << 20, 1 << 30} {
		o := defaultOptions()
		WithMaxBatchBytes(batch)(&o)
		// A consume response: header, consume header, then the batch.
		if need := batch + protocol.HeaderSize + 64; o.responseLimit() < need {
			t.Errorf("max batch %d: response limit %d, under the %d a response with it needs", batch, o.responseLimit(), need)
		}
		if o.responseLimit() < protocol.DefaultMaxFrameSize {
			t.Errorf("max batch %d: response limit %d is under the server's default frame limit", batch, o.responseLimit())
		}
	}
	o := defaultOptions()
	WithMaxResponseBytes(12345)(&o)
	if o.responseLimit() != 12345 {
		t.Fatalf("WithMaxResponseBytes(12345): limit %d", o.responseLimit())
	}
}
