package httpapi

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// This file: the pacing of refusals per client address
// (Config.RefusalRate). A refused request (401, 403, 429) costs the
// server what any request costs, parsing and an answer, and a client that
// loops on them needs no token at all: 4 clients asking for /metrics
// without one got 34,000 answers in 3 s, a core of the server's two. Past
// RefusalRate refusals a second from one address, each refusal's answer
// waits until the next is due (at most maxRefusalWait), which slows a
// client that waits for its answers to that rate; clients sending valid
// requests from the same address are not held, and nothing more is
// refused.

// DefaultRefusalRate is the default Config.RefusalRate.
const DefaultRefusalRate = 100

// maxRefusalWait bounds how long one refusal is held.
const maxRefusalWait = 2 * time.Second

// maxPacedAddrs bounds the addresses remembered; past it the entries whose
// refusals are all past are dropped.
const maxPacedAddrs = 4096

// refusalPacer keeps, per client address, the theoretical arrival time of
// its next refusal (GCRA: a token bucket of rate refusals a second holding
// a second's worth).
type refusalPacer struct {
	rate float64

	mu  sync.Mutex
	tat map[string]time.Time // guarded by mu
}

func newRefusalPacer(rate float64) *refusalPacer {
	return &refusalPacer{rate: rate, tat: make(map[string]time.Time)}
}

// delay books a refusal from remote (host:port) at now and returns how
// long its answer must wait.
func (p *refusalPacer) delay(remote string, now time.Time) time.Duration {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	interval := time.Duration(float64(time.Second) / p.rate)
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.tat) >= maxPacedAddrs {
		for h, t := range p.tat {
			if t.Before(now) {
				delete(p.tat, h)
			}
		}
	}
	t := p.tat[host]
	if t.Before(now) {
		t = now
	}
	t = t.Add(interval)
	wait := t.Sub(now) - time.Second // a second's worth may come at once
	if wait > maxRefusalWait {
		return maxRefusalWait // not booked: a refusal held at the bound costs no later one more
	}
	p.tat[host] = t
	return max(wait, 0)
}

// refused reports whether status refuses the request.
func refused(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusTooManyRequests
}
