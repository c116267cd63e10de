package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
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
// last (under wmu, never with the topic's mu or idx.mu), and released
// while a leader or an fsync waits for appenders.
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
	lastCommit                                             atomic.Int64 // how long the last commit took, write to acknowledgement, ns

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
	// failed fsync's error, which every flight settled after it gets.
	wgen, synced atomic.Uint64
	inFlight     atomic.Int64
	syncErr      atomic.Pointer[error]
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

// commit writes reqs to every volume and returns their flight, which
// settle publishes. wmu must be held.
func (c *committer) commit(reqs []*appendReq, pipelined bool) *flight {
	t := c.t
	fl := flightPool.Get().(*flight)
	fl.reqs, fl.start = reqs, time.Now()
	if pipelined {
		fl.behind = c.flying()
		fl.prevSynced, fl.synced = c.tailSynced, make(chan struct{})
		fl.prevDone, fl.done = c.tailDone, make(chan struct{})
		c.inFlight.Add(1)
		defer func() { c.tailSynced, c.tailDone = fl.synced, fl.done }()
	}
	opts := &t.s.opts
	t.mu.RLock()
	err := t.err
	t.mu.RUnlock()
	now := opts.Now().UnixNano()
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
	bufs := c.bufs[:0]
	defer func() { clear(bufs); c.bufs = bufs[:0] }()
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
		// Take the requests that fit in this segment; at least one. A
		// batch its producer sent before is answered with the offset it
		// got then, and not written again.
		bufs = bufs[:0]
		size, next, msgs := c.cursor(seg)
		p := part{seg: seg, logs: seg.logs, e0: len(fl.ents), from: i, size0: size, next0: next}
		last := now // append time of the newest batch written
		undo := c.undo[:0]
		j := i
		for ; j < len(reqs); j++ {
			r := reqs[j]
			if j > i && (msgs >= int64(opts.Entries) || size+int64(len(r.batch)) > opts.SegmentBytes) {
				break
			}
			if r.pid != 0 && !r.imp {
				base, dup, derr := t.producers.lookup(r.pid, r.seq, r.count, now, opts.ProducerIdle)
				if dup || derr != nil {
					r.base, r.decided, r.err = base, true, derr
					continue
				}
			}
			if r.cond && r.expect != next {
				r.decided, r.err = true, fmt.Errorf("%w: topic %q: its next offset is %d, not %d", ErrOffsetMismatch, t.name, next, r.expect)
				continue
			}
			if r.pid != 0 {
				undo = append(undo, t.producers.record(r.pid, r.seq, next, r.count, now, opts.ProducerIdle, opts.MaxProducers))
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
		if len(bufs) > 0 {
			if werr := c.write(seg, bufs, p.size0); werr != nil {
				for k := len(undo) - 1; k >= 0; k-- {
					t.producers.undo(undo[k])
				}
				clear(undo)
				c.undo = undo[:0]
				fl.ents = fl.ents[:p.e0]
				if noSpaceErr(werr) && c.rollback(seg, p.size0) {
					finish(reqs[i:], t.resourceErr(werr))
					break
				}
				err = t.fail(werr)
				continue
			}
			p.written = true
			c.wseg, c.wsize, c.wnext, c.wmsgs = seg, size, next, msgs
		}
		clear(undo)
		c.undo = undo[:0]
		p.e1, p.to = len(fl.ents), j
		p.size, p.next, p.msgs, p.last = size, next, msgs, last
		fl.parts = append(fl.parts, p)
		i = j
	}
	fl.gen = c.wgen.Add(1)
	if pipelined {
		c.qmu.Lock()
		c.writtenHeads += int64(heads(reqs))
		if c.wrote != nil {
			close(c.wrote)
			c.wrote = nil
		}
		c.qmu.Unlock()
	}
	return fl
}

// awaitWrites, before an fsync of the pipelined commit of a flight
// written behind another (wait), waits until as many appenders have been
// written since the last fsync began as that fsync covered, up to half
// its duration: the appenders it acknowledged are on their way back, and
// an fsync shared by all of them costs what one shared by half of them
// does. A flight written with none before it in flight was gathered by its
// leader already. Then it records what the fsync about to begin covers.
func (c *committer) awaitWrites(wait bool) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if last := c.lastSyncHeads; wait && last > 1 {
		c.waitLocked(&c.wrote, gatherWait(c.lastSyncTime), func() bool { return c.writtenHeads-c.syncedHeads < last })
	}
	c.lastSyncHeads = c.writtenHeads - c.syncedHeads
	c.syncedHeads = c.writtenHeads
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

// beforeSeal readies the full segment seg to be sealed: it waits for the
// groups in flight, which may use its files, then fsyncs and publishes the
// part of the group being committed that is in it (FsyncAlways): once
// quiesced the writer's cursor is the readers' view, so seg's must be its
// end before anything (a commit after a failed roll, the index) uses it.
// Its appenders are told with the rest of the group. An error fails the
// topic and the group. wmu must be held.
func (c *committer) beforeSeal(seg *segment) error {
	c.quiesce()
	fl := c.building
	if fl == nil || c.t.s.opts.Fsync != FsyncAlways {
		return nil
	}
	for k := range fl.parts {
		p := &fl.parts[k]
		if p.seg != seg || !p.written || p.synced {
			continue
		}
		if err := c.t.syncFiles(p.logs); err != nil {
			fl.err = c.t.fail(err)
			c.stopSyncs(fl.err)
			return fl.err
		}
		p.synced = true
		c.publishPart(fl, p)
	}
	return nil
}

// publishPart makes p, a part of fl written and made durable, visible to
// readers.
func (c *committer) publishPart(fl *flight, p *part) {
	t := c.t
	t.publish(p.seg, fl.ents[p.e0:p.e1], p.size, p.next, p.msgs, p.last)
	t.produced.Add(p.next - p.next0)
	t.producedBytes.Add(p.size - p.size0)
	p.published = true
}

// stopSyncs records err, a failed fsync's, for every flight settled
// after it.
func (c *committer) stopSyncs(err error) {
	c.syncErr.CompareAndSwap(nil, &err)
}

// quiesce waits until every group in flight is settled; after it the
// readers' view (seg.size, t.next) is the writer's. wmu must be held.
func (c *committer) quiesce() {
	if done := c.tailDone; done != nil {
		<-done
		c.tailDone, c.tailSynced = nil, nil
	}
	c.wseg = nil
}

// settle makes fl's groups durable (FsyncAlways: an fsync, unless one
// that began after fl was written has ended) and publishes them, after
// the flight before. Without FsyncAlways wmu must be held.
func (c *committer) settle(fl *flight) {
	if fl.prevSynced != nil {
		<-fl.prevSynced
		fl.prevSynced = nil
	}
	if fl.err == nil {
		if err := c.syncErr.Load(); err != nil {
			fl.err = *err // written behind a group whose fsync failed
		}
	}
	if fl.err == nil && c.t.s.opts.Fsync == FsyncAlways {
		for k := range fl.parts {
			p := &fl.parts[k]
			if !p.written || p.synced || c.synced.Load() >= fl.gen {
				continue
			}
			pipelined := fl.synced != nil
			if pipelined {
				c.awaitWrites(fl.behind)
			}
			start := time.Now()
			upto := c.wgen.Load() // written before the fsync begins: covered by it
			err := c.t.syncFiles(p.logs)
			if pipelined {
				c.qmu.Lock()
				c.lastSyncTime = int64(time.Since(start))
				c.qmu.Unlock()
			}
			if err != nil {
				fl.err = c.t.fail(err)
				c.stopSyncs(fl.err)
				break
			}
			c.synced.Store(upto)
		}
	}
	for k := range fl.parts {
		p := &fl.parts[k]
		switch {
		case p.published:
			// Durable and visible since its segment was sealed: whatever
			// failed after it, its appenders succeeded.
		case fl.err != nil:
			finish(fl.reqs[p.from:p.to], fl.err)
			continue
		case p.written:
			c.publishPart(fl, p)
		}
		finish(fl.reqs[p.from:p.to], nil)
	}
	if fl.synced != nil {
		// Its files are no longer used, and the appenders about to be
		// told, coming back, find no group in flight: their leader
		// gathers them (gather) rather than writing the first alone.
		c.inFlight.Add(-1)
		close(fl.synced)
	}
}

// acknowledge tells fl's appenders their outcome (self, the caller's own,
// needs no telling), after the flight before has told its own, so that
// every appender is told in the order written.
func (c *committer) acknowledge(fl *flight, self *appendReq) {
	if fl.prevDone != nil {
		<-fl.prevDone
		fl.prevDone = nil
	}
	// Set before telling anyone: the appenders told come back to a
	// leader that gathers by it.
	c.lastCommit.Store(int64(time.Since(fl.start)))
	for _, r := range fl.reqs {
		if !r.head {
			continue
		}
		switch {
		case r.cb != nil:
			r.cb.Appended(r.arg, r.base, r.err)
			if !slices.Contains(fl.flush, r.cb) {
				fl.flush = append(fl.flush, r.cb)
			}
		case r != self:
			r.ready <- false
		}
	}
	for _, cb := range fl.flush {
		cb.Flush()
	}
	if fl.done != nil {
		close(fl.done)
	}
}

// release returns a settled flight's memory for reuse.
func (c *committer) release(fl *flight) {
	reqs := fl.reqs
	clear(reqs)
	c.qmu.Lock()
	if c.spare == nil {
		c.spare = reqs[:0]
	}
	c.qmu.Unlock()
	clear(fl.flush)
	clear(fl.parts) // no pooled flight keeps a segment or its files
	*fl = flight{parts: fl.parts[:0], ents: fl.ents[:0], flush: fl.flush[:0]}
	flightPool.Put(fl)
}

// finish sets the outcome of reqs: err, or on success (nil) what the
// commit decided for those it did not write (duplicates, mismatches).
func finish(reqs []*appendReq, err error) {
	for _, r := range reqs {
		if err != nil || !r.decided {
			r.err = err
		}
		r.decided = false
	}
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

// syncFiles fsyncs files concurrently, one per volume.
func (t *topic) syncFiles(files []File) error {
	if len(files) == 1 {
		if err := t.s.fsync(files[0]); err != nil {
			return fmt.Errorf("storage: topic %q: fsync volume %s: %w", t.name, t.s.opts.Volumes[0], err)
		}
		return nil
	}
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for v, f := range files {
		wg.Go(func() {
			if err := t.s.fsync(f); err != nil {
				errs[v] = fmt.Errorf("storage: topic %q: fsync volume %s: %w", t.name, t.s.opts.Volumes[v], err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// publish makes committed batches visible to readers and wakes waiters;
// now is the append time of the newest.
func (t *topic) publish(seg *segment, entries []entry, size, next, msgs, now int64) {
	t.mu.Lock()
	seg.entries = append(seg.entries, entries...)
	seg.size = size
	seg.next = next
	seg.messages = msgs
	seg.lastTime = now
	t.next = next
	ready := t.takeWaitersLocked(next)
	t.mu.Unlock()
	for _, w := range ready {
		w.fn()
	}
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
