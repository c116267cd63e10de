package broker_test

import (
	"bytes"
	"net"
	"testing"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
)

// A frame far larger than one read arrives in many pieces; it is gathered
// whole, stored, and read back byte for byte. A connection that dies in the
// middle of one leaves the server serving.
func TestLargeFrameInPieces(t *testing.T) {
	s := brokertest.Start(t, 1)
	msgs := make([][]byte, 300)
	for i := range msgs {
		msgs[i] = bytes.Repeat([]byte{byte(i)}, 4000+i)
	}
	batch := protocol.AppendBatch(nil, msgs...)
	req := protocol.AppendProduceRequest(nil, 1, "big", protocol.ProduceCreateTopic, batch)
	if len(req) < 1<<20 {
		t.Fatalf("frame of %d bytes, want over 1 MiB", len(req))
	}

	c, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for rest := req; len(rest) > 0; {
		n := min(len(rest), 7919) // odd-sized pieces, each its own write
		if _, err := c.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	h, p := readFrame(t, c)
	pr, err := protocol.ParseProduceResponse(p)
	if h.Code != protocol.CodeOK || err != nil || pr.Count != uint32(len(msgs)) {
		t.Fatalf("produce of a large frame: %+v %+v %v", h, pr, err)
	}

	// Half a large frame, then the connection closes.
	c2, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Write(req[:len(req)/2]); err != nil {
		t.Fatal(err)
	}
	c2.Close()

	// The stored batch reads back as sent, on the first connection.
	if _, err := c.Write(protocol.AppendConsumeRequest(nil, 2, "big", 0, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	h, p = readFrame(t, c)
	cr, err := protocol.ParseConsumeResponse(p)
	if h.Code != protocol.CodeOK || err != nil {
		t.Fatalf("consume: %+v %v", h, err)
	}
	bt, _, err := protocol.ParseBatch(cr.Batches)
	if err != nil || bt.Verify() != nil || !bytes.Equal(bt.Body, protocol.AppendBatch(nil, msgs...)[protocol.MinBatchHeaderSize:]) {
		t.Fatalf("read back: %v", err)
	}
}
