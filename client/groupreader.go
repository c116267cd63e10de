package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
)

// GroupReader reads a topic as a member of a consumer group: from the
// group's committed offset, committing as it goes, while it holds the
// group's lease on the topic, so that one member at a time reads it.
// Delivery is at-least-once: what was read but not committed when a
// member stops is read again by the next.
//
// The messages Next returns are handed out; calling Next again says the
// ones before were processed. Commit commits everything handed out;
// WithAutoCommit commits what was processed at an interval; Close commits
// what was processed and releases the lease. A GroupReader is not safe
// for concurrent use.
type GroupReader struct {
	c            *Client
	group, topic string
	member       string
	opts         groupOptions

	r         *Reader // nil until the lease is taken
	state     GroupOffset
	handed    int64 // offset after the last message handed out
	processed int64 // offset after the last message known processed
	committed int64 // the committed offset as this reader last set or saw it
	lastSave  time.Time

	mu      sync.Mutex
	lost    error // the lease could not be renewed: set by the renewer
	stop    chan struct{}
	stopped chan struct{}
	closed  bool
}

// GroupOption configures a GroupReader.
type GroupOption func(*groupOptions)

type groupOptions struct {
	autoCommit time.Duration
	lease      time.Duration
	start      int64
	startSet   bool
	noWait     bool
}

// WithAutoCommit makes Next commit what was processed (the messages
// handed out before it) when d has passed since the last commit.
// 0, the default, commits only on Commit and Close.
func WithAutoCommit(d time.Duration) GroupOption {
	return func(o *groupOptions) { o.autoCommit = max(d, 0) }
}

// WithLeaseDuration sets the lease asked for (default 10 s, 100 ms to
// 5 min). The reader renews it every third of it while open; a member
// that stops renewing (a crash) loses the group to another that long
// after.
func WithLeaseDuration(d time.Duration) GroupOption {
	return func(o *groupOptions) { o.lease = d }
}

// WithStartOffset sets where a group that has no committed offset starts
// (default the oldest offset); negative counts back from the end: -1 is
// the last message. A group that has committed starts there, whatever
// this says.
func WithStartOffset(offset int64) GroupOption {
	return func(o *groupOptions) { o.start, o.startSet = offset, true }
}

// WithoutLeaseWait makes Start and Next fail at once with ErrGroupBusy
// when another member holds the lease. By default they wait, asking again
// until the lease is free or their context ends: a standby member.
func WithoutLeaseWait() GroupOption {
	return func(o *groupOptions) { o.noWait = true }
}

// NewGroupReader returns a reader of topic for group. It takes the lease
// on the first Start or Next. Close it when done.
func (c *Client) NewGroupReader(group, topic string, opts ...GroupOption) (*GroupReader, error) {
	var o groupOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.lease == 0 {
		o.lease = 10 * time.Second
	}
	var id [12]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	return &GroupReader{c: c, group: group, topic: topic, member: hex.EncodeToString(id[:]), opts: o}, nil
}

// ErrNotStarted: a commit was asked of a GroupReader that holds no lease.
var ErrNotStarted = errors.New("client: group reader has not started: call Start or Next first")

// Start takes the group's lease, waiting for it unless WithoutLeaseWait,
// and returns the group's state: Start is where reading begins (with
// WithStartOffset applied), Next the topic's end at that time. Next calls
// it when needed; calling it again returns the state it found.
func (g *GroupReader) Start(ctx context.Context) (GroupOffset, error) {
	if g.closed {
		return GroupOffset{}, ErrClosed
	}
	if g.r != nil {
		return g.state, nil
	}
	pause := min(g.opts.lease/4, time.Second)
	var o GroupOffset
	for {
		var err error
		o, err = g.c.lease(ctx, g.group, g.topic, g.member, 0, g.opts.lease)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrGroupBusy) || g.opts.noWait {
			return GroupOffset{}, err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return GroupOffset{}, ctx.Err()
		case <-t.C:
		}
	}
	var err error
	if o.Committed == NoOffset && g.opts.startSet {
		if g.opts.start < 0 {
			o.Start = max(o.Next+g.opts.start, o.Start)
		} else if o.Start = g.opts.start; o.Start > o.Next {
			err = fmt.Errorf("%w: start offset %d is past the end of topic %q (%d)", ErrOffsetOutOfRange, o.Start, g.topic, o.Next)
		}
	}
	var r *Reader
	if err == nil {
		r, err = g.c.NewReader(g.topic, o.Start)
	}
	if err != nil {
		_, _ = g.c.lease(ctx, g.group, g.topic, g.member, 1, 0)
		return GroupOffset{}, err
	}
	g.r, g.state = r, o
	g.handed, g.processed, g.committed = o.Start, o.Start, o.Committed
	g.lastSave = time.Now()
	g.stop, g.stopped = make(chan struct{}), make(chan struct{})
	go g.renew(o.Lease)
	return o, nil
}

// renew renews the lease every third of it until Close. A renewal the
// server refuses (another member took the group after this one failed to
// renew in time) is kept for Next and Commit to report; a broken
// connection, or a replicated topic with no leader yet, is tried again
// at the next tick.
func (g *GroupReader) renew(granted time.Duration) {
	defer close(g.stopped)
	every := max(granted, g.opts.lease) / 3
	tick := time.NewTicker(max(every, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		_, err := g.c.lease(ctx, g.group, g.topic, g.member, 0, g.opts.lease)
		cancel()
		if errors.Is(err, ErrClosed) {
			return // the client is closed: no lease to keep
		}
		var se *Error
		if errors.As(err, &se) && !errors.Is(err, ErrNotLeader) {
			// (Not leader: a replicated topic between two leaders; the
			// lease is in the cluster, kept for the next tick.)
			g.mu.Lock()
			g.lost = fmt.Errorf("client: group %q lost its lease on topic %q: %w", g.group, g.topic, err)
			g.mu.Unlock()
			return
		}
	}
}

func (g *GroupReader) lostErr() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lost
}

// Next returns the next messages of the topic, at least one, waiting at
// the end of the topic for more (see Reader.Next) until ctx ends. It
// takes the lease first if needed. Calling it says the messages it
// returned before were processed; with WithAutoCommit, it commits them
// when the interval has passed.
func (g *GroupReader) Next(ctx context.Context) ([]Message, error) {
	if _, err := g.Start(ctx); err != nil {
		return nil, err
	}
	if err := g.lostErr(); err != nil {
		return nil, err
	}
	g.processed = g.handed
	if g.opts.autoCommit > 0 && g.processed != g.committed && time.Since(g.lastSave) >= g.opts.autoCommit {
		if err := g.save(ctx, g.processed); err != nil {
			return nil, err
		}
	}
	msgs, err := g.r.Next(ctx)
	if err != nil {
		return nil, err
	}
	g.handed = msgs[len(msgs)-1].Offset + 1
	return msgs, nil
}

// Commit commits every message Next has handed out: call it once they
// are processed.
func (g *GroupReader) Commit(ctx context.Context) error {
	return g.CommitTo(ctx, g.handed)
}

// CommitTo commits offset next: the messages before it are processed.
// It is at most the offset after the last message handed out.
func (g *GroupReader) CommitTo(ctx context.Context, next int64) error {
	if g.closed {
		return ErrClosed
	}
	if g.r == nil {
		return ErrNotStarted
	}
	if next > g.handed || next < 0 {
		return fmt.Errorf("%w: commit offset %d: messages up to %d were handed out", ErrInvalidArgument, next, g.handed)
	}
	if err := g.lostErr(); err != nil {
		return err
	}
	g.processed = next
	if next == g.committed {
		return nil
	}
	return g.save(ctx, next)
}

// save commits next, conditional on the commit this reader knows, so a
// member that lost the group cannot move it back.
//
// A conflict may be this reader's own: a commit whose answer was lost (a
// server that went down, a failover) but that was stored. When the
// group's commit lies between the one this reader knows and next, it is
// taken as such and next committed on it (a member holding the lease is
// the only one whose commits are taken; one that took the group
// meanwhile holds it, and the commit is refused as busy).
func (g *GroupReader) save(ctx context.Context, next int64) error {
	err := g.c.commit(ctx, g.group, g.topic, g.member, next, true, g.committed)
	if errors.Is(err, ErrCommitConflict) {
		if o, ferr := g.c.FetchOffset(ctx, g.group, g.topic); ferr == nil && o.Committed <= next && o.Committed >= g.committed {
			g.committed = o.Committed
			err = nil
			if o.Committed != next {
				err = g.c.commit(ctx, g.group, g.topic, g.member, next, true, o.Committed)
			}
		}
	}
	if err != nil {
		return err
	}
	g.committed, g.lastSave = next, time.Now()
	return nil
}

// Close commits what was processed (the messages handed out before the
// last Next, or up to the last Commit or CommitTo), releases the lease
// and ends the reader. Messages handed out by the last Next and not
// committed are read again by the group's next reader. The error is the
// commit's.
func (g *GroupReader) Close() error {
	if g.closed {
		return nil
	}
	g.closed = true
	if g.r == nil {
		return nil
	}
	close(g.stop)
	<-g.stopped
	ctx, cancel := context.WithTimeout(context.Background(), g.c.opts.requestTimeout)
	defer cancel()
	var err error
	if g.processed != g.committed && g.lostErr() == nil {
		err = g.save(ctx, g.processed)
	}
	_, _ = g.c.lease(ctx, g.group, g.topic, g.member, 1, 0) // an unreleased lease expires anyway
	g.r.Close()
	return err
}
