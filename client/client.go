package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// Client is a connection to a haraqa server, safe for concurrent use:
// requests from many goroutines are pipelined on one connection, which is
// re-established after it breaks (a server restart, say).
type Client struct {
	addr string
	opts options

	main connSlot // every request but long polls

	mu     sync.Mutex
	polls  map[*connSlot]struct{} // connections of Messages loops
	closed bool
	done   chan struct{}

	stats statCounters
	comb  combiner // Produce calls combined under load (combine.go)

	cl       *cluster     // several servers: see cluster.go; nil for one
	producer *producerSeq // idempotence: Produce's producer id and sequences; nil when off
	// reroute, on a server of a Client of several, finds the server to
	// send a produce to once this one refused it as not the topic's
	// leader or could not be reached (cluster.reroute); nil for one.
	reroute func(ctx context.Context, topic string, from *Client, err error) (*Client, error)
	// k, on a server of a Client of several, is their cluster, which
	// asks the others who leads a topic (produceOn); nil for one.
	k *cluster
}

// Dial connects to the server at addr (host:port) and checks it answers.
// addr may be a comma-separated list of servers ("a:14353,b:14353"): the
// client then spreads topics over them (see the package doc, "Several
// servers"), and Dial succeeds once one of them answers.
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	o := defaultOptions()
	for _, f := range opts {
		f(&o)
	}
	if addrs := splitAddrs(addr); len(addrs) > 1 {
		return dialCluster(ctx, addrs, o)
	}
	c := newClient(addr, o)
	if err := c.Ping(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// newClient is a Client of the server at addr, not yet connected.
func newClient(addr string, o options) *Client {
	c := &Client{addr: addr, opts: o, done: make(chan struct{}), polls: make(map[*connSlot]struct{})}
	if o.idempotent {
		c.producer = newProducerSeq()
	}
	return c
}

// Close closes the connections. Requests in flight and Messages loops end
// with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	polls := c.polls
	c.polls = nil
	c.mu.Unlock()
	c.main.close()
	for s := range polls {
		s.close()
	}
	if c.cl != nil {
		c.cl.close()
	}
	return nil
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// connSlot holds a connection that is dialed again once it breaks.
type connSlot struct {
	mu   sync.Mutex
	conn *conn
}

func (s *connSlot) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		s.conn.close()
	}
}

// connect returns the slot's live connection, dialing a new one if needed.
func (c *Client) connect(ctx context.Context, s *connSlot) (*conn, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	if c.cl != nil { // an operation cluster.go does not route
		return nil, fmt.Errorf("%w (%s)", ErrSeveralServers, c.addr)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil && !s.conn.dead() {
		if !s.conn.idleFor(c.opts.idleTimeout) {
			return s.conn, nil
		}
		// Idle for long enough that the server may be closing it: a new
		// connection, rather than a request racing that close.
		s.conn.close()
	}
	reconnect := s.conn != nil
	cn, err := dial(ctx, c.addr, c.opts.dialTimeout, c.opts.tls, c.opts.responseLimit())
	if err != nil {
		return nil, err
	}
	if c.isClosed() { // closed while dialing
		cn.close()
		return nil, ErrClosed
	}
	if c.opts.token != "" {
		if err := cn.hello(ctx, c.opts.name, c.opts.token); err != nil {
			cn.close()
			return nil, err
		}
	}
	s.conn = cn
	if reconnect {
		c.stats.reconnects.Add(1)
	}
	return cn, nil
}

// liveConn returns the slot's connection if it is up and fit for a request
// now (as connect would return it), without dialing; else nil.
func (c *Client) liveConn(s *connSlot) *conn {
	if c.isClosed() || c.cl != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil || s.conn.dead() || s.conn.idleFor(c.opts.idleTimeout) {
		return nil
	}
	return s.conn
}

// pollSlot returns a connection slot of its own for a Messages loop, so its
// long polls hold back no other request; release it when done.
func (c *Client) pollSlot() (*connSlot, func(), error) {
	s := new(connSlot)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, nil, ErrClosed
	}
	c.polls[s] = struct{}{}
	return s, func() {
		c.mu.Lock()
		delete(c.polls, s)
		c.mu.Unlock()
		s.close()
	}, nil
}

// do sends a request and returns the payload of a successful response.
// Requests that failed on a broken connection are retried on a new one as
// a retrier allows (retry=false: only if they cannot have reached the
// server).
func (c *Client) do(ctx context.Context, op protocol.Op, extraWait time.Duration, retry bool,
	build func(dst []byte, corrID uint32) []byte) ([]byte, error) {
	return c.doOn(ctx, &c.main, op, extraWait, retry, nil, build)
}

// doOn is do on the connection of slot s. With buf, the response is read
// into *buf when it fits (its capacity), and *buf is left holding the
// buffer it was read into, for the next call.
func (c *Client) doOn(ctx context.Context, s *connSlot, op protocol.Op, extraWait time.Duration, retry bool, buf *[]byte,
	build func(dst []byte, corrID uint32) []byte) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.requestTimeout+extraWait)
		defer cancel()
	}
	rt := c.newRetrier(c.opts.retries, requestBackoffMax)
	for {
		var resp response
		sent := false
		cn, err := c.connect(ctx, s)
		if err == nil {
			var into []byte
			if buf != nil {
				into = *buf
			}
			resp, sent = cn.roundTrip(ctx, into, build)
			err = resp.err
			if buf != nil && resp.frame != nil {
				*buf = resp.frame[:0]
			}
		}
		if err == nil {
			if resp.hdr.Code != protocol.CodeOK {
				c.stats.errors.Add(1)
				return nil, serverError(op, resp)
			}
			return resp.payload, nil
		}
		if sent && !retry && !c.isClosed() {
			// It may have reached the server: never sent twice.
			c.stats.errors.Add(1)
			return nil, err
		}
		if err := rt.retry(ctx, err); err != nil {
			if !errors.Is(err, ErrClosed) {
				c.stats.errors.Add(1)
			}
			return nil, err
		}
	}
}

// Ping checks the server answers.
func (c *Client) Ping(ctx context.Context) error {
	if c.cl != nil {
		return c.cl.ping(ctx)
	}
	_, err := c.do(ctx, protocol.OpPing, 0, true, protocol.AppendPingRequest)
	return err
}

// CreateTopic creates a topic; ErrTopicExists if it exists.
func (c *Client) CreateTopic(ctx context.Context, topic string) error {
	if c.cl != nil {
		return c.cl.onTopic(ctx, topic, true, func(s *Client) error { return s.CreateTopic(ctx, topic) })
	}
	_, err := c.do(ctx, protocol.OpCreateTopic, 0, true, func(dst []byte, id uint32) []byte {
		return protocol.AppendCreateTopicRequest(dst, id, topic)
	})
	return err
}

// DeleteTopic deletes a topic and its messages; ErrTopicNotFound if missing.
func (c *Client) DeleteTopic(ctx context.Context, topic string) error {
	if c.cl != nil {
		return c.cl.deleteTopic(ctx, topic)
	}
	_, err := c.do(ctx, protocol.OpDeleteTopic, 0, true, func(dst []byte, id uint32) []byte {
		return protocol.AppendDeleteTopicRequest(dst, id, topic)
	})
	return err
}

// ListTopics returns the topics whose names start with prefix, sorted.
func (c *Client) ListTopics(ctx context.Context, prefix string) ([]string, error) {
	return c.ListTopicsRegex(ctx, prefix, "")
}

// ListTopicsRegex returns the topics whose names start with prefix and
// match regex (RE2 syntax, unanchored; empty matches all), sorted.
func (c *Client) ListTopicsRegex(ctx context.Context, prefix, regex string) ([]string, error) {
	if c.cl != nil {
		return c.cl.listTopics(ctx, prefix, regex)
	}
	p, err := c.do(ctx, protocol.OpListTopics, 0, true, func(dst []byte, id uint32) []byte {
		return protocol.AppendListTopicsRequest(dst, id, prefix, regex)
	})
	if err != nil {
		return nil, err
	}
	r, err := protocol.ParseListTopicsResponse(p)
	if err != nil {
		return nil, err
	}
	return r.Strings(), nil
}

// TopicInfo describes a topic.
type TopicInfo struct {
	Oldest   int64 // oldest offset kept
	Next     int64 // offset the next message will get
	Bytes    int64 // bytes on the server's read volume
	Segments int   // segment files
}

// TopicInfo returns a topic's offsets and size.
func (c *Client) TopicInfo(ctx context.Context, topic string) (TopicInfo, error) {
	if c.cl != nil {
		var ti TopicInfo
		err := c.cl.onTopic(ctx, topic, false, func(s *Client) (err error) { ti, err = s.TopicInfo(ctx, topic); return err })
		return ti, err
	}
	p, err := c.do(ctx, protocol.OpTopicInfo, 0, true, func(dst []byte, id uint32) []byte {
		return protocol.AppendTopicInfoRequest(dst, id, topic)
	})
	if err != nil {
		return TopicInfo{}, err
	}
	r, err := protocol.ParseTopicInfoResponse(p)
	if err != nil {
		return TopicInfo{}, err
	}
	return TopicInfo{Oldest: r.OldestOffset, Next: r.NextOffset, Bytes: r.Bytes, Segments: int(r.Segments)}, nil
}

// Truncate drops the messages before offset and returns the new oldest
// offset (the server removes whole files, so it may keep a few more).
func (c *Client) Truncate(ctx context.Context, topic string, before int64) (int64, error) {
	return c.truncate(ctx, topic, protocol.TruncateByOffset, before)
}

// TruncateTime drops the messages appended before t and returns the new
// oldest offset.
func (c *Client) TruncateTime(ctx context.Context, topic string, t time.Time) (int64, error) {
	return c.truncate(ctx, topic, protocol.TruncateByTime, protocol.UnixNano(t))
}

// OffsetAt returns the first offset of topic appended at or after t: the
// oldest offset when t is at or before the oldest message, the next offset
// (where a new message will go) when t is after the newest. Append times
// are the server's, one per produced batch, so the offset is a batch's
// first. Reading from it returns the messages appended since t.
func (c *Client) OffsetAt(ctx context.Context, topic string, t time.Time) (int64, error) {
	if c.cl != nil {
		var off int64
		err := c.cl.onTopic(ctx, topic, false, func(s *Client) (err error) { off, err = s.OffsetAt(ctx, topic, t); return err })
		return off, err
	}
	p, err := c.do(ctx, protocol.OpOffsetAt, 0, true, func(dst []byte, id uint32) []byte {
		return protocol.AppendOffsetAtRequest(dst, id, topic, protocol.UnixNano(t))
	})
	if err != nil {
		return 0, err
	}
	r, err := protocol.ParseOffsetAtResponse(p)
	return r.Offset, err
}

func (c *Client) truncate(ctx context.Context, topic string, by protocol.TruncateBy, before int64) (int64, error) {
	if c.cl != nil {
		var oldest int64
		err := c.cl.onTopic(ctx, topic, false, func(s *Client) (err error) { oldest, err = s.truncate(ctx, topic, by, before); return err })
		return oldest, err
	}
	p, err := c.do(ctx, protocol.OpTruncate, 0, true, func(dst []byte, id uint32) []byte {
		return protocol.AppendTruncateRequest(dst, id, topic, by, before)
	})
	if err != nil {
		return 0, err
	}
	r, err := protocol.ParseTruncateResponse(p)
	return r.OldestOffset, err
}

// Stats are a client's counters, for its user's metrics.
type Stats struct {
	MessagesSent, BytesSent   int64 // produced, acknowledged or not
	MessagesAcked, BytesAcked int64 // acknowledged by the server
	MessagesReceived          int64 // returned by Consume and Messages
	Errors                    int64 // requests that failed
	InFlight                  int64 // produce requests waiting for their answer
	Reconnects                int64 // connections re-established
}

type statCounters struct {
	msgsSent, bytesSent, msgsAcked, bytesAcked, received, errors, inFlight, reconnects atomic.Int64
}

// Stats returns the counters.
func (c *Client) Stats() Stats {
	if c.cl != nil {
		return c.cl.stats()
	}
	s := &c.stats
	return Stats{
		MessagesSent: s.msgsSent.Load(), BytesSent: s.bytesSent.Load(),
		MessagesAcked: s.msgsAcked.Load(), BytesAcked: s.bytesAcked.Load(),
		MessagesReceived: s.received.Load(), Errors: s.errors.Load(),
		InFlight: s.inFlight.Load(), Reconnects: s.reconnects.Load(),
	}
}
