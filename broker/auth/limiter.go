package auth

import (
	"net"
	"sync"
	"time"
)

// Limits configures a Limiter.
type Limits struct {
	// Burst is how many failures in a row an address may have (default 5).
	Burst int
	// Every is how often an address earns one more failure back (default
	// 500 ms: two a second); an address that used its burst is refused
	// until then.
	Every time.Duration
	// MaxAddrs bounds the addresses tracked (default 65536); past it the
	// addresses back to a full burst are dropped, and if none is, the
	// oldest entries go.
	MaxAddrs int
}

// DefaultLimits returns the defaults.
func DefaultLimits() Limits { return Limits{Burst: 5, Every: 500 * time.Millisecond, MaxAddrs: 65536} }

// Limiter is a token bucket of failed authentications per remote host
// (the address without its port, so a client cannot dodge it by opening
// new connections). Safe for concurrent use.
type Limiter struct {
	lim Limits
	now func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket // mu must be held
}

type bucket struct {
	tokens float64
	at     time.Time // of the last update
}

// NewLimiter returns a limiter; zero fields of lim take their defaults.
func NewLimiter(lim Limits) *Limiter {
	def := DefaultLimits()
	if lim.Burst <= 0 {
		lim.Burst = def.Burst
	}
	if lim.Every <= 0 {
		lim.Every = def.Every
	}
	if lim.MaxAddrs <= 0 {
		lim.MaxAddrs = def.MaxAddrs
	}
	return &Limiter{lim: lim, now: time.Now, buckets: make(map[string]*bucket)}
}

func host(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}

// Allowed reports whether remote may try to authenticate: it has at least
// one failure left.
func (l *Limiter) Allowed(remote string) bool {
	h := host(remote)
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[h]
	if !ok {
		return true
	}
	return l.refillLocked(b) >= 1
}

// Fail counts a failed authentication of remote.
func (l *Limiter) Fail(remote string) {
	h := host(remote)
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[h]
	if !ok {
		if len(l.buckets) >= l.lim.MaxAddrs {
			l.pruneLocked()
		}
		b = &bucket{tokens: float64(l.lim.Burst), at: l.now()}
		l.buckets[h] = b
	}
	if l.refillLocked(b) >= 1 {
		b.tokens--
	}
}

// refillLocked adds what b earned since its last update. mu must be held.
func (l *Limiter) refillLocked(b *bucket) float64 {
	now := l.now()
	b.tokens = min(float64(l.lim.Burst), b.tokens+float64(now.Sub(b.at))/float64(l.lim.Every))
	b.at = now
	return b.tokens
}

// pruneLocked drops the buckets back to full, or half of all if none is.
// mu must be held.
func (l *Limiter) pruneLocked() {
	for h, b := range l.buckets {
		if l.refillLocked(b) >= float64(l.lim.Burst) {
			delete(l.buckets, h)
		}
	}
	for h := range l.buckets {
		if len(l.buckets) < l.lim.MaxAddrs/2 {
			break
		}
		delete(l.buckets, h)
	}
}
