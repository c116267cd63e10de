package broker_test

import (
	"bytes"
	"net"
	"testing"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
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

// Large frames pipelined on one connection, with fsync on: each produce is
// handed to storage's group commit and takes the buffer its frame was
// gathered in (take), while the next frame is gathered in another. Every
// batch reads back as sent, at its own offsets.
func TestLargeFramesTakenWhole(t *testing.T) {
	s := brokertest.Start(t, 1, func(o *storage.Options, _ *broker.Config) { o.Fsync = storage.FsyncAlways })
	var reqs []byte
	var sent [][]byte
	for f := range 3 {
		msgs := make([][]byte, 100)
		for i := range msgs {
			msgs[i] = bytes.Repeat([]byte{byte(f*100 + i)}, 4000)
		}
		batch := protocol.AppendBatch(nil, msgs...)
		sent = append(sent, batch)
		reqs = protocol.AppendProduceRequest(reqs, uint32(f+1), "taken", protocol.ProduceCreateTopic, batch)
	}
	c, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		for rest := reqs; len(rest) > 0; {
			n := min(len(rest), 65521)
			if _, err := c.Write(rest[:n]); err != nil {
				return
			}
			rest = rest[n:]
		}
	}()
	for f := range sent {
		h, p := readFrame(t, c)
		pr, err := protocol.ParseProduceResponse(p)
		if h.Code != protocol.CodeOK || err != nil || h.CorrID != uint32(f+1) || pr.BaseOffset != int64(f*100) {
			t.Fatalf("produce %d: %+v %+v %v", f, h, pr, err)
		}
	}
	for f, batch := range sent {
		if _, err := c.Write(protocol.AppendConsumeRequest(nil, 10, "taken", int64(f*100), 100, 0, 0)); err != nil {
			t.Fatal(err)
		}
		h, p := readFrame(t, c)
		cr, err := protocol.ParseConsumeResponse(p)
		if h.Code != protocol.CodeOK || err != nil {
			t.Fatalf("consume %d: %+v %v", f, h, err)
		}
		bt, _, err := protocol.ParseBatch(cr.Batches)
		if err != nil || bt.Verify() != nil || !bytes.Equal(bt.Body, batch[protocol.MinBatchHeaderSize:]) {
			t.Fatalf("batch %d read back: %v", f, err)
		}
	}
}
