package client_test

import (
	"errors"
	"testing"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
)

// Without a cluster SetReplicas takes one replica only: it creates the
// topic, and leaves an existing one as it is; more is refused by the
// server, and a count out of range by the client before sending.
func TestSetReplicasSingleServer(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	ctx := testCtx(t)
	c := dial(t, srv.Addr)
	if err := c.SetReplicas(ctx, "t", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Produce(ctx, "t", []byte("x")); err != nil {
		t.Fatalf("produce to the topic it created: %v", err)
	}
	if err := c.SetReplicas(ctx, "t", 1); err != nil {
		t.Fatalf("again: %v", err)
	}
	if info, err := c.TopicInfo(ctx, "t"); err != nil || info.Next != 1 {
		t.Fatalf("after: %+v %v, want the message kept", info, err)
	}
	if err := c.SetReplicas(ctx, "t", 3); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("3 replicas without a cluster: %v, want ErrInvalidArgument", err)
	}
	for _, n := range []int{0, 256} {
		if err := c.SetReplicas(ctx, "t", n); !errors.Is(err, client.ErrInvalidArgument) {
			t.Fatalf("%d replicas: %v, want ErrInvalidArgument", n, err)
		}
	}
}
