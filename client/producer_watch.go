package client

import (
	"context"
	"fmt"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// This file: a Producer whose leader does not answer, bounded as a
// produce is (attempt.go). A frozen leader keeps its connection open, so
// the Producer's batches in flight there would wait out the request
// timeout, or the freeze, while the cluster elects another leader. So on
// a Client of several servers a watcher looks at the oldest batch in
// flight: once it has had no answer for the attempt timeout, the other
// servers are asked who leads the topic (cluster.leaderOf, one question
// shared with the Client's produces), and once they name another server
// every batch in flight on the silent one is abandoned and the Producer
// moves to the new leader. An idempotent Producer sends those batches
// again there, in sequence order, under the same producer id and
// sequences: the new leader answers one it holds with its offset, and
// strict sequence order keeps a later batch from being stored before an
// earlier one, so each is stored once and offsets follow Send order.
// Without idempotence their Futures fail with ErrOutcomeUnknown, since
// the old leader may have stored them. While the others name the same
// leader (only slow: acks=all waiting for its replicas) or none yet, the
// batches go on waiting, and the others are asked again every quarter of
// the attempt timeout.

// watch is the watcher: it runs from NewProducer to Close on a Client of
// several servers with an attempt timeout.
func (p *Producer) watch() {
	defer close(p.watched)
	d := p.attempt
	timer := time.NewTimer(d)
	timer.Stop()
	defer timer.Stop()
	sleep := func(dt time.Duration) bool {
		timer.Reset(dt)
		select {
		case <-timer.C:
			return true
		case <-p.quit:
			return false
		}
	}
	// Batches flown before since are left to wait: their topic is on
	// their server alone, with no other leader to go to.
	var since time.Time
	var flights uint64
	for {
		flown, from, n := p.oldestWatched(since)
		if from == nil {
			if n != flights {
				// Batches fly and are answered: look again in d rather
				// than be woken by every one.
				flights = n
				if !sleep(d) {
					return
				}
				continue
			}
			select {
			case <-p.flew:
				continue
			case <-p.quit:
				return
			}
		}
		if wait := time.Until(flown.Add(d)); wait > 0 {
			if !sleep(wait) {
				return
			}
			continue
		}
		a := from.k.leaderOf(context.Background(), p.topic, from, d)
		switch to := from.k.server(a.leader); {
		case a.alone:
			since = time.Now()
			continue
		case a.leader != "" && a.leader != from.addr && to != nil:
			p.abandonServer(from, to)
			continue
		}
		if !sleep(d / 4) {
			return
		}
	}
}

// oldestWatched returns when the batch in flight longest, of those
// flown at or after since and not abandoned yet, flew and to which
// server (nil: none), and the count of batches flown so far.
func (p *Producer) oldestWatched(since time.Time) (flown time.Time, srv *Client, flights uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.flying {
		if b.abandon != nil && b.abandonErr == nil && !b.flown.Before(since) && (srv == nil || b.flown.Before(flown)) {
			flown, srv = b.flown, b.srv
		}
	}
	return flown, srv, p.flights
}

// abandonServer moves the Producer from from, which did not answer
// within the attempt timeout, to to, which the other servers name the
// topic's leader, and abandons every batch in flight on from: each
// fails with an ErrOutcomeUnknown error naming to, which an idempotent
// Producer follows (follow) and a Producer without idempotence returns.
// Under p.mu, so that no batch flies to from afterwards (fly).
func (p *Producer) abandonServer(from, to *Client) {
	err := fmt.Errorf("client: produce to topic %q: no answer from %s within %v, and the other servers name %s its leader now: %w",
		p.topic, from.addr, p.attempt, to.addr, &Error{Op: protocol.OpProduce, Code: protocol.CodeOutcomeUnknown, Message: to.addr})
	from.k.forget(p.topic, from)
	from.k.remember(p.topic, to) // the Client's produces go there first too
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cp.CompareAndSwap(from, to)
	for _, b := range p.flying {
		if b.srv == from && b.abandon != nil && b.abandonErr == nil {
			b.abandonErr = err
			close(b.abandon)
		}
	}
}
