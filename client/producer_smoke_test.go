package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
)

func TestProducerSmoke(t *testing.T) {
	s := brokertest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := c.NewProducer("p", client.WithBatchSize(100), client.WithLinger(time.Millisecond))
	var fs []*client.Future
	for i := 0; i < 5000; i++ {
		f, err := p.Send(ctx, fmt.Appendf(nil, "m%d", i))
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for i, f := range fs {
		off, err := f.Wait(ctx)
		if err != nil || off != int64(i) {
			t.Fatalf("future %d: offset %d err %v", i, off, err)
		}
	}
	ms, err := c.Consume(ctx, "p", 4990, 100)
	if err != nil || len(ms) != 10 || string(ms[9].Value) != "m4999" {
		t.Fatalf("consume: %d %v", len(ms), err)
	}
}
