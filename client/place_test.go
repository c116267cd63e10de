package client_test

import (
	"flag"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/haraqa/haraqa/client"
)

var placeFull = flag.Bool("place-full", false, "TestPlaceSpread: 1,000,000 topics over 3, 30 and 1,000 servers (docs/scaling.md), not 100,000 over 3 and 30")

// TestPlaceSpread places many topics by rendezvous hashing and compares
// the most-loaded server with the mean. The topic count and each server's
// share follow a binomial law, so the bound is the mean plus six standard
// deviations. go test ./client -run TestPlaceSpread -place-full -v prints
// the table in docs/scaling.md.
func TestPlaceSpread(t *testing.T) {
	topics, sizes := 100_000, []int{3, 30}
	if *placeFull {
		topics, sizes = 1_000_000, []int{3, 30, 1000}
	}
	t.Logf("%d topics: servers | mean | most loaded | least loaded | most/mean", topics)
	for _, n := range sizes {
		addrs := make([]string, n)
		for i := range addrs {
			addrs[i] = fmt.Sprintf("haraqa-%d.haraqa.default.svc:14353", i)
		}
		counts := make([]int, n)
		for i := range topics {
			counts[client.Place(fmt.Sprintf("events.%d", i), addrs)]++
		}
		most, least := 0, topics
		for _, c := range counts {
			most, least = max(most, c), min(least, c)
		}
		mean := float64(topics) / float64(n)
		sd := math.Sqrt(mean * (1 - 1/float64(n)))
		t.Logf("%d | %.0f | %d | %d | %.3f", n, mean, most, least, float64(most)/mean)
		if float64(most) > mean+6*sd {
			t.Errorf("%d servers: the most loaded holds %d topics, mean %.0f, sd %.1f", n, most, mean, sd)
		}
	}
}

func TestPlaceNAgreesWithPlaceAndIgnoresOrder(t *testing.T) {
	addrs := []string{"a:1", "b:1", "c:1", "d:1", "e:1"}
	rev := slices.Clone(addrs)
	slices.Reverse(rev)
	for i := range 500 {
		topic := fmt.Sprintf("topic-%d", i)
		got := client.PlaceN(topic, addrs, 3)
		if len(got) != 3 {
			t.Fatalf("%s: %d replicas, want 3", topic, len(got))
		}
		if got[0] != client.Place(topic, addrs) {
			t.Fatalf("%s: PlaceN's first %d, Place %d", topic, got[0], client.Place(topic, addrs))
		}
		other := client.PlaceN(topic, rev, 3)
		for k := range got {
			if addrs[got[k]] != rev[other[k]] {
				t.Fatalf("%s: replica %d is %s given one order, %s given another", topic, k, addrs[got[k]], rev[other[k]])
			}
		}
		if got[0] == got[1] || got[1] == got[2] || got[0] == got[2] {
			t.Fatalf("%s: a server twice: %v", topic, got)
		}
	}
	if n := len(client.PlaceN("x", addrs, 9)); n != len(addrs) {
		t.Fatalf("9 replicas of 5 servers: %d, want 5", n)
	}
}
