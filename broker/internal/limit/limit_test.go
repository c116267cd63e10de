package limit

import (
	"testing"
	"time"
)

func TestBucketTake(t *testing.T) {
	now := time.Unix(0, 0)
	b := Every(100*time.Millisecond, 3)
	for i := range 3 {
		if !b.Take(now) {
			t.Fatalf("take %d refused, want a burst of 3", i+1)
		}
	}
	if b.Take(now) {
		t.Fatal("a fourth take allowed")
	}
	now = now.Add(100 * time.Millisecond)
	if !b.Take(now) || b.Take(now) {
		t.Fatal("want exactly one take back after 100ms")
	}
	now = now.Add(time.Hour)
	if !b.Full(now) {
		t.Fatal("not full after an hour")
	}
}

func TestBucketWait(t *testing.T) {
	now := time.Unix(0, 0)
	b := PerSecond(10, 1)
	if d := b.Wait(now); d != 0 {
		t.Fatalf("first wait %s, want 0", d)
	}
	if d := b.Wait(now.Add(25 * time.Millisecond)); d != 75*time.Millisecond {
		t.Fatalf("wait %s, want 75ms", d)
	}
	if d := b.Wait(now.Add(100 * time.Millisecond)); d != 0 {
		t.Fatalf("wait once due %s, want 0", d)
	}
}

func TestBucketReserve(t *testing.T) {
	now := time.Unix(0, 0)
	b := PerSecond(10, 10)
	for range 10 {
		if d, ok := b.Reserve(now, time.Second); d != 0 || !ok {
			t.Fatalf("within the burst: %s %v", d, ok)
		}
	}
	for i := 1; i <= 10; i++ {
		d, ok := b.Reserve(now, time.Second)
		if want := time.Duration(i) * 100 * time.Millisecond; d != want || !ok {
			t.Fatalf("reservation %d: %s %v, want %s", i, d, ok, want)
		}
	}
	if d, ok := b.Reserve(now, time.Second); d != time.Second || ok {
		t.Fatalf("past the bound: %s %v, want 1s, not booked", d, ok)
	}
	if d, _ := b.Reserve(now.Add(100*time.Millisecond), time.Second); d != time.Second {
		t.Fatalf("after 100ms: %s, want 1s (the unbooked one cost nothing)", d)
	}
}

func TestKeyedPrunes(t *testing.T) {
	now := time.Unix(0, 0)
	full := func() Bucket { return Every(time.Hour, 2) }
	k := Keyed[int]{New: full, Max: 8, Evict: true}
	for i := range 100 {
		k.Get(i, now).Take(now)
	}
	if k.Len() > 8 {
		t.Fatalf("%d keys with Evict, want at most 8", k.Len())
	}
	k = Keyed[int]{New: full, Max: 8}
	for i := range 8 {
		k.Get(i, now).Take(now)
	}
	k.Get(8, now).Take(now)
	if k.Len() != 9 {
		t.Fatalf("%d keys without Evict, none full: want all 9 kept", k.Len())
	}
	now = now.Add(time.Hour)
	k.Get(9, now)
	if k.Len() != 1 {
		t.Fatalf("%d keys once all are full again, want the new one only", k.Len())
	}
}
