package broker

import (
	"fmt"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
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
// it (which gnet may write out without telling). Runs on the loop.
func (cs *conn) settle() {
	b, c := cs.b, cs.c
	if b.cfg.MaxBufferedBytes <= 0 {
		return
	}
	cs.account()
	if c.OutboundBuffered() > 0 && !cs.draining.Swap(true) {
		b.stalledMu.Lock()
		b.draining[c] = cs
		b.stalledMu.Unlock()
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
