package storage

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// The later stages of a commit (commit.go): a written flight is made
// durable and visible (settle), then its appenders are told (acknowledge),
// each stage in the order the flights were written.

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
	if p.from < len(fl.reqs) && fl.reqs[p.from].replica {
		t.replicated.Add(p.next - p.next0)
		t.replicatedBytes.Add(p.size - p.size0)
	} else {
		t.produced.Add(p.next - p.next0)
		t.producedBytes.Add(p.size - p.size0)
	}
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
		c.syncFlight(fl)
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

// syncFlight fsyncs the parts of fl not yet covered by an fsync that
// began after fl was written (FsyncAlways). A failure is fl's error and
// that of every flight settled after it.
func (c *committer) syncFlight(fl *flight) {
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
