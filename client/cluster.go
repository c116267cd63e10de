package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// A Client dialed with several addresses ("a:14353,b:14353,c:14353") is a
// cluster: one single-server Client per address, and a map of where each
// topic lives. Every operation on a topic runs on that topic's server
// through its single-server Client; the cluster only chooses which.

// DefaultLocateTimeout is the default WithLocateTimeout.
const DefaultLocateTimeout = 2 * time.Second

// WithLocateTimeout bounds each server's answer when a client of several
// servers looks for a topic it has not seen yet (default
// DefaultLocateTimeout): a server that does not answer in time is taken
// as down for that search, so a topic it may hold fails with
// ErrUnavailable naming it, while the topics of the others are found.
// The dial is part of the answer, so the bound holds for a server that
// refuses connections or drops them alike.
func WithLocateTimeout(d time.Duration) Option {
	return func(o *options) { o.locateTimeout = d }
}

// cluster is the routing state of a Client of several servers.
type cluster struct {
	top     *Client   // the Client the caller holds: options, Close, backoff
	servers []*Client // one per address, in the order given
	addrs   []string  // their addresses

	mu        sync.Mutex
	where     map[string]*Client   // topic -> the server it was found or placed on
	finding   map[string]*search   // searches under way, by topic: one at a time per topic
	rerouting map[string]time.Time // topic -> when its produces began to look for its leader

	leads leads // who leads a topic whose server does not answer (attempt.go)
}

// search is one find under way; requests for the same topic meanwhile
// wait for its outcome rather than asking every server again.
type search struct {
	done chan struct{}
	s    *Client
	down map[*Client]error
	err  error

	abandoned bool // the searcher's context ended first
}

// splitAddrs splits a comma-separated list of addresses, dropping blanks
// and repeats.
func splitAddrs(list string) []string {
	var out []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// dialCluster is Dial for several addresses: it succeeds as soon as one
// server answers a ping, so that a server that is down fails only its own
// topics.
func dialCluster(ctx context.Context, addrs []string, o options) (*Client, error) {
	top := &Client{addr: strings.Join(addrs, ","), opts: o, done: make(chan struct{}), polls: make(map[*connSlot]struct{})}
	k := &cluster{top: top, where: make(map[string]*Client), finding: make(map[string]*search)}
	var seq *producerSeq
	if o.idempotent {
		seq = newProducerSeq() // one producer id over the servers: a batch retried on another keeps its id and sequence
	}
	for _, a := range addrs {
		s := newClient(a, o)
		if seq != nil {
			s.producer = seq
		}
		s.reroute, s.k = k.reroute, k
		k.servers = append(k.servers, s)
	}
	k.addrs = addrs
	top.cl = k
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(addrs))
	for _, s := range k.servers {
		go func() { errs <- wrapAddr(s, s.Ping(ctx)) }()
	}
	var all []error
	for range addrs {
		err := <-errs
		if err == nil {
			return top, nil
		}
		all = append(all, err)
	}
	top.Close()
	return nil, fmt.Errorf("client: none of the %d servers answered: %w", len(addrs), errors.Join(all...))
}

// ServerError is an error from one server of a Client dialed with several
// addresses: the server's address and its error, which it wraps (so
// errors.Is and errors.As see through it).
type ServerError struct {
	Addr string
	Err  error
}

func (e *ServerError) Error() string { return "client: server " + e.Addr + ": " + e.Err.Error() }
func (e *ServerError) Unwrap() error { return e.Err }

// wrapAddr is err from server s as a *ServerError (nil stays nil).
func wrapAddr(s *Client, err error) error { return wrapServer(s.addr, err) }

// wrapServer is err from the server at addr as a *ServerError, unless it
// is one already (nil stays nil).
func wrapServer(addr string, err error) error {
	var se *ServerError
	if err == nil || errors.As(err, &se) {
		return err
	}
	return &ServerError{Addr: addr, Err: err}
}

// Servers returns the addresses of the client's servers, in the order
// given to Dial (one for a single server).
func (c *Client) Servers() []string {
	if c.cl == nil {
		return []string{c.addr}
	}
	out := make([]string, len(c.cl.servers))
	for i, s := range c.cl.servers {
		out[i] = s.addr
	}
	return out
}

// Place returns the index in addrs of the server a new topic goes to
// (protocol.Place: rendezvous hashing, alike for every client given the
// same addresses in any order); -1 for no addresses.
func Place(topic string, addrs []string) int { return protocol.Place(topic, addrs) }

// PlaceN returns the indexes in addrs of the n servers a new topic with n
// replicas goes to, best first (protocol.PlaceN); PlaceN(topic, addrs, 1)
// is Place's.
func PlaceN(topic string, addrs []string, n int) []int { return protocol.PlaceN(topic, addrs, n) }

// owner is the server a new topic is placed on.
func (k *cluster) owner(topic string) *Client {
	return k.servers[Place(topic, k.addrs)]
}

func (k *cluster) cached(topic string) *Client {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.where[topic]
}

func (k *cluster) remember(topic string, s *Client) {
	k.mu.Lock()
	k.where[topic] = s
	k.mu.Unlock()
}

// forget drops topic's location if it is still s.
func (k *cluster) forget(topic string, s *Client) {
	k.mu.Lock()
	if k.where[topic] == s {
		delete(k.where, topic)
	}
	k.mu.Unlock()
}

// find returns the server topic lives on, asking every server (ask), or
// waiting for the search for topic under way.
func (k *cluster) find(ctx context.Context, topic string) (*Client, map[*Client]error, error) {
	for {
		k.mu.Lock()
		f, ok := k.finding[topic]
		if !ok {
			break // k.mu held
		}
		k.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		if !f.abandoned || ctx.Err() != nil {
			return f.s, f.down, f.err
		} // the context of the request that searched ended, not ours: search again
	}
	f := &search{done: make(chan struct{})}
	k.finding[topic] = f
	k.mu.Unlock()
	f.s, f.down, f.err = k.ask(ctx, topic)
	f.abandoned = ctx.Err() != nil
	k.mu.Lock()
	delete(k.finding, topic)
	k.mu.Unlock()
	close(f.done)
	return f.s, f.down, f.err
}

// ask asks every server, in parallel, whether it has topic, each within
// the locate timeout, and returns the first that has it. When none does,
// the error matches ErrTopicNotFound if every server answered; otherwise
// it matches ErrUnavailable and names each server that did not answer
// (down is the set of those).
func (k *cluster) ask(ctx context.Context, topic string) (s *Client, down map[*Client]error, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		s   *Client
		err error
	}
	answers := make(chan answer, len(k.servers))
	for _, s := range k.servers {
		go func() {
			lctx, cancel := context.WithTimeout(ctx, k.top.opts.locateTimeout)
			defer cancel()
			_, err := s.TopicInfo(lctx, topic)
			answers <- answer{s, err}
		}()
	}
	var notFound, refused error
	down = make(map[*Client]error)
	var downErrs []error
	for range k.servers {
		a := <-answers
		var se *Error
		switch {
		case a.err == nil:
			k.remember(topic, a.s)
			return a.s, nil, nil
		case errors.Is(a.err, ErrTopicNotFound):
			if notFound == nil {
				notFound = a.err
			}
		case errors.Is(a.err, ErrClosed):
			return nil, nil, ErrClosed
		case errors.As(a.err, &se) && !errors.Is(a.err, ErrConnection): // an answer: invalid name, forbidden
			if refused == nil {
				refused = wrapAddr(a.s, a.err)
			}
		default:
			if ctx.Err() != nil { // the caller's context, not the locate timeout
				return nil, nil, ctx.Err()
			}
			down[a.s] = a.err
			downErrs = append(downErrs, wrapAddr(a.s, a.err))
		}
	}
	switch {
	case refused != nil:
		return nil, nil, refused
	case len(down) == 0:
		return nil, nil, fmt.Errorf("client: topic %q is on none of the %d servers: %w", topic, len(k.servers), notFound)
	}
	return nil, down, fmt.Errorf("%w: topic %q is on none of the %d servers that answered: %w",
		ErrUnavailable, topic, len(k.servers)-len(down), errors.Join(downErrs...))
}

// route returns the server topic lives on, and whether that came from
// the cache. With create, a topic that no server has is placed on its
// owner by rendezvous hashing, unless the owner is down. The caveat:
// when another server is down too, the topic may already live there (put
// there before the set of servers changed); it is then created anew on its
// owner, as docs/scaling.md says.
func (k *cluster) route(ctx context.Context, topic string, create bool) (*Client, bool, error) {
	if s := k.cached(topic); s != nil {
		return s, true, nil
	}
	s, down, err := k.find(ctx, topic)
	if err == nil || !create || !(errors.Is(err, ErrTopicNotFound) || errors.Is(err, ErrUnavailable)) {
		return s, false, err
	}
	o := k.owner(topic)
	if _, ok := down[o]; ok {
		return nil, false, k.ownerDown(topic, o, down)
	}
	return o, false, nil
}

// ownerDown is the error of a search for topic that found it on none of
// the servers that answered while its owner o is among those that did
// not (down): it names them all, o first, since a replicated topic lives
// on several and may be on any of them, and those that answered.
func (k *cluster) ownerDown(topic string, o *Client, down map[*Client]error) error {
	tried := []string{o.addr}
	errs := []error{wrapAddr(o, down[o])}
	var answered []string
	for _, s := range k.servers {
		switch derr, ok := down[s]; {
		case !ok:
			answered = append(answered, s.addr)
		case s != o:
			tried = append(tried, s.addr)
			errs = append(errs, wrapAddr(s, derr))
		}
	}
	had := "no server answered"
	if len(answered) > 0 {
		had = "it is not on " + strings.Join(answered, ", ")
	}
	if len(tried) == 1 {
		return fmt.Errorf("%w: topic %q belongs on %s, which did not answer (%s): %w", ErrUnavailable, topic, o.addr, had, errs[0])
	}
	return fmt.Errorf("%w: topic %q belongs on %s, and may be on any of %s (its replicas, if it is replicated), none of which answered (%s): %w",
		ErrUnavailable, topic, o.addr, strings.Join(tried, ", "), had, errors.Join(errs...))
}

// onTopic runs op on the server topic lives on (create: see route). If a
// server found in the cache says it does not have the topic (deleted,
// moved), cannot be reached or is shutting down, the topic is looked for
// again and op runs once more where it is found. Errors name the server.
func (k *cluster) onTopic(ctx context.Context, topic string, create bool, op func(s *Client) error) error {
	return k.onTopicRepeat(ctx, topic, create, true, op)
}

// onTopicRepeat is onTopic; without repeat, op is not run again on
// another server after a connection error or a shutting-down answer: a
// produce, which may have been stored, and which goes on to another
// server by itself when that is harmless (Client.mayReroute).
func (k *cluster) onTopicRepeat(ctx context.Context, topic string, create, repeat bool, op func(s *Client) error) error {
	s, cached, err := k.route(ctx, topic, create)
	if err != nil {
		return err
	}
	err = op(s)
	if cached && errors.Is(err, ErrTopicNotFound) {
		k.forget(topic, s)
		if s, _, err = k.route(ctx, topic, create); err != nil {
			return err
		}
		err = op(s)
	}
	if gone(err) {
		// The server went away, or is going, whether it was remembered
		// or just found (it answered the search, then stopped): a
		// replicated topic lives on others too (which name its leader),
		// a topic of that server alone fails as it did.
		k.forget(topic, s)
		if !repeat {
			return wrapAddr(s, err)
		}
		if s2, _, rerr := k.route(ctx, topic, create); rerr == nil && s2 != s {
			s = s2
			err = op(s)
		}
	}
	// A replicated topic's write reached a server that does not lead it:
	// nothing was written, so it goes to the leader the server names, or,
	// while none is known (an election), to whoever answers next. A
	// leader named that has gone meanwhile (a rolling restart stops it
	// just after it handed its lead off) is asked no more: whoever
	// answers next names the new one.
	wait := notLeaderWait
	for followed := false; errors.Is(err, ErrNotLeader) || followed && repeat && gone(err); followed = true {
		k.forget(topic, s)
		if addr, ok := LeaderOf(err); ok && k.server(addr) != nil && k.server(addr) != s {
			s = k.server(addr)
		} else {
			select {
			case <-ctx.Done():
				return wrapAddr(s, err)
			case <-time.After(wait):
			}
			wait = min(2*wait, maxNotLeaderWait)
			if s, _, err = k.route(ctx, topic, create); err != nil {
				return err
			}
		}
		k.remember(topic, s)
		err = op(s)
	}
	if err == nil && create && k.cached(topic) == nil {
		k.remember(topic, s) // unless op went on to another server (a produce that followed a new leader), which it remembered
	}
	return wrapAddr(s, err)
}

// gone reports whether err says the server went away or is going.
func gone(err error) bool {
	return errors.Is(err, ErrConnection) || errors.Is(err, ErrShuttingDown)
}

// The waits of a request for a replicated topic while no leader is known:
// from notLeaderWait, doubling up to maxNotLeaderWait, until the
// request's context ends.
const (
	notLeaderWait    = 20 * time.Millisecond
	maxNotLeaderWait = 500 * time.Millisecond
)

// rerouteBudget bounds how long a produce looks for a replicated topic's
// leader after its server refused it or went away, within its context:
// a failover takes a few seconds (docs/replication.md).
const rerouteBudget = 15 * time.Second

// reroute is the servers' Client.reroute: after a produce to topic was
// refused by from as not the leader, or from could not be reached, it
// returns the server to send the same batch to: the leader from named,
// else, after a pause, whichever server the topic is found on (which
// names the leader in turn). It gives up after rerouteBudget.
func (k *cluster) reroute(ctx context.Context, topic string, from *Client, err error) (*Client, error) {
	if err == nil {
		k.rerouted(topic)
		k.remember(topic, from)
		return from, nil
	}
	k.forget(topic, from)
	if addr, ok := LeaderOf(err); ok {
		if s := k.server(addr); s != nil && s != from {
			k.remember(topic, s)
			return s, nil
		}
	}
	k.mu.Lock()
	if k.rerouting == nil {
		k.rerouting = make(map[string]time.Time)
	}
	began, ok := k.rerouting[topic]
	if !ok {
		began = time.Now()
		k.rerouting[topic] = began
	}
	k.mu.Unlock()
	if time.Since(began) > rerouteBudget {
		k.mu.Lock()
		delete(k.rerouting, topic)
		k.mu.Unlock()
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, err
	case <-time.After(notLeaderWait * 5):
	}
	s, _, rerr := k.route(ctx, topic, false)
	if rerr != nil {
		if errors.Is(rerr, ErrUnavailable) || errors.Is(rerr, ErrTopicNotFound) {
			return from, nil // nobody answers for it yet: try again where it was
		}
		return nil, rerr
	}
	return s, nil
}

// rerouted ends topic's reroute budget after a produce went through.
func (k *cluster) rerouted(topic string) {
	k.mu.Lock()
	if k.rerouting != nil {
		delete(k.rerouting, topic)
	}
	k.mu.Unlock()
}

// server returns the server of address addr, nil if the client has none.
func (k *cluster) server(addr string) *Client {
	for i, a := range k.addrs {
		if a == addr {
			return k.servers[i]
		}
	}
	return nil
}

// anyServer runs op on the servers in turn until one succeeds.
func (k *cluster) anyServer(ctx context.Context, op func(s *Client) error) error {
	var errs []error
	for _, s := range k.servers {
		err := op(s)
		if err == nil || ctx.Err() != nil {
			return err
		}
		errs = append(errs, wrapAddr(s, err))
	}
	return errors.Join(errs...)
}

// each runs op on every server in parallel and returns the errors of
// those that failed, each naming its server.
func (k *cluster) each(op func(i int, s *Client) error) error {
	errs := make([]error, len(k.servers))
	var wg sync.WaitGroup
	for i, s := range k.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = wrapAddr(s, op(i, s))
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// deleteTopic deletes topic where it lives and forgets where that was.
func (k *cluster) deleteTopic(ctx context.Context, topic string) error {
	var where *Client
	err := k.onTopic(ctx, topic, false, func(s *Client) error { where = s; return s.DeleteTopic(ctx, topic) })
	if err == nil {
		k.forget(topic, where)
	}
	return err
}

func (k *cluster) close() {
	for _, s := range k.servers {
		s.Close()
	}
}

func (k *cluster) ping(ctx context.Context) error {
	return k.each(func(_ int, s *Client) error { return s.Ping(ctx) })
}

// listTopics merges every server's list, sorted and without repeats, and
// remembers where each topic was seen. With an error (naming the servers
// that failed), the list holds the topics of the servers that answered.
func (k *cluster) listTopics(ctx context.Context, prefix, regex string) ([]string, error) {
	lists := make([][]string, len(k.servers))
	err := k.each(func(i int, s *Client) error {
		l, err := s.ListTopicsRegex(ctx, prefix, regex)
		lists[i] = l
		return err
	})
	var all []string
	k.mu.Lock()
	for i, l := range lists {
		for _, t := range l {
			if _, ok := k.where[t]; !ok {
				k.where[t] = k.servers[i]
			}
		}
		all = append(all, l...)
	}
	k.mu.Unlock()
	slices.Sort(all)
	return slices.Compact(all), err
}

func (k *cluster) stats() Stats {
	var t Stats
	for _, s := range k.servers {
		st := s.Stats()
		t.MessagesSent += st.MessagesSent
		t.BytesSent += st.BytesSent
		t.MessagesAcked += st.MessagesAcked
		t.BytesAcked += st.BytesAcked
		t.MessagesReceived += st.MessagesReceived
		t.Errors += st.Errors
		t.InFlight += st.InFlight
		t.Reconnects += st.Reconnects
	}
	return t
}

// messages is Messages over the server topic lives on; when that server
// says it does not have the topic, the loop looks for it again and goes on
// where it is found, from the next offset.
func (k *cluster) messages(ctx context.Context, topic string, from int64) iter.Seq2[Message, error] {
	return func(yield func(Message, error) bool) {
		bo := k.top.newBackoff(0)
		for ctx.Err() == nil {
			s, _, err := k.route(ctx, topic, false)
			if err != nil {
				if ctx.Err() != nil || !yield(Message{}, err) || errors.Is(err, ErrClosed) {
					return
				}
				if bo.wait(ctx) != nil {
					return
				}
				continue
			}
			relocate := false
			for m, err := range s.Messages(ctx, topic, from) {
				if err != nil {
					relocate = errors.Is(err, ErrTopicNotFound)
					if relocate {
						k.forget(topic, s)
					}
					err = wrapAddr(s, err)
				} else {
					from = m.Offset + 1
				}
				if !yield(m, err) {
					return
				}
				if relocate {
					break
				}
			}
			if !relocate {
				return // ctx ended, or the client was closed
			}
			if bo.wait(ctx) != nil {
				return
			}
		}
	}
}

// newReader is NewReader on the server topic lives on.
func (k *cluster) newReader(topic string, offset int64) (*Reader, error) {
	var r *Reader
	err := k.onTopic(context.Background(), topic, false, func(s *Client) error {
		var err error
		if r, err = s.NewReader(topic, offset); r != nil {
			r.server, r.k = s.addr, k
		}
		return err
	})
	return r, err
}

// newProducer is NewProducer on the server topic lives on, or is placed on
// when the client creates topics. A topic that cannot be found or placed
// gives a Producer whose Send fails with that error.
func (k *cluster) newProducer(topic string, opts []ProducerOption) *Producer {
	ctx, cancel := context.WithTimeout(context.Background(), k.top.opts.requestTimeout)
	defer cancel()
	s, _, err := k.route(ctx, topic, k.top.opts.autoCreate)
	if err != nil {
		p := k.owner(topic).NewProducer(topic, opts...)
		p.err = err
		return p
	}
	p := s.NewProducer(topic, opts...)
	p.server = s.addr
	return p
}
