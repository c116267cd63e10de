package client_test

import (
	"context"
	"fmt"
	"log"

	"github.com/haraqa/haraqa/client"
)

// A GroupReader reads from its group's committed offset; processing
// first and committing after is at-least-once delivery.
func ExampleGroupReader() {
	addr, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	c, err := client.Dial(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Produce(ctx, "orders", []byte("a"), []byte("b"), []byte("c")); err != nil {
		log.Fatal(err)
	}

	g, err := c.NewGroupReader("billing", "orders")
	if err != nil {
		log.Fatal(err)
	}
	msgs, err := g.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	m := msgs[0]
	fmt.Println("processing", string(m.Value))          // process first
	if err := g.CommitTo(ctx, m.Offset+1); err != nil { // then commit
		log.Fatal(err)
	}
	g.Close()

	// The next reader of the group, here or in another process, continues.
	o, err := c.FetchOffset(ctx, "billing", "orders")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("billing reads from", o.Start, "of", o.Next)
	// Output:
	// processing a
	// billing reads from 1 of 3
}
