package client_test

import (
	"errors"
	"testing"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// A server that forgot the Client's producer to make room for others
// refuses its next batch (code 26, a sequence other than 0): the Client,
// which had never sent that batch, sends it again under a fresh producer
// id, and it is stored once; the codes 25 and 26 match their sentinels
// and are not retried.
func TestClientUnknownProducer(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1, func(o *storage.Options, _ *broker.Config) { o.MaxProducers = 4 })
	c := dial(t, srv.Addr)
	ctx := testCtx(t)
	if err := c.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Produce(ctx, "t", []byte("first")); err != nil {
		t.Fatal(err)
	}
	// Four other producers push the Client's out of the table.
	for pid := uint64(1); pid <= 4; pid++ {
		b := protocol.AppendBatchMeta(nil, protocol.BatchMeta{ProducerID: pid}, []byte("other"))
		if _, err := srv.Log(t, "t").Append(b, storage.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	base, err := c.Produce(ctx, "t", []byte("second"))
	if err != nil {
		t.Fatalf("produce after the producer was forgotten: %v", err)
	}
	if base != 5 {
		t.Fatalf("base %d, want 5", base)
	}
	if _, err := c.Produce(ctx, "t", []byte("third")); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, c, "t")
	want := []string{"first", "other", "other", "other", "other", "second", "third"}
	if len(got) != len(want) {
		t.Fatalf("stored %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("stored %q, want %q", got, want)
		}
	}
	for code, sentinel := range map[client.Code]error{
		client.CodeProducerFenced:  client.ErrProducerFenced,
		client.CodeUnknownProducer: client.ErrUnknownProducer,
	} {
		if e := (&client.Error{Op: protocol.OpProduce, Code: code}); !errors.Is(e, sentinel) {
			t.Fatalf("code %v does not match %v", code, sentinel)
		}
	}
}

// Another token took the Client's producer id on a topic (after the
// server forgot it): the Client's first send there is refused (code 25)
// and sent again under a fresh producer id, stored once.
func TestClientFenced(t *testing.T) {
	t.Parallel()
	srv := startWithTokens(t)
	c := dial(t, srv.Addr, client.WithToken("writer"))
	ctx := testCtx(t)
	if _, err := c.Produce(ctx, "orders.a", []byte("a")); err != nil {
		t.Fatal(err)
	}
	// Read the Client's producer id, as anyone who consumes can.
	rr, err := srv.Log(t, "orders.a").Read(0, 1, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := rr.AppendTo(nil)
	rr.Release()
	if err != nil {
		t.Fatal(err)
	}
	bt, _, err := protocol.ParseBatch(raw)
	if err != nil || bt.ProducerID == 0 {
		t.Fatalf("batch: producer %#x, %v", bt.ProducerID, err)
	}
	pid := bt.ProducerID
	if err := c.CreateTopic(ctx, "orders.b"); err == nil {
		t.Fatal("the writer token created a topic")
	}
	if err := srv.Store.CreateTopic("orders.b"); err != nil {
		t.Fatal(err)
	}
	taken := protocol.AppendBatchMeta(nil, protocol.BatchMeta{ProducerID: pid}, []byte("taken"))
	if _, errs := srv.Log(t, "orders.b").AppendMany([][]byte{taken}, []storage.AppendOptions{{Owner: hashHex("admin")}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if _, err := c.Produce(ctx, "orders.b", []byte("b")); err != nil {
		t.Fatalf("produce under a taken id: %v", err)
	}
	if got := readAll(t, c, "orders.b"); len(got) != 2 || got[0] != "taken" || got[1] != "b" {
		t.Fatalf("stored %q, want [taken b]", got)
	}
}
