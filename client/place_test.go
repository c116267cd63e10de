package client_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// TestPlaceIsProtocols: the client places topics as the servers do
// (protocol.Place, protocol.PlaceN, tested in package protocol).
func TestPlaceIsProtocols(t *testing.T) {
	addrs := []string{"a:1", "b:1", "c:1", "d:1", "e:1"}
	for i := range 200 {
		topic := fmt.Sprintf("topic-%d", i)
		if got, want := client.Place(topic, addrs), protocol.Place(topic, addrs); got != want {
			t.Fatalf("%s: Place %d, protocol's %d", topic, got, want)
		}
		if got, want := client.PlaceN(topic, addrs, 3), protocol.PlaceN(topic, addrs, 3); !slices.Equal(got, want) {
			t.Fatalf("%s: PlaceN %v, protocol's %v", topic, got, want)
		}
	}
	if client.Place("x", nil) != -1 {
		t.Fatal("no servers: want -1")
	}
}
