package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// Group commit: appenders queue their batches (enqueue) and one of them at
// a time, the leader, writes everything queued to every volume (commit,
// under wmu). With FsyncAlways the commit is pipelined: the leader passes
// the lead on as soon as its group is written, then fsyncs it (settle)
// while the next leader writes the next group. Groups become readable and
// are acknowledged in the order written, each once an fsync that began
// after its write has ended: one fsync covers every group written before
// it began, and fsyncs run one at a time. Appenders are gathered so that
// an fsync serves about as many as the one before: the leader waits for
// them before writing (gather), and the fsync of a group written behind
// another waits too (awaitWrites). A flight is one
// group between its write and its acknowledgement: three stages (write,
// fsync and publish, acknowledge), each in the order written, so a
// group's fsync runs while the group before is being acknowledged and the
// group after is being written.
//
// While groups are in flight, the writer's cursor (wseg, wsize, wnext,
// wmsgs) runs ahead of what readers see (seg.size, seg.next, t.next). All
// that is in flight and not yet fsynced is in the active segment: a roll
// first waits for the flights, then fsyncs and publishes the rolling
// group's own part in the full segment (beforeSeal). Everything else that takes wmu (truncate,
// import, delete, close) first waits for the flights (quiesce); the file
// budget does not park a topic with flights.

// committer is a topic's group commit: the queue of appends waiting for a
// commit and the flights between their write and their acknowledgement.
// Its queue is guarded by qmu, its writer by the topic's wmu; qmu is taken
// last (under wmu, never with the topic's mu or index.mu), and released
// while a leader or an fsync waits for appenders. The counters at the end
// are atomic and need no lock.
type committer struct {
	t *topic

	qmu        sync.Mutex
	queue      []*appendReq  // qmu must be held
	committing bool          // a leader is committing (appendReqs); qmu must be held
	arrived    chan struct{} // closed by the next enqueue, when a leader gathers; qmu must be held
	spare      []*appendReq  // a settled flight's queue, for the next; qmu must be held
	// The pipelined commit's fsync stage; qmu must be held: appenders
	// written, and as many when the last fsync began; how many it covered
	// and how long it took (ns); wrote is closed by the next write when an
	// fsync waits for one.
	writtenHeads, syncedHeads, lastSyncHeads, lastSyncTime int64
	wrote                                                  chan struct{}

	// The writer; wmu must be held. bufs and undo are commit scratch.
	// tailSynced and tailDone are the last flight written's synced and
	// done (closed once it is published, and told); building is the
	// flight being written; the writer's cursor (wsize, wnext, wmsgs) is
	// wseg's end, flights included, when wseg is set.
	bufs                 [][]byte
	undo                 []undoRec
	tailSynced, tailDone chan struct{}
	building             *flight
	wseg                 *segment
	wsize, wnext, wmsgs  int64

	// wgen counts commits written, synced those an fsync covered;
	// inFlight counts flights not yet fsynced and published; syncErr is the first
	// failed fsync's error, which every flight settled after it gets;
	// lastCommit is how long the last commit took, write to
	// acknowledgement, ns.
	wgen, synced atomic.Uint64
	inFlight     atomic.Int64
	syncErr      atomic.Pointer[error]
	lastCommit   atomic.Int64
}

// flight is one commit's group of requests, from its write to its
// acknowledgement.
type flight struct {
	reqs  []*appendReq
	parts []part  // what was written, one part per segment
	ents  []entry // the parts' index entries
	flush []AppendCallback
	// synced is closed once this flight is fsynced and published, done
	// once its appenders are told too; prevSynced and prevDone are the
	// flight's written before (pipelined commits only; nil otherwise). The
	// next flight's fsync waits for synced only, so it runs while this
	// flight's appenders are being told. Flights refer to each other by
	// these channels only: a settled flight goes back to flightPool.
	prevSynced, synced, prevDone, done chan struct{}

	// behind: written while a flight before was not yet fsynced; its
	// fsync waits for appenders (awaitWrites).
	behind bool
	gen    uint64 // c.wgen after this flight's writes
	err    error  // set when an fsync failed, this flight's or one before: every request fails
	start  time.Time
}

// part is what a flight wrote to one segment.
type part struct {
	seg                    *segment
	logs                   []File
	e0, e1                 int // fl.ents[e0:e1]
	from, to               int // fl.reqs[from:to]
	size, next, msgs, last int64
	size0, next0           int64 // the segment's cursor before the write
	// written: the write succeeded; synced: fsynced (by beforeSeal);
	// published: made visible to readers (by beforeSeal, before the
	// segment is sealed, so that its readers' view is its end again).
	written, synced, published bool
}

var flightPool = sync.Pool{New: func() any { return new(flight) }}

// appendReqs queues reqs together, in order, and returns once they are
// committed. Being queued under one lock, they are committed by one commit.
//
// Commits are led by one goroutine at a time (the "leader", flat
// combining): the first appender to find no commit in progress commits
// everything queued, tells every other appender whose requests that commit
// held that they are done, and hands the lead to the first appender queued
// meanwhile, which commits the next group. An appender that is not leading
// waits on its own channel only, so it is acknowledged as soon as its
// commit ends, never behind the write and fsync of a later group.
func (c *committer) appendReqs(reqs []*appendReq) {
	if len(reqs) == 0 {
		return
	}
	head := reqs[0]
	if head.ready == nil {
		head.ready = make(chan bool, 1)
	}
	head.head = true
	if !c.enqueue(reqs) && !<-head.ready {
		return // committed by another leader
	}
	c.lead(head)
}

// appendAsync queues req, which has cb set, and returns at once; a
// leader commits it and tells cb. With no commit in progress, a new
// goroutine leads.
func (c *committer) appendAsync(req *appendReq) {
	req.head = true
	if c.enqueue([]*appendReq{req}) {
		go c.lead(nil)
	}
}

// enqueue adds reqs to the queue and reports whether the caller must lead,
// no commit being in progress.
func (c *committer) enqueue(reqs []*appendReq) (lead bool) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	c.queue = append(c.queue, reqs...)
	if c.arrived != nil {
		close(c.arrived)
		c.arrived = nil
	}
	lead = !c.committing
	c.committing = true
	return lead
}

// lead commits what is queued, acknowledges every request it held (self,
// the leader's own, needs no telling), and hands the lead on: to the
// appender heading the queue, or to a new goroutine when the queue's head
// is asynchronous, so that the leader's own appender returns now rather
// than after another commit. A goroutine started for asynchronous requests
// goes on leading while the queue's head is asynchronous. With
// FsyncAlways the lead is handed on before the fsync, and the goroutine
// returns once its own group is settled.
func (c *committer) lead(self *appendReq) {
	t := c.t
	pipelined := t.s.opts.Fsync == FsyncAlways
	for {
		queued := c.gather(pipelined)
		t.wmu.Lock()
		fl := c.commit(queued, pipelined)
		if !pipelined {
			c.settle(fl)
		}
		t.wmu.Unlock()
		if pipelined {
			c.handOff(self, true)
			c.settle(fl)
			c.acknowledge(fl, self)
			c.release(fl)
			return
		}
		c.acknowledge(fl, self)
		c.release(fl)
		if !c.handOff(self, false) {
			return
		}
	}
}

// handOff passes the lead to whoever heads the queue, or ends it when the
// queue is empty. It reports whether the caller, an asynchronous leader,
// must go on leading itself (never when always is set: then a new
// goroutine leads).
func (c *committer) handOff(self *appendReq, always bool) (goOn bool) {
	c.qmu.Lock()
	var next *appendReq
	if len(c.queue) > 0 {
		next = c.queue[0] // groups are queued whole, so this heads one
	} else {
		c.committing = false
	}
	c.qmu.Unlock()
	switch {
	case next == nil:
		return false
	case next.cb == nil:
		next.ready <- true
		return false
	case self != nil || always:
		go c.lead(nil)
		return false
	}
	return true
}

// gather takes the queue for the next commit. With FsyncAlways, while the
// appenders queued and those written since the last fsync began are fewer
// than that fsync covered (each asynchronous request counts as one), it
// waits for more, up to half the last commit's duration (gatherWait): the
// appenders just acknowledged are on their way back, and one write and one
// fsync for all of them cost what they cost for one. Behind a group being
// fsynced it so writes the next fsync's group in one commit, not one
// commit per appender as they come back. Only the leader calls it.
func (c *committer) gather(pipelined bool) []*appendReq {
	c.qmu.Lock()
	if last := c.lastSyncHeads; pipelined && last > 1 {
		c.waitLocked(&c.arrived, gatherWait(c.lastCommit.Load()), func() bool {
			return int64(heads(c.queue))+c.writtenHeads-c.syncedHeads < last
		})
	}
	queued := c.queue
	c.queue = c.spare[:0]
	c.spare = nil
	c.qmu.Unlock()
	return queued
}

// waitLocked waits while short reports true, for at most d: each time,
// until the next event closes the channel it leaves in *signal. qmu must
// be held; it is released while waiting.
func (c *committer) waitLocked(signal *chan struct{}, d time.Duration, short func() bool) {
	if !short() {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	for waiting := true; waiting && short(); {
		ch := make(chan struct{})
		*signal = ch
		c.qmu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			waiting = false
		}
		c.qmu.Lock()
	}
	*signal = nil
}

// maxGatherWait bounds the waits for appenders before a commit or an
// fsync (half the last one's duration): an fsync that stalled for seconds
// covered everything queued meanwhile, and as many appenders will not come
// back soon.
const maxGatherWait = 20 * time.Millisecond

// gatherWait is how long to wait for appenders after a commit or an fsync
// that took last ns: half of it, at most maxGatherWait.
func gatherWait(last int64) time.Duration {
	return min(time.Duration(last)/2, maxGatherWait)
}

// flying reports whether a group is written and not yet settled.
func (c *committer) flying() bool {
	return c.inFlight.Load() > 0
}

func heads(reqs []*appendReq) int {
	n := 0
	for _, r := range reqs {
		if r.head {
			n++
		}
	}
	return n
}

// commit writes reqs to every volume, one part per segment they go to,
// and returns their flight, which settle publishes. A request that cannot
// be written gets its error. wmu must be held.
func (c *committer) commit(reqs []*appendReq, pipelined bool) *flight {
	fl := c.newFlight(reqs, pipelined)
	if pipelined {
		defer func() { c.tailSynced, c.tailDone = fl.synced, fl.done }()
	}
	t := c.t
	t.mu.RLock()
	err := t.err
	t.mu.RUnlock()
	now := t.s.opts.Now().UnixNano()
	t.lastWrite.Store(now)
	if err == nil && t.importing && len(reqs) > 0 && !reqs[0].imp {
		// The first ordinary append ends the import: no import is taken
		// after it.
		if err2 := t.endImport(); err2 != nil {
			finish(reqs, err2)
			return fl
		}
	}
	c.building = fl
	defer func() { c.building = nil }()
	defer func() { clear(c.bufs); c.bufs = c.bufs[:0] }()
	for i := 0; i < len(reqs); {
		if err == nil && fl.err != nil {
			err = fl.err // from beforeSeal
		}
		if err != nil {
			finish(reqs[i:], err)
			break
		}
		seg, err2 := t.activeSegment()
		if err2 != nil {
			if fl.err == nil && transientOpenErr(err2) {
				// Nothing was written: the topic stays writable and the
				// next append tries again.
				finish(reqs[i:], t.resourceErr(err2))
				break
			}
			err = t.fail(err2)
			continue
		}
		i, err = c.writePart(fl, seg, i, now)
	}
	fl.gen = c.wgen.Add(1)
	if pipelined {
		c.noteWritten(reqs)
	}
	return fl
}

// newFlight takes a flight for reqs from the pool; a pipelined one is
// chained behind the flight written last and counted in flight until it
// is settled. wmu must be held.
func (c *committer) newFlight(reqs []*appendReq, pipelined bool) *flight {
	fl := flightPool.Get().(*flight)
	fl.reqs, fl.start = reqs, time.Now()
	if pipelined {
		fl.behind = c.flying()
		fl.prevSynced, fl.synced = c.tailSynced, make(chan struct{})
		fl.prevDone, fl.done = c.tailDone, make(chan struct{})
		c.inFlight.Add(1)
	}
	return fl
}

// writePart writes the requests from fl.reqs[i] on that fit in seg, at
// least one, as one part of fl, and returns where the next part begins.
// Each is answered without being written (decide), or stamped with its
// offset and append time now (an imported batch keeps its own), indexed
// in fl.ents, its producer's sequence recorded (and a new binding of a
// producer to its owner written to the producers file first). A request
// whose messages would pass MaxOffset fails with ErrOffsetLimit. A write
// that fails is
// undone: after one that failed for space and was cut back (rollback),
// the rest of the requests fail with ErrNoSpace and it returns
// len(fl.reqs); after any other, it returns i and the error that turned
// the topic read-only. wmu must be held.
func (c *committer) writePart(fl *flight, seg *segment, i int, now int64) (int, error) {
	t, opts, reqs := c.t, &c.t.s.opts, fl.reqs
	bufs, undo := c.bufs[:0], c.undo[:0]
	size, next, msgs := c.cursor(seg)
	p := part{seg: seg, logs: seg.logs, e0: len(fl.ents), from: i, size0: size, next0: next}
	last := now // append time of the newest batch written
	j := i
	for ; j < len(reqs); j++ {
		r := reqs[j]
		if j > i && (msgs >= int64(opts.Entries) || size+int64(len(r.batch)) > opts.SegmentBytes) {
			break
		}
		if (r.pid != 0 || r.cond) && c.decide(r, next, now) {
			continue
		}
		if next > MaxOffset-int64(r.count) {
			r.decided, r.err = true, fmt.Errorf("%w: topic %q: %d messages at offset %d would pass the largest offset, %d", ErrOffsetLimit, t.name, r.count, next, int64(MaxOffset))
			continue
		}
		if r.pid != 0 {
			undo = append(undo, t.producers.record(r.pid, r.seq, next, r.count, r.owner, now, opts.ProducerIdle, opts.MaxProducers))
		}
		last = now
		if r.imp {
			last = r.at
		}
		protocol.StampBatch(r.batch, next, last)
		r.base = next
		fl.ents = append(fl.ents, entry{off: next, pos: uint32(size), size: uint32(len(r.batch)), count: uint32(r.count)})
		bufs = append(bufs, r.batch)
		next += int64(r.count)
		size += int64(len(r.batch))
		msgs += int64(r.count)
	}
	c.bufs, c.undo = bufs, undo
	if len(bufs) > 0 {
		werr := t.writeBindings(undo)
		if werr == nil {
			werr = c.write(seg, bufs, p.size0)
		}
		if werr != nil {
			c.undoProducers()
			fl.ents = fl.ents[:p.e0]
			if noSpaceErr(werr) && c.rollback(seg, p.size0) {
				finish(reqs[i:], t.resourceErr(werr))
				return len(reqs), nil
			}
			return i, t.fail(werr)
		}
		p.written = true
		c.wseg, c.wsize, c.wnext, c.wmsgs = seg, size, next, msgs
	}
	clear(c.undo)
	c.undo = c.undo[:0]
	p.e1, p.to = len(fl.ents), j
	p.size, p.next, p.msgs, p.last = size, next, msgs, last
	fl.parts = append(fl.parts, p)
	return j, nil
}

// decide reports whether r is answered without being written, next being
// the offset it would get: a batch its producer sent before gets the
// offset it got then; one under another owner's producer, a forgotten
// producer's retry or an out of order sequence fails (producerTable.lookup);
// one whose expected offset is not next fails with ErrOffsetMismatch. wmu
// must be held.
func (c *committer) decide(r *appendReq, next, now int64) bool {
	t, opts := c.t, &c.t.s.opts
	if r.pid != 0 && !r.imp {
		base, dup, derr := t.producers.lookup(r.pid, r.seq, r.count, r.owner, r.strict, now, opts.ProducerIdle)
		if dup || derr != nil {
			r.base, r.decided, r.err = base, true, derr
			return true
		}
	}
	if r.cond && r.expect != next {
		r.decided, r.err = true, fmt.Errorf("%w: topic %q: its next offset is %d, not %d", ErrOffsetMismatch, t.name, next, r.expect)
		return true
	}
	return false
}

// undoProducers takes back, newest first, the producers' sequences a
// part that was not written recorded. wmu must be held.
func (c *committer) undoProducers() {
	for k := len(c.undo) - 1; k >= 0; k-- {
		c.t.producers.undo(c.undo[k])
	}
	clear(c.undo)
	c.undo = c.undo[:0]
}

// noteWritten counts reqs' appenders as written, for the fsync about to
// wait for them (awaitWrites), and wakes it.
func (c *committer) noteWritten(reqs []*appendReq) {
	c.qmu.Lock()
	c.writtenHeads += int64(heads(reqs))
	if c.wrote != nil {
		close(c.wrote)
		c.wrote = nil
	}
	c.qmu.Unlock()
}

// cursor returns where the next write to seg goes: its size, next offset
// and message count, counting the groups in flight. wmu must be held.
func (c *committer) cursor(seg *segment) (size, next, msgs int64) {
	if c.wseg == seg {
		return c.wsize, c.wnext, c.wmsgs
	}
	c.t.mu.RLock()
	defer c.t.mu.RUnlock()
	return seg.size, seg.next, seg.messages
}

// write writes bufs at pos of seg's log on every volume in order
// (settle fsyncs them under FsyncAlways). wmu must be held.
func (c *committer) write(seg *segment, bufs [][]byte, pos int64) error {
	t := c.t
	for v, f := range seg.logs {
		if _, err := f.Writev(bufs, pos); err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // its path is the name the file was created under (next.tmp), not the segment's
			}
			return fmt.Errorf("storage: topic %q: write segment %s on volume %s: %w", t.name, segmentName(seg.base, logSuffix), t.s.opts.Volumes[v], err)
		}
	}
	if t.s.opts.Fsync != FsyncAlways {
		t.mu.Lock()
		t.dirty = true
		t.mu.Unlock()
	}
	return nil
}

// rollback cuts every volume's copy of seg back to size, where the failed
// write began, after a write that failed for space, so that the topic
// stays writable with exactly what was written before (fsynced again under
// FsyncAlways). It reports whether that worked; if not, the caller fails
// the topic. wmu must be held.
func (c *committer) rollback(seg *segment, size int64) bool {
	t := c.t
	for v, f := range seg.logs {
		if err := f.Truncate(size); err != nil {
			t.s.opts.Logger.Error("cannot cut a segment back after a failed write", "topic", t.name, "volume", t.s.opts.Volumes[v], "err", err)
			return false
		}
	}
	if t.s.opts.Fsync == FsyncAlways {
		if err := t.syncFiles(seg.logs); err != nil {
			t.s.opts.Logger.Error("cannot fsync a segment cut back after a failed write", "topic", t.name, "err", err)
			// The groups in flight in these files must not be
			// acknowledged: their own fsync may not see this error.
			c.stopSyncs(t.fail(err))
			return false
		}
	}
	return true
}
