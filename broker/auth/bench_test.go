package auth

import (
	"fmt"
	"strings"
	"testing"
)

// rulesOf returns n rules, each produce,consume on two patterns.
func rulesOf(b *testing.B, n int) *Rules {
	var f strings.Builder
	for i := range n {
		fmt.Fprintf(&f, "%s produce,consume team%d.* shared.logs\n", hashOf(fmt.Sprint("tok", i)), i)
	}
	r, err := Parse(strings.NewReader(f.String()), "bench")
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// BenchmarkAllow is the per-request check on a connection's cached grant.
func BenchmarkAllow(b *testing.B) {
	g := rulesOf(b, 1).Authenticate("tok0")
	b.ReportAllocs()
	for b.Loop() {
		if !g.Allow(Produce, "team0.orders") {
			b.Fatal("refused")
		}
	}
}

// BenchmarkAuthenticate is a hello: hash the token, compare with every rule.
func BenchmarkAuthenticate(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprint(n, "rules"), func(b *testing.B) {
			r := rulesOf(b, n)
			b.ReportAllocs()
			for b.Loop() {
				if r.Authenticate("tok1") == nil {
					b.Fatal("not found")
				}
			}
		})
	}
}
