package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
)

// With $HARAQA_ADDR a list of servers, hrqa spreads topics over them,
// lists them all, and names the server that is down.
func TestSeveralServers(t *testing.T) {
	s1, s2 := brokertest.Start(t, 1), brokertest.Start(t, 1)
	addrs := []string{s1.Addr, s2.Addr}
	all := strings.Join(addrs, ",")
	var on2 string // a topic placed on s2
	for i := 0; i < 20; i++ {
		tp := fmt.Sprintf("t%d", i)
		if r := hrqa(t, all, "m-"+tp+"\n", "produce", tp); r.code != 0 {
			t.Fatalf("produce %s: %+v", tp, r)
		}
		if client.Place(tp, addrs) == 1 && on2 == "" {
			on2 = tp
		}
	}
	one := hrqa(t, s1.Addr, "", "topics", "list")
	two := hrqa(t, s2.Addr, "", "topics", "list")
	n1, n2 := strings.Count(one.stdout, "\n"), strings.Count(two.stdout, "\n")
	if n1 == 0 || n2 == 0 || n1+n2 != 20 {
		t.Fatalf("the servers hold %d and %d of 20 topics", n1, n2)
	}
	if r := hrqa(t, all, "", "topics", "list"); strings.Count(r.stdout, "\n") != 20 || r.code != 0 {
		t.Fatalf("topics list over both: %+v", r)
	}
	if r := hrqa(t, all, "", "consume", on2); r.stdout != "m-"+on2+"\n" {
		t.Fatalf("consume %s over both: %+v", on2, r)
	}
	s2.Close()
	start := time.Now()
	r := hrqa(t, all, "", "consume", on2)
	if r.code != 1 || !strings.Contains(r.stderr, s2.Addr) || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("consume %s with its server down: %+v, want one line naming %s", on2, r, s2.Addr)
	}
	if d := time.Since(start); d > 6*time.Second {
		t.Fatalf("took %v to fail", d)
	}
	if r := hrqa(t, all, "", "ping"); r.code != 1 || !strings.Contains(r.stderr, s2.Addr) {
		t.Fatalf("ping with a server down: %+v", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, s1.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.ListTopics(ctx, "")
	if err != nil || len(l) == 0 {
		t.Fatal(l, err)
	}
	if r := hrqa(t, all, "", "consume", l[0]); r.code != 0 || r.stdout != "m-"+l[0]+"\n" {
		t.Fatalf("consume %s on the live server: %+v", l[0], r)
	}
}
