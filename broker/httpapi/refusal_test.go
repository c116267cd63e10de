package httpapi

import (
	"testing"
	"time"
)

// TestRefusalPacer: an address gets a second's worth of refusals at
// once, then one every 1/rate, each waiting its turn, at most
// maxRefusalWait; another address is not held by the first's.
func TestRefusalPacer(t *testing.T) {
	p := newRefusalPacer(10)
	now := time.Unix(1000, 0)
	for i := range 10 {
		if d := p.delay("10.0.0.1:5", now); d != 0 {
			t.Fatalf("refusal %d of the first second's worth waits %s", i, d)
		}
	}
	if d := p.delay("10.0.0.1:6", now); d != 100*time.Millisecond {
		t.Fatalf("the 11th refusal at once waits %s, want 100ms", d)
	}
	if d := p.delay("10.0.0.1:7", now); d != 200*time.Millisecond {
		t.Fatalf("the 12th waits %s, want 200ms", d)
	}
	if d := p.delay("10.0.0.2:5", now); d != 0 {
		t.Fatalf("another address waits %s for the first's refusals", d)
	}
	for range 100 {
		if d := p.delay("10.0.0.1:5", now); d > maxRefusalWait {
			t.Fatalf("a refusal waits %s, over %s", d, maxRefusalWait)
		}
	}
	if d := p.delay("10.0.0.1:5", now.Add(10*time.Second)); d != 0 {
		t.Fatalf("after 10 s quiet a refusal waits %s", d)
	}
}
