package broker_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/auth"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// Two tenants with the produce right on one shared topic.
const (
	tokVictim   = "token-victim"
	tokAttacker = "token-attacker"
)

func startShared(t *testing.T) *brokertest.Server {
	t.Helper()
	r, err := auth.Parse(strings.NewReader(
		sha(tokVictim)+" produce,consume shared\n"+
			sha(tokAttacker)+" produce,consume shared\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	return brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) { c.Auth = auth.New(r) })
}

// The review's attack, end to end with two tokens: the attacker reads the
// victim's producer id and sequence from a consume and sends the victim's
// next sequences first. Every one is refused with code 25; the victim's
// batches are all stored once, its retry from a new connection is
// answered with its first offset, and after a restart the attacker is
// still fenced and the victim can still retry.
func TestProducerFencedE2E(t *testing.T) {
	s := startShared(t)
	const pid = 0xfeedface
	victimBatch := func(seq uint64) []byte {
		return protocol.AppendBatchMeta(nil, protocol.BatchMeta{ProducerID: pid, Sequence: seq}, []byte(fmt.Sprintf("victim-%d", seq)))
	}
	produce := func(c *rawConn, b []byte) []byte {
		return protocol.AppendProduceRequest(nil, c.id(), "shared", protocol.ProduceCreateTopic, b)
	}
	v := dialRaw(t, s.Addr)
	v.hello(tokVictim)
	for seq := range uint64(3) {
		v.ok(produce(v, victimBatch(seq)))
	}
	a := dialRaw(t, s.Addr)
	a.hello(tokAttacker)
	cr := a.consume("shared", 2, 1, 1<<20, 0)
	bt, _, err := protocol.ParseBatch(cr.Batches)
	if err != nil {
		t.Fatal(err)
	}
	if bt.ProducerID != pid || bt.Sequence != 2 {
		t.Fatalf("consumed producer %#x seq %d, want %#x seq 2", bt.ProducerID, bt.Sequence, pid)
	}
	for seq := bt.Sequence + 1; seq < bt.Sequence+14; seq++ {
		forged := protocol.AppendBatchMeta(nil, protocol.BatchMeta{ProducerID: pid, Sequence: seq}, []byte("forged"))
		a.fail(produce(a, forged), protocol.CodeProducerFenced)
	}
	for seq := uint64(3); seq < 16; seq++ {
		v.ok(produce(v, victimBatch(seq)))
	}
	// The victim's retry on a new connection, with its token.
	v2 := dialRaw(t, s.Addr)
	v2.hello(tokVictim)
	if pr, err := protocol.ParseProduceResponse(v2.ok(produce(v2, victimBatch(15)))); err != nil || pr.BaseOffset != 15 {
		t.Fatalf("victim's retry: %+v, %v; want base 15", pr, err)
	}
	check := func(s *brokertest.Server, want int) {
		t.Helper()
		c := dialRaw(t, s.Addr)
		c.hello(tokVictim)
		ms := messagesIn(t, c.consume("shared", 0, 1000, 1<<20, 0), 0)
		if len(ms) != want {
			t.Fatalf("%d messages stored, want %d: %v", len(ms), want, ms)
		}
		for i, m := range ms {
			if m.Data != fmt.Sprintf("victim-%d", i) {
				t.Fatalf("offset %d holds %q, want victim-%d", i, m.Data, i)
			}
		}
	}
	check(s, 16)
	s2, err := s.Restart()
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	a = dialRaw(t, s2.Addr)
	a.hello(tokAttacker)
	a.fail(produce(a, protocol.AppendBatchMeta(nil, protocol.BatchMeta{ProducerID: pid, Sequence: 16}, []byte("forged"))), protocol.CodeProducerFenced)
	v = dialRaw(t, s2.Addr)
	v.hello(tokVictim)
	if pr, err := protocol.ParseProduceResponse(v.ok(produce(v, victimBatch(15)))); err != nil || pr.BaseOffset != 15 {
		t.Fatalf("victim's retry after a restart: %+v, %v; want base 15", pr, err)
	}
	v.ok(produce(v, victimBatch(16)))
	check(s2, 17)
}
