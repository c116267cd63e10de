// Package limit is the token bucket behind every rate bound of the
// server: the failed authentications and the group changes per token
// (package auth), the control requests per connection (package broker),
// the /metrics responses and the pacing of refusals per address (package
// httpapi). Each place keeps its own burst, refill and bounds; the
// arithmetic is written once, here.
//
// Neither type locks: a Bucket or a Keyed is owned by one goroutine (a
// connection's event loop) or guarded by its owner's mutex.
package limit

import (
	"math"
	"time"
)

// Bucket is a token bucket: it holds at most burst tokens, starts full
// and earns one back every per. The zero Bucket holds nothing and earns
// nothing; make one with PerSecond or Every.
type Bucket struct {
	per    float64   // nanoseconds per token earned
	burst  float64   // the most it holds
	tokens float64   // at last; below 0 while Reserve's debts are due
	last   time.Time // when tokens was counted; zero: never (full)
}

// PerSecond returns a full bucket of burst tokens earning rate a second.
func PerSecond(rate, burst float64) Bucket {
	return Bucket{per: float64(time.Second) / rate, burst: burst, tokens: burst}
}

// Every returns a full bucket of burst tokens earning one every d.
func Every(d time.Duration, burst float64) Bucket {
	return Bucket{per: float64(d), burst: burst, tokens: burst}
}

// refill adds what b earned since its last count, up to its burst, and
// returns what it holds at now.
func (b *Bucket) refill(now time.Time) float64 {
	if !b.last.IsZero() {
		b.tokens = min(b.burst, b.tokens+float64(now.Sub(b.last))/b.per)
	}
	b.last = now
	return b.tokens
}

// Take takes a token at now and reports whether there was one.
func (b *Bucket) Take(now time.Time) bool {
	if b.refill(now) < 1 {
		return false
	}
	b.tokens--
	return true
}

// Wait takes a token at now and returns 0, or, when none is left, takes
// nothing and returns how long until the next is due.
func (b *Bucket) Wait(now time.Time) time.Duration {
	if b.refill(now) >= 1 {
		b.tokens--
		return 0
	}
	return time.Duration((1 - b.tokens) * b.per)
}

// Reserve takes a token at now, borrowing it when none is left, and
// returns how long the caller must wait for it to be due (0: at once).
// A wait longer than maxWait is not booked: nothing is taken, and
// Reserve returns maxWait and false.
func (b *Bucket) Reserve(now time.Time, maxWait time.Duration) (time.Duration, bool) {
	left := b.refill(now) - 1
	if left >= 0 {
		b.tokens = left
		return 0, true
	}
	wait := time.Duration(math.Round(-left * b.per))
	if wait > maxWait {
		return maxWait, false
	}
	b.tokens = left
	return wait, true
}

// Full reports whether b holds its whole burst at now: it may be
// forgotten and made anew.
func (b *Bucket) Full(now time.Time) bool { return b.refill(now) >= b.burst }

// Keyed holds a Bucket per key, each made by New when its key is first
// seen (full), at most Max of them: a new key past Max first drops the
// buckets that are full, and, with Evict, then arbitrary ones until at
// most Max/2 are left (which start full when seen again).
type Keyed[K comparable] struct {
	New   func() Bucket
	Max   int
	Evict bool
	m     map[K]*Bucket
}

// Lookup returns key's bucket, if it has one.
func (k *Keyed[K]) Lookup(key K) (*Bucket, bool) {
	b, ok := k.m[key]
	return b, ok
}

// Get returns key's bucket, made full if it has none, at now.
func (k *Keyed[K]) Get(key K, now time.Time) *Bucket {
	if b, ok := k.m[key]; ok {
		return b
	}
	if k.m == nil {
		k.m = make(map[K]*Bucket)
	}
	if len(k.m) >= k.Max {
		k.prune(now)
	}
	b := k.New()
	k.m[key] = &b
	return &b
}

// Len returns how many keys have a bucket.
func (k *Keyed[K]) Len() int { return len(k.m) }

// prune drops the full buckets, then, with Evict, arbitrary ones until
// fewer than Max/2 are left.
func (k *Keyed[K]) prune(now time.Time) {
	for key, b := range k.m {
		if b.Full(now) {
			delete(k.m, key)
		}
	}
	if !k.Evict {
		return
	}
	for key := range k.m {
		if len(k.m) < k.Max/2 {
			break
		}
		delete(k.m, key)
	}
}
