package httpapi

import (
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/haraqa/haraqa/broker/internal/limit"
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

// refusalPacer keeps, per client address, a token bucket of rate
// refusals a second holding a second's worth, whose debts are the waits
// of the refusals past it (GCRA: its theoretical arrival time).
type refusalPacer struct {
	mu    sync.Mutex
	hosts limit.Keyed[string] // guarded by mu
}

func newRefusalPacer(rate float64) *refusalPacer {
	return &refusalPacer{hosts: limit.Keyed[string]{New: func() limit.Bucket { return limit.PerSecond(rate, rate) },
		Max: maxPacedAddrs}}
}

// delay books a refusal from remote (host:port) at now and returns how
// long its answer must wait.
func (p *refusalPacer) delay(remote string, now time.Time) time.Duration {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// A refusal held at the bound is not booked: it costs no later one more.
	wait, _ := p.hosts.Get(host, now).Reserve(now, maxRefusalWait)
	return wait
}

// refused reports whether status refuses the request.
func refused(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusTooManyRequests
}
