package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/storage"
)

// exampleServer starts a server on a temporary directory and a free port;
// a real program dials the address of a running haraqa server instead.
func exampleServer() (addr string, stop func()) {
	dir, err := os.MkdirTemp("", "haraqa-example-")
	if err != nil {
		log.Fatal(err)
	}
	so := storage.DefaultOptions(dir)
	so.Logger = slog.New(slog.DiscardHandler)
	bc := broker.DefaultConfig()
	bc.Addr = "127.0.0.1:0"
	bc.Logger = so.Logger
	s, err := brokertest.StartWith(so, bc)
	if err != nil {
		log.Fatal(err)
	}
	return s.Addr, func() {
		s.Close()
		os.RemoveAll(dir)
	}
}

// Produce sends messages as one batch and returns the offset of the first.
func Example_produce() {
	addr, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	c, err := client.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// The topic is created on the first produce (client.WithAutoCreate).
	base, err := c.Produce(ctx, "orders", []byte("apple"), []byte("banana"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("apple and banana at", base, base+1)

	base, err = c.Produce(ctx, "orders", []byte("cherry"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("cherry at", base)

	info, err := c.TopicInfo(ctx, "orders")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("offsets", info.Oldest, "to", info.Next)
	// Output:
	// apple and banana at 0 1
	// cherry at 2
	// offsets 0 to 3
}

// Consume reads exactly the messages [offset, offset+limit); a negative
// offset counts back from the end.
func Example_consume() {
	addr, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	c, err := client.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Produce(ctx, "logs", []byte("a"), []byte("b"), []byte("c"), []byte("d"), []byte("e")); err != nil {
		log.Fatal(err)
	}

	msgs, err := c.Consume(ctx, "logs", 1, 2)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range msgs {
		fmt.Printf("%d %s\n", m.Offset, m.Value)
	}

	last, err := c.Consume(ctx, "logs", -1, 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("last: %d %s\n", last[0].Offset, last[0].Value)

	// ConsumeInto reuses a buffer and tells where to read next.
	buf := make([]client.Message, 0, 16)
	for next := int64(0); next < 5; {
		buf, next, err = c.ConsumeInto(ctx, buf[:0], "logs", next, 3)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("read", len(buf), "next", next)
	}

	_, err = c.Consume(ctx, "nope", 0, 1)
	fmt.Println(errors.Is(err, client.ErrTopicNotFound))
	// Output:
	// 1 b
	// 2 c
	// last: 4 e
	// read 3 next 3
	// read 2 next 5
	// true
}

// Messages follows a topic, waiting with long polls for new messages,
// until its context ends.
func Example_follow() {
	addr, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	c, err := client.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateTopic(ctx, "events"); err != nil {
		log.Fatal(err)
	}

	// Another client produces while this one follows.
	go func() {
		p, err := client.Dial(ctx, addr)
		if err != nil {
			log.Fatal(err)
		}
		defer p.Close()
		for _, v := range []string{"started", "working", "done"} {
			if _, err := p.Produce(ctx, "events", []byte(v)); err != nil {
				log.Fatal(err)
			}
		}
	}()

	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for m, err := range c.Messages(fctx, "events", 0) {
		if err != nil {
			log.Println(err) // the loop goes on
			continue
		}
		fmt.Println(m.Offset, string(m.Value))
		if string(m.Value) == "done" {
			cancel() // or break
		}
	}
	// Output:
	// 0 started
	// 1 working
	// 2 done
}

// A Producer batches messages sent one at a time; each Send returns a
// Future for the message's offset.
func Example_producer() {
	addr, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	c, err := client.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	p := c.NewProducer("clicks", client.WithBatchSize(100), client.WithLinger(5*time.Millisecond))
	var futures []*client.Future
	for i := range 250 {
		f, err := p.Send(ctx, fmt.Appendf(nil, "click %d", i))
		if err != nil {
			log.Fatal(err)
		}
		futures = append(futures, f)
	}
	if err := p.Close(); err != nil { // sends what is left and waits
		log.Fatal(err)
	}
	off, err := futures[249].Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("last click at offset", off)

	// TrySend does not wait: it fails with ErrBufferFull when the buffer is.
	small := c.NewProducer("clicks", client.WithMaxBuffered(1, 1<<20), client.WithLinger(time.Hour))
	defer small.Close()
	_, err = small.TrySend([]byte("one"))
	fmt.Println(err)
	_, err = small.TrySend([]byte("two"))
	fmt.Println(errors.Is(err, client.ErrBufferFull))
	// Output:
	// last click at offset 249
	// <nil>
	// true
}

// Server errors match the package's sentinels; *client.Error carries the
// protocol code and the server's message.
func Example_errors() {
	addr, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	c, err := client.Dial(ctx, addr, client.WithAutoCreate(false))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	_, err = c.Produce(ctx, "missing", []byte("x"))
	fmt.Println(errors.Is(err, client.ErrTopicNotFound))
	var ce *client.Error
	if errors.As(err, &ce) {
		fmt.Println(ce.Op, "/", ce.Code)
	}
	err = c.CreateTopic(ctx, "bad/name")
	fmt.Println(errors.Is(err, client.ErrInvalidTopic))
	// Output:
	// true
	// produce / topic not found
	// true
}

// A Reader reads a topic as fast as the connection allows; each Next's
// messages are valid until the following Next.
func ExampleReader() {
	addr, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	c, err := client.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Produce(ctx, "log", []byte("one"), []byte("two"), []byte("three")); err != nil {
		log.Fatal(err)
	}

	r, err := c.NewReader("log", 0)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	for r.Offset() < 3 {
		msgs, err := r.Next(ctx) // at the end of the topic, waits for more
		if err != nil {
			log.Fatal(err)
		}
		for _, m := range msgs {
			fmt.Println(m.Offset, string(m.Value))
		}
	}
	// Output:
	// 0 one
	// 1 two
	// 2 three
}
