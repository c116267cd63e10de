package auth

import (
	"crypto/sha256"
	"net"
	"sync"
	"time"

	"github.com/haraqa/haraqa/broker/internal/limit"
)

// Limits configures a Limiter.
type Limits struct {
	// Burst is how many failures in a row one token may have from one
	// address, and how many distinct failing tokens an address may present
	// in a row (default 5).
	Burst int
	// Every is how often each earns one more failure back (default 500 ms:
	// two a second); past its burst a failure is answered "too many
	// failures" until then.
	Every time.Duration
	// MaxAddrs bounds the addresses tracked, and the (address, token)
	// pairs tracked (default 65536 each); past it the entries back to a
	// full burst are dropped, and if too few are, arbitrary ones go.
	MaxAddrs int
}

// DefaultLimits returns the defaults.
func DefaultLimits() Limits { return Limits{Burst: 5, Every: 500 * time.Millisecond, MaxAddrs: 65536} }

// Limiter holds token buckets by key: Fail's, which count failed
// authentications, and Take's, which bound how often a key does
// something (a token's group changes on replicated topics:
// service.Config.MaxGroupChangeRate). A Limiter is used for one or the
// other, with its own Limits.
//
// Fail counts failed authentications per (remote host, token hash),
// the host being the address without its port, so that a client cannot
// dodge it by opening new connections. It is consulted only once a token
// has failed, so it never refuses a valid token, nor a token for the
// failures of others: one token bucket per pair throttles a token that
// keeps failing (a client with a revoked token locks out only itself), and
// one per host throttles how many distinct failing tokens the host
// presents (a flood of random tokens). Safe for concurrent use.
type Limiter struct {
	lim Limits
	now func() time.Time

	mu    sync.Mutex
	pairs limit.Keyed[pair]   // mu must be held
	hosts limit.Keyed[string] // mu must be held; new failing tokens per host
	keys  limit.Keyed[string] // mu must be held; Take's
}

// pair is a host and the hash of a token that failed from it.
type pair struct {
	host string
	hash [sha256.Size]byte
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
	full := func() limit.Bucket { return limit.Every(lim.Every, float64(lim.Burst)) }
	return &Limiter{lim: lim, now: time.Now,
		pairs: limit.Keyed[pair]{New: full, Max: lim.MaxAddrs, Evict: true},
		hosts: limit.Keyed[string]{New: full, Max: lim.MaxAddrs, Evict: true},
		keys:  limit.Keyed[string]{New: full, Max: lim.MaxAddrs, Evict: true}}
}

// Take takes one from key's bucket, which holds Burst at first and
// earns one back every Every, and reports whether there was one: a rate
// bound per key. A key seen for the first time starts at a full burst;
// past MaxAddrs keys the buckets back to full are dropped, then
// arbitrary ones (which then start full again).
func (l *Limiter) Take(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	return l.keys.Get(key, now).Take(now)
}

func host(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}

// Fail counts a failed authentication of the token whose hash is hash,
// presented from remote, and reports whether it was within the limits:
// false when that token failed from that host more than Burst times in a
// row, or when it is a new failing token from a host that presented more
// than Burst of them in a row. A failure over the limits is not counted
// (nor remembered).
func (l *Limiter) Fail(remote string, hash [sha256.Size]byte) bool {
	k := pair{host(remote), hash}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if b, ok := l.pairs.Lookup(k); ok {
		return b.Take(now)
	}
	if !l.hosts.Get(k.host, now).Take(now) {
		return false
	}
	l.pairs.Get(k, now).Take(now)
	return true
}
