package broker_test

import (
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// TestMaxControlRate: a connection pipelining control requests past
// -max-control-rate is not refused but paced: 300 pings at 1,000 a second
// in bursts of 100 take at least 0.2 s, every one answered in order;
// another connection's ping and the same connection's produces are not
// held, and the pauses are counted.
func TestMaxControlRate(t *testing.T) {
	const rate, n = 1000, 300
	s := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) { c.MaxControlRate = rate })
	flood := dialRaw(t, s.Addr)
	var req []byte
	for i := range n {
		req = protocol.AppendPingRequest(req, uint32(i+1))
	}
	begun := time.Now()
	flood.write(req)
	other := dialRaw(t, s.Addr)
	other.ping() // its own allowance
	for i := range n {
		r := flood.read()
		if r.Op != protocol.OpPing || r.CorrID != uint32(i+1) || r.Code != protocol.CodeOK {
			t.Fatalf("answer %d: %+v, want ping %d ok", i, r.ResponseHeader, i+1)
		}
	}
	if took, least := time.Since(begun), time.Duration(n-rate/10)*time.Second/rate; took < least {
		t.Fatalf("%d pings answered in %s: faster than %d a second allows (%s)", n, took, rate, least)
	}
	if p := s.Broker.Stats().ControlPauses; p == 0 {
		t.Fatal("no control pause counted")
	}
	// Produces are not control requests: 300 of them are not paced.
	p := dialRaw(t, s.Addr)
	p.produce("t", protocol.ProduceCreateTopic, "m")
	before := s.Broker.Stats().ControlPauses
	var prod []byte
	for i := range n {
		prod = protocol.AppendProduceRequest(prod, uint32(i+1), "t", 0, protocol.AppendBatch(nil, []byte("m")))
	}
	p.write(prod)
	for range n {
		if r := p.read(); r.Code != protocol.CodeOK {
			t.Fatalf("produce: %+v", r.ResponseHeader)
		}
	}
	if after := s.Broker.Stats().ControlPauses; after != before {
		t.Fatalf("produces were paced: %d control pauses during them", after-before)
	}
}
