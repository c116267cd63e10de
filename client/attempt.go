package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// This file: a produce on a Client of several servers whose leader does
// not answer. A leader that froze (SIGSTOP, a VM paused, a stalled disk)
// keeps its connections open, so nothing fails: without a bound its
// produces wait out the request timeout (WithRequestTimeout, 30 s) while
// the cluster elects another leader within a couple of seconds. So an
// attempt with no answer within the attempt timeout is watched: the other
// servers are asked who leads the topic, and once they name another
// server the attempt is abandoned. An idempotent produce goes on to the
// new leader with the same producer id and sequence (reroute); any other
// fails with ErrOutcomeUnknown, since the old leader may have stored it.
// While they still name the same leader (which waits for its in-sync
// replicas under acks=all, or is not yet found out) or none, the attempt
// goes on waiting: nothing is sent twice for a leader that is only slow.
// A Producer's batches in flight are bounded the same way
// (producer_watch.go).

// DefaultAttemptTimeout is the default WithAttemptTimeout.
const DefaultAttemptTimeout = time.Second

// WithAttemptTimeout sets how long a produce on a Client of several
// servers waits for its server's answer before it asks the other servers
// who leads the topic (default DefaultAttemptTimeout; 0: never ask, wait
// for the request timeout). Once they name another leader, the produce is
// abandoned where it was: with idempotence it is sent to the new leader,
// which answers a batch it holds with its first offset; without, it fails
// with ErrOutcomeUnknown. While they name the same leader, or none, it
// goes on waiting, asking again every quarter of d: an acks=all produce
// waiting for its replicas is not abandoned. The others are asked with a
// produce that cannot be stored (one empty message, expected at an offset
// no topic reaches), each within d, and one question per topic serves
// every produce waiting on it. A topic no other server has is not
// replicated: its produce waits as on one server. A Producer's batches
// are bounded the same way, by their oldest in flight: once abandoned,
// all those in flight on the server go to the new leader in sequence
// order (idempotent) or fail with ErrOutcomeUnknown.
func WithAttemptTimeout(d time.Duration) Option {
	return func(o *options) { o.attemptTimeout = max(d, 0) }
}

// leadAnswer is what the other servers say of a topic's leader.
type leadAnswer struct {
	leader string // the address of the server they name, "" while none
	alone  bool   // no other server has the topic: it is not replicated
}

// leadQuestion is one asking of the other servers, shared by the produces
// to its topic that wait on the same server.
type leadQuestion struct {
	from *Client // the server that does not answer: not asked
	done chan struct{}
	at   time.Time // when it was answered
	a    leadAnswer
}

// leads holds a cluster's questions, by topic.
type leads struct {
	mu sync.Mutex
	q  map[string]*leadQuestion
}

// produceOn sends the produce build builds to server c. On a server of a
// Client of several with an attempt timeout, it watches an attempt that
// has no answer in time (see above).
func (c *Client) produceOn(ctx context.Context, topic string, build func(dst []byte, id uint32) []byte) ([]byte, error) {
	d := c.opts.attemptTimeout
	if c.reroute == nil || c.k == nil || d <= 0 {
		return c.do(ctx, protocol.OpProduce, 0, c.producer != nil, build)
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		p   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, err := c.do(actx, protocol.OpProduce, 0, c.producer != nil, build)
		done <- result{p, err}
	}()
	wait := time.NewTimer(d)
	defer wait.Stop()
	for {
		select {
		case r := <-done:
			return r.p, r.err
		case <-wait.C:
		}
		asked := make(chan leadAnswer, 1)
		go func() { asked <- c.k.leaderOf(ctx, topic, c, d) }()
		var a leadAnswer
		select {
		case r := <-done:
			return r.p, r.err
		case a = <-asked:
		}
		switch {
		case a.alone:
			r := <-done // not replicated: nowhere else to go
			return r.p, r.err
		case a.leader != "" && a.leader != c.addr && c.k.server(a.leader) != nil:
			cancel()
			if r := <-done; r.err == nil || !errors.Is(r.err, context.Canceled) || ctx.Err() != nil {
				return r.p, r.err // answered meanwhile, or failed of itself
			}
			c.k.forget(topic, c)
			c.k.remember(topic, c.k.server(a.leader)) // the next produces go there first
			// Code 30's form, so that LeaderOf and reroute read it.
			return nil, fmt.Errorf("client: produce to topic %q: no answer from %s within %v, and the other servers name %s its leader now: %w",
				topic, c.addr, d, a.leader, &Error{Op: protocol.OpProduce, Code: protocol.CodeOutcomeUnknown, Message: a.leader})
		}
		wait.Reset(d / 4)
	}
}

// leaderOf asks the servers other than from who leads topic, each within
// d, or returns the answer of a question asked for from less than a
// quarter of d ago or under way.
func (k *cluster) leaderOf(ctx context.Context, topic string, from *Client, d time.Duration) leadAnswer {
	k.leads.mu.Lock()
	if k.leads.q == nil {
		k.leads.q = make(map[string]*leadQuestion)
	}
	q := k.leads.q[topic]
	if q != nil && q.from == from {
		select {
		case <-q.done:
			if time.Since(q.at) >= d/4 {
				q = nil // stale: ask again
			}
		default: // under way
		}
	} else {
		q = nil
	}
	if q != nil {
		k.leads.mu.Unlock()
		select {
		case <-q.done:
			return q.a
		case <-ctx.Done():
			return leadAnswer{}
		}
	}
	q = &leadQuestion{from: from, done: make(chan struct{})}
	k.leads.q[topic] = q
	k.leads.mu.Unlock()
	q.a = k.askLeader(topic, from, d)
	q.at = time.Now()
	close(q.done)
	return q.a
}

// askLeader asks every server but from, in parallel, each within d, who
// leads topic. The question is a produce that cannot be stored: one empty
// message, with acks=leader, expected at an offset no topic reaches, and
// no producer id. A server that leads topic refuses it as an offset
// mismatch (it names itself), one that follows it as not leader (naming
// the leader, or none during an election), one that does not have it as
// not found; nothing is stored anywhere. Its context is its own, so that
// one produce giving up does not cut the question short for the others
// waiting on it.
func (k *cluster) askLeader(topic string, from *Client, d time.Duration) leadAnswer {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	batch := protocol.AppendBatch(nil, []byte{})
	flags := protocol.ProduceExpectOffset | protocol.ProduceAcksLeader
	answers := make(chan error, len(k.servers))
	asked := 0
	for _, s := range k.servers {
		if s == from {
			continue
		}
		asked++
		go func() {
			_, err := s.do(ctx, protocol.OpProduce, 0, false, func(dst []byte, id uint32) []byte {
				dst = protocol.AppendProduceRequestHeaderExpect(dst, id, topic, flags, math.MaxInt64, len(batch))
				return append(dst, batch...)
			})
			if errors.Is(err, ErrOffsetMismatch) {
				err = &Error{Op: protocol.OpProduce, Code: protocol.CodeNotLeader, Message: s.addr} // it leads
			}
			answers <- err
		}()
	}
	notFound := 0
	var a leadAnswer
	for range asked {
		err := <-answers
		if errors.Is(err, ErrTopicNotFound) {
			notFound++
		}
		if l, ok := LeaderOf(err); ok && l != from.addr {
			a.leader = l // another leader: enough
			return a
		} else if ok {
			a.leader = l
		}
	}
	a.alone = asked > 0 && notFound == asked
	return a
}
