package main

import "testing"

// TestPayload checks that a torture message parses back to its producer
// and sequence, and that one changed byte anywhere is noticed.
func TestPayload(t *testing.T) {
	for _, c := range []struct{ prod, seq int }{{0, 0}, {7, 12345}, {999, 9999999999}} {
		b := payload(c.prod, c.seq)
		if p, s, ok := parsePayload(b); !ok || p != c.prod || s != c.seq {
			t.Fatalf("parsePayload(payload(%d, %d)) = %d, %d, %t", c.prod, c.seq, p, s, ok)
		}
		for i := range b {
			bad := append([]byte(nil), b...)
			bad[i] ^= 0x20
			if p, s, ok := parsePayload(bad); ok && p == c.prod && s == c.seq {
				t.Fatalf("byte %d flipped in P%d S%d not noticed", i, c.prod, c.seq)
			}
		}
		if _, _, ok := parsePayload(b[:len(b)-1]); ok {
			t.Fatalf("P%d S%d cut short by one byte not noticed", c.prod, c.seq)
		}
	}
}
