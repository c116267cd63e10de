package bench

import (
	"context"
	"testing"
	"time"
)

// sleepUntil returns at or after its time, through both its timer and its
// nanosleep parts, and false as soon as its context ends.
func TestSleepUntil(t *testing.T) {
	for _, d := range []time.Duration{-time.Millisecond, 0, 300 * time.Microsecond, preciseBelow + 3*time.Millisecond} {
		due := time.Now().Add(d)
		if !sleepUntil(context.Background(), due) {
			t.Fatalf("sleep of %v: false", d)
		}
		if now := time.Now(); now.Before(due) {
			t.Fatalf("sleep of %v returned %v early", d, due.Sub(now))
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool)
	go func() { done <- sleepUntil(ctx, time.Now().Add(time.Hour)) }()
	cancel()
	select {
	case ok := <-done:
		if ok {
			t.Fatal("a sleep whose context ended reported its time reached")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a sleep whose context ended did not return")
	}
	cancelled, stop := context.WithCancel(context.Background())
	stop()
	if sleepUntil(cancelled, time.Now().Add(-time.Second)) {
		t.Fatal("an ended context: true")
	}
}
