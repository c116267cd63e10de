package broker_test

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
)

func readFrame(t *testing.T, c net.Conn) (protocol.ResponseHeader, []byte) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var l [4]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		t.Fatal(err)
	}
	n := int(l[0]) | int(l[1])<<8 | int(l[2])<<16 | int(l[3])<<24
	f := make([]byte, 4+n)
	copy(f, l[:])
	if _, err := io.ReadFull(c, f[4:]); err != nil {
		t.Fatal(err)
	}
	h, p, err := protocol.ParseResponseHeader(f)
	if err != nil {
		t.Fatal(err)
	}
	return h, p
}

func TestSmokeProduceConsume(t *testing.T) {
	s := brokertest.Start(t, 2)
	c, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var req []byte
	req = protocol.AppendProduceRequest(req, 1, "t", protocol.ProduceCreateTopic, protocol.AppendBatch(nil, []byte("a"), []byte("bc")))
	req = protocol.AppendConsumeRequest(req, 2, "t", 0, 10, 0, 0)
	req = protocol.AppendConsumeRequest(req, 3, "t", 2, 10, 0, 2000)
	c.Write(req)
	h, p := readFrame(t, c)
	pr, err := protocol.ParseProduceResponse(p)
	if h.CorrID != 1 || h.Code != protocol.CodeOK || err != nil || pr.BaseOffset != 0 || pr.Count != 2 {
		t.Fatalf("produce %+v %+v %v", h, pr, err)
	}
	h, p = readFrame(t, c)
	cr, err := protocol.ParseConsumeResponse(p)
	if h.CorrID != 2 || err != nil || !bytes.Contains(cr.Batches, []byte("bc")) {
		t.Fatalf("consume %+v %v", h, err)
	}
	// The long poll (corr 3) is woken by a produce on another connection.
	c2, _ := net.Dial("tcp", s.Addr)
	defer c2.Close()
	c2.Write(protocol.AppendProduceRequest(nil, 9, "t", 0, protocol.AppendBatch(nil, []byte("late"))))
	h, p = readFrame(t, c)
	cr, err = protocol.ParseConsumeResponse(p)
	if h.CorrID != 3 || err != nil || !bytes.Contains(cr.Batches, []byte("late")) {
		t.Fatalf("long poll %+v %v %q", h, err, cr.Batches)
	}
	st := s.Broker.Stats()
	if st.ZeroCopyBytes == 0 {
		t.Fatalf("no zero-copy bytes: %+v", st)
	}
}
