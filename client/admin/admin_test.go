package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/client/admin"
)

// Without a cluster SetReplicas takes one replica only: it creates the
// topic, and leaves an existing one as it is; more is refused by the
// server, and a count out of range by the client before sending.
func TestSetReplicasSingleServer(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	c := admin.New(cl)
	if err := c.SetReplicas(ctx, "t", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Produce(ctx, "t", []byte("x")); err != nil {
		t.Fatalf("produce to the topic it created: %v", err)
	}
	if err := c.SetReplicas(ctx, "t", 1); err != nil {
		t.Fatalf("again: %v", err)
	}
	if info, err := cl.TopicInfo(ctx, "t"); err != nil || info.Next != 1 {
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

// A server without a cluster has no status: ErrInvalidArgument, as
// before the typed status.
func TestClusterStatusSingleServer(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := admin.New(cl).ClusterStatus(ctx); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("status without a cluster: %v, want ErrInvalidArgument", err)
	}
}
