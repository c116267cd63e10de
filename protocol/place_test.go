package protocol_test

import (
	"flag"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/haraqa/haraqa/protocol"
)

var placeFull = flag.Bool("place-full", false, "TestPlaceSpread: 1,000,000 topics over 3, 30 and 1,000 servers (docs/scaling.md), not 100,000 over 3 and 30")

// TestPlaceSpread places many topics by rendezvous hashing and compares
// the most-loaded server with the mean. The topic count and each server's
// share follow a binomial law, so the bound is the mean plus six standard
// deviations. go test ./protocol -run TestPlaceSpread -place-full -v prints
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
			counts[protocol.Place(fmt.Sprintf("events.%d", i), addrs)]++
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
		got := protocol.PlaceN(topic, addrs, 3)
		if len(got) != 3 {
			t.Fatalf("%s: %d replicas, want 3", topic, len(got))
		}
		if got[0] != protocol.Place(topic, addrs) {
			t.Fatalf("%s: PlaceN's first %d, Place %d", topic, got[0], protocol.Place(topic, addrs))
		}
		other := protocol.PlaceN(topic, rev, 3)
		for k := range got {
			if addrs[got[k]] != rev[other[k]] {
				t.Fatalf("%s: replica %d is %s given one order, %s given another", topic, k, addrs[got[k]], rev[other[k]])
			}
		}
		if got[0] == got[1] || got[1] == got[2] || got[0] == got[2] {
			t.Fatalf("%s: a server twice: %v", topic, got)
		}
	}
	if n := len(protocol.PlaceN("x", addrs, 9)); n != len(addrs) {
		t.Fatalf("9 replicas of 5 servers: %d, want 5", n)
	}
}

// TestPlaceGolden pins placements: every client and server, of any
// version, must place a topic on the same servers, so a change of the
// hash moves topics and is a protocol change.
func TestPlaceGolden(t *testing.T) {
	addrs := []string{"haraqa-0.haraqa.default.svc:14353", "haraqa-1.haraqa.default.svc:14353",
		"haraqa-2.haraqa.default.svc:14353", "10.0.0.5:14353"}
	for _, c := range []struct {
		topic string
		want  []int
	}{
		{"orders", []int{1, 0, 3, 2}},
		{"events.0", []int{1, 2, 3, 0}},
		{"events.1", []int{2, 0, 1, 3}},
		{"a", []int{0, 3, 2, 1}},
		{"x9", []int{0, 3, 1, 2}},
	} {
		if got := protocol.PlaceN(c.topic, addrs, 4); !slices.Equal(got, c.want) {
			t.Errorf("PlaceN(%q) = %v, want %v", c.topic, got, c.want)
		}
		if got := protocol.Place(c.topic, addrs); got != c.want[0] {
			t.Errorf("Place(%q) = %d, want %d", c.topic, got, c.want[0])
		}
	}
}
