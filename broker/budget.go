package broker

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/haraqa/haraqa/protocol"
)

// This file: the memory budget shared by every connection
// (Config.MaxBufferedBytes).
//
// Each connection's loop keeps its share of Broker.stats.buffered up to
// date: before each frame it handles and at the end of each callback it
// adds the change in what the connection holds (holding) since it last
// counted. Only the loop writes a connection's share, so the total needs
// no lock. What changes off the loop (a produce stored, an answer filed by
// the worker) is followed by a Wake, so it is counted at the next callback;
// and what gnet writes out on its own when the socket drains is counted
// when the connection next runs: while the server is over its budget, the
// tick wakes the connections whose output was unsent at their last count
// (draining) so that stale shares are brought up to date.

// Default budget bounds: a quarter of physical memory, at most 1 GiB and
// at least 64 MiB.
const (
	maxDefaultBuffered = 1 << 30
	minDefaultBuffered = 64 << 20
)

// DefaultMaxBufferedBytes is the default Config.MaxBufferedBytes: a quarter
// of the machine's physical memory, at most 1 GiB (enough for 64
// connections with full 16 MiB output buffers) and at least 64 MiB. The
// rest is left to the page cache, which serves consumes, and to the Go
// runtime. It does not read cgroup limits: in a container, set
// -max-buffered-bytes below the container's memory limit.
func DefaultMaxBufferedBytes() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil || si.Totalram == 0 {
		return maxDefaultBuffered
	}
	total := int64(si.Totalram) * int64(max(si.Unit, 1))
	return max(minDefaultBuffered, min(maxDefaultBuffered, total/4))
}

// holding is what the broker buffers for c now: unread input, unsent
// output, answers held in slots, produce batches copied for storage and a
// large frame being gathered. Runs on the loop.
func (cs *conn) holding() int64 {
	c := cs.c
	n := int64(c.InboundBuffered()) + cs.output()
	if cs.big != nil {
		n += int64(len(cs.big.B))
	}
	return n
}

// output is the part of holding that the broker made by handling the
// connection's requests, which stops growing once it stops reading them.
func (cs *conn) output() int64 {
	c := cs.c
	return int64(c.OutboundBuffered()+len(cs.out)) + cs.w.held.Load() + cs.w.queued.Load()
}

// account brings c's share of the total up to date and returns the total.
// Runs on the loop.
func (cs *conn) account() int64 {
	b := cs.b
	now := cs.holding()
	if d := now - cs.accounted; d != 0 {
		cs.accounted = now
		return b.stats.buffered.Add(d)
	}
	return b.stats.buffered.Load()
}

// overBudget reports whether the server buffers more than MaxBufferedBytes
// while c holds output of its own: c is then not read (nor its queued
// consumes served) until the total is under the budget again, and the tick
// wakes it to look. A connection that holds no output is served: that is
// how a client that reads its answers keeps working while others hog the
// budget (its consumes within the reserve only, see consumeWaits). A
// connection paused for the budget for longer than StallTimeout does not
// read what it asked for and is closed, as a stalled one is. Runs on the
// loop.
func (cs *conn) overBudget() bool {
	b := cs.b
	if b.cfg.MaxBufferedBytes <= 0 {
		return false
	}
	if cs.account() <= b.cfg.MaxBufferedBytes || cs.output() == 0 {
		cs.pausedSince = time.Time{}
		return false
	}
	cs.pause()
	return true
}

// consumeWaits reports whether a consume of c must wait for memory: the
// server buffers more than MaxBufferedBytes and c holds output, or it
// buffers more than the budget and c may not use the reserve
// (budgetReserve): the total is over the reserve too, since a consume's
// answer may not fit the socket and stay buffered, or c is pipelining
// (other requests of it wait behind this one, or are unread), as clients
// that ask for many answers and read none do. A consume that waits for
// the reserve is woken by the tick, and is not closed for it: it holds
// no output. Runs on the loop.
func (cs *conn) consumeWaits() bool {
	b, c := cs.b, cs.c
	if cs.overBudget() {
		return true
	}
	total, budget := b.stats.buffered.Load(), b.cfg.MaxBufferedBytes
	if budget <= 0 || total <= budget || total <= budget+budget/budgetReserve && !cs.pipelining() {
		cs.waitSince = time.Time{}
		return false
	}
	if cs.waitSince.IsZero() {
		cs.waitSince = time.Now()
		b.stats.budgetPauses.Add(1)
	}
	b.stalledMu.Lock()
	b.stalled[c] = cs.waitSince
	b.stalledMu.Unlock()
	return true
}

// pipelining reports whether c has requests waiting behind the one at the
// head of its queue, or unread beyond the frame being handled. Runs on
// the loop.
func (cs *conn) pipelining() bool {
	c := cs.c
	return len(cs.slots) > 1 || c.InboundBuffered() > cs.handling
}

// budgetReserve: connections holding no output may take the budget past
// MaxBufferedBytes by MaxBufferedBytes/budgetReserve with their consumes'
// answers, one consume at a time. Without it, a thousand connections that
// each ask for one large consume and do not read would each leave an
// answer buffered, whatever the budget; with it, a well-behaved consumer
// is answered while a few connections hog the budget. Connections that
// pipeline consumes do not take the reserve: once the kernel has taken
// their first answers they hold no output either, and would spend the
// reserve the well-behaved consumer needs.
const budgetReserve = 8

// budgetUnread and budgetCeiling bound what clients send while not read:
// gnet reads every socket whatever the broker does, so a paused
// connection's unread input grows for as long as its client sends. While
// the server buffers more than MaxBufferedBytes + MaxBufferedBytes /
// budgetCeiling, a paused connection with more than budgetUnread unread is
// closed (counted as stalled): its client pipelines requests without
// reading their answers, against a server out of memory budget.
const (
	budgetUnread  = 1 << 20
	budgetCeiling = 4
)

// overCeiling reports whether the server buffers more than its budget and
// a quarter. Runs on the loop.
func (b *Broker) overCeiling() bool {
	return b.cfg.MaxBufferedBytes > 0 && b.stats.buffered.Load() > b.cfg.MaxBufferedBytes+b.cfg.MaxBufferedBytes/budgetCeiling
}

// pause records that c waits for the budget, to be woken by the tick, and
// closes it once it has waited longer than StallTimeout.
func (cs *conn) pause() {
	b, c := cs.b, cs.c
	now := time.Now()
	if cs.pausedSince.IsZero() {
		cs.pausedSince = now
		b.stats.budgetPauses.Add(1)
	} else if now.Sub(cs.pausedSince) > b.cfg.StallTimeout && cs.output() > 0 {
		b.stats.stallClosed.Add(1)
		cs.fatal = fmt.Errorf("%w: over the server's memory budget, its client has not read its responses for %s (StallTimeout)", errStalled, b.cfg.StallTimeout)
		return
	}
	b.stalledMu.Lock()
	b.stalled[c] = cs.pausedSince
	b.stalledMu.Unlock()
}

// settle counts c's share at the end of a callback, and remembers c for a
// wake while the server is over its budget if gnet still holds output for
// it (which gnet may write out without telling). It reports whether c must
// close: the server is over its budget and c is among the connections
// gathering the largest unfinished frames (shedFrames). Runs on the loop.
func (cs *conn) settle() bool {
	b, c := cs.b, cs.c
	if b.cfg.MaxBufferedBytes <= 0 {
		return false
	}
	total := cs.account()
	cs.trackFrame()
	if c.OutboundBuffered() > 0 && !cs.draining.Swap(true) {
		b.stalledMu.Lock()
		b.draining[c] = cs
		b.stalledMu.Unlock()
	}
	return total > b.cfg.MaxBufferedBytes && cs.shedFrames(total)
}

// Unfinished frames. gnet reads every socket whatever the broker does, so
// pausing a connection does not stop a frame from growing: a client that
// announces large frames and never finishes them would hold memory for as
// long as it sends. Over the budget, the connections gathering the largest
// unfinished frames (of shedFloor bytes or more) are closed, largest
// first, until what they hold covers the excess.

// shedFloor is the least unfinished frame closed for the budget: smaller
// ones are a client's request on its way, bounded by the connection count
// (and, with tokens, by MaxPreHelloFrame and HelloTimeout before a hello).
const shedFloor = 64 << 10

// shedState holds the connections gathering an unfinished frame of
// shedFloor bytes or more.
type shedState struct {
	mu        sync.Mutex
	gathering map[*conn]struct{}
	marked    atomic.Int64 // bytes of the connections marked to close and not closed yet
	log       rateLog      // of the connections closed
}

// unfinished is what c holds of the frame it waits the rest of: what it
// gathered of a large one, or what gnet buffered of a small one; 0 when
// readFrames stopped for another reason (backpressure, the budget), which
// the stall rules bound. Runs on the loop.
func (cs *conn) unfinished() int64 {
	if !cs.waitingFrame {
		return 0
	}
	n := int64(cs.c.InboundBuffered())
	if cs.big != nil {
		n += int64(len(cs.big.B))
	}
	return n
}

// trackFrame records the size of c's unfinished frame, and c in
// shedState.gathering while it is shedFloor or more. Runs on the loop.
func (cs *conn) trackFrame() {
	n := cs.unfinished()
	cs.frameBytes.Store(n)
	if in := n >= shedFloor; in != cs.gathering {
		sh := &cs.b.shed
		sh.mu.Lock()
		if in {
			if sh.gathering == nil {
				sh.gathering = make(map[*conn]struct{})
			}
			sh.gathering[cs] = struct{}{}
		} else {
			delete(sh.gathering, cs)
		}
		sh.mu.Unlock()
		cs.gathering = in
	}
}

// shedFrames marks to close, the total being over the budget, the
// connections gathering the largest unfinished frames until they cover the
// excess (less what connections marked before still hold), and wakes them
// to close on their loops. It reports whether c itself is one of them.
// Runs on the loop.
func (cs *conn) shedFrames(total int64) bool {
	b := cs.b
	sh := &b.shed
	excess := total - b.cfg.MaxBufferedBytes - sh.marked.Load()
	if excess <= 0 {
		return false
	}
	sh.mu.Lock()
	cands := make([]*conn, 0, len(sh.gathering))
	for o := range sh.gathering {
		if !o.shed.Load() {
			cands = append(cands, o)
		}
	}
	slices.SortFunc(cands, func(x, y *conn) int { return cmp.Compare(y.frameBytes.Load(), x.frameBytes.Load()) })
	var victims []*conn
	for _, o := range cands {
		if excess <= 0 {
			break
		}
		o.shedBytes = o.frameBytes.Load()
		o.shed.Store(true)
		sh.marked.Add(o.shedBytes)
		excess -= o.shedBytes
		victims = append(victims, o)
	}
	sh.mu.Unlock()
	self := false
	for _, o := range victims {
		if o == cs {
			self = true
		} else {
			_ = o.c.Wake(nil)
		}
	}
	return self
}

// closeShed sends c, marked by shedFrames, one CodeLimitReached frame (op 0,
// correlation id 0) and closes it. Runs on the loop.
func (cs *conn) closeShed() gnet.Action {
	b, c := cs.b, cs.c
	b.stats.budgetClosed.Add(1)
	n := cs.frameBytes.Load()
	if k, ok := b.shed.log.due(); ok {
		b.cfg.Logger.Warn("closing connections gathering the largest unfinished frames: over the memory budget",
			"max_buffered_bytes", b.cfg.MaxBufferedBytes, "remote", remoteAddr(c), "frame_bytes", n, "closed", k)
	}
	msg := fmt.Sprintf("over the server's memory budget (-max-buffered-bytes %d): the connection was gathering one of the largest unfinished frames (%d bytes so far) and is closed; that frame was not read", b.cfg.MaxBufferedBytes, n)
	_, _ = c.Write(protocol.AppendErrorResponse(nil, 0, 0, protocol.CodeLimitReached, msg))
	return gnet.Close
}

// forgetFrame takes a closing connection out of shedState. Runs on the
// loop, from OnClose.
func (cs *conn) forgetFrame() {
	if !cs.gathering && !cs.shed.Load() {
		return
	}
	sh := &cs.b.shed
	sh.mu.Lock()
	delete(sh.gathering, cs)
	if cs.shed.Load() {
		sh.marked.Add(-cs.shedBytes)
		cs.shedBytes = 0
	}
	sh.mu.Unlock()
	cs.gathering = false
}

// ErrOverBudget: Reserve would take what the server buffers past
// Config.MaxBufferedBytes.
var ErrOverBudget = errors.New("broker: over the memory budget")

// Reserve counts n bytes that the caller is about to buffer outside the
// binary port's connections (the HTTP port's request bodies and the
// responses it builds) in the total Config.MaxBufferedBytes bounds, so
// that one bound holds for both ports, and returns nil if they fit. If
// they do not, it counts nothing and returns an error wrapping
// ErrOverBudget that names -max-buffered-bytes. Each Reserve that returned
// nil is undone by Release(n) once the bytes are freed. Without a budget
// it counts nothing and returns nil.
func (b *Broker) Reserve(n int64) error {
	budget := b.cfg.MaxBufferedBytes
	if budget <= 0 || n <= 0 {
		return nil
	}
	for {
		cur := b.stats.buffered.Load()
		if cur+n > budget {
			if n > budget {
				return fmt.Errorf("%w: %d bytes are more than the whole budget of %d bytes (-max-buffered-bytes)", ErrOverBudget, n, budget)
			}
			return fmt.Errorf("%w: %d bytes more would pass the budget of %d bytes (-max-buffered-bytes), %d in use: retry later", ErrOverBudget, n, budget, cur)
		}
		if b.stats.buffered.CompareAndSwap(cur, cur+n) {
			return nil
		}
	}
}

// Release gives back n bytes of a Reserve that returned nil.
func (b *Broker) Release(n int64) {
	if b.cfg.MaxBufferedBytes > 0 && n > 0 {
		b.stats.buffered.Add(-n)
	}
}

// wakeDraining wakes, while the server is over its budget, every connection
// that had unsent output at its last count, so that what gnet wrote out
// meanwhile leaves the total. Runs on the tick goroutine.
func (b *Broker) wakeDraining() {
	if b.cfg.MaxBufferedBytes <= 0 || b.stats.buffered.Load() <= b.cfg.MaxBufferedBytes {
		return
	}
	b.stalledMu.Lock()
	conns := make([]gnet.Conn, 0, len(b.draining))
	for c, cs := range b.draining {
		cs.draining.Store(false) // its callback's settle adds it again if need be
		conns = append(conns, c)
	}
	clear(b.draining)
	b.stalledMu.Unlock()
	for _, c := range conns {
		_ = c.Wake(nil)
	}
}
