package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

func parseBatch(b []byte, limit int) (protocol.Batch, int, error) {
	return protocol.ParseBatchLimit(b, limit)
}

// topic is one topic's segments on every volume.
//
// Locks, in the order they are taken: wmu (the committer: whoever holds it
// writes, rotates, truncates or closes files), then idxMu (queued index
// writes), then mu (the state readers see). qmu guards only the queue of appends waiting for a commit and the
// committing flag (see appendReqs).
type topic struct {
	s    *Store
	name string

	wmu     sync.Mutex
	spare   []*appendReq // the commit leader's
	bufs    [][]byte     // commit scratch; wmu must be held
	entries []entry      // commit scratch; wmu must be held
	prep    *prepared    // next segment's files being created; wmu must be held
	// Idempotent producers' recent sequences (producers.go); wmu must be
	// held, but recovery fills it alone.
	producers producerTable
	undo      []undoRec // commit scratch; wmu must be held
	bg        sync.WaitGroup

	// Sealed segments whose index files are not written yet; idxTimer
	// writes them once the topic has not rolled for indexDelay (see
	// queueIndex). idxMu is held while one is written, so truncation and
	// deletion, which take it, never race with the write.
	idxMu     sync.Mutex
	unindexed []*segment
	idxTimer  *time.Timer
	idxDone   bool // closed or deleted: no more index writes

	qmu        sync.Mutex
	queue      []*appendReq
	committing bool             // a leader is committing (appendReqs)
	arrived    chan struct{}    // closed by the next enqueue, when a leader gathers
	lastGroup  int              // appenders in the last commit (the leader's)
	flush      []AppendCallback // the leader's: callbacks to flush after a commit
	lastCommit time.Duration    // how long the last commit took (the leader's)

	mu       sync.RWMutex
	segs     []*segment // ordered by base; never modified in place, only replaced
	start    int64      // oldest readable offset
	next     int64      // offset of the next message
	bad      []offRange // ranges corrupted on every volume
	err      error      // sticky: set after an I/O error or deletion
	waiters  []waiter
	dirty    bool // written since the last fsync (FsyncInterval)
	dirDirty bool // a segment was created since the last fsync (FsyncInterval)

	groups groupTable // consumer groups' committed offsets and leases (groups.go)

	// importing: every batch the topic holds was imported (Store.Import)
	// and its marker file is on the volumes; wmu must be held.
	importing bool

	lastWrite atomic.Int64 // append time of the last commit, Unix ns: the file budget parks the oldest first

	produced, producedBytes atomic.Int64 // appended since open
	consumed, consumedBytes atomic.Int64 // returned by Read since open
}

type offRange struct{ from, to int64 } // [from, to)

type waiter struct {
	id     uint64
	offset int64
	fn     func()
}

type appendReq struct {
	batch []byte
	count int
	// pid and seq: an idempotent producer's batch (protocol.FlagProducer).
	pid, seq uint64
	// cond: append only if the topic's next offset is expect.
	cond   bool
	expect int64
	// imp: an imported batch (Store.Import), stamped with its original
	// append time at rather than the commit's; never queued, committed
	// by Import under wmu.
	imp     bool
	at      int64
	base    int64
	err     error
	decided bool // answered without being written: a duplicate (its first base), or refused (err)
	// head marks the first request of a group queued by one appendReqs
	// call; its ready channel tells the appender, false: the group is
	// committed; true: lead the next commit.
	head  bool
	ready chan bool
	// cb, when set, makes the request asynchronous (AppendAsync): the
	// leader tells cb once the request is committed, and nobody waits on
	// ready. An asynchronous request always heads a group of its own.
	cb  AppendCallback
	arg any
}

var reqPool = sync.Pool{New: func() any { return &appendReq{ready: make(chan bool, 1)} }}

func newTopic(s *Store, name string) *topic {
	return &topic{s: s, name: name}
}

func (t *topic) dirs() []string {
	d := make([]string, len(t.s.opts.Volumes))
	for v := range d {
		d[v] = t.s.topicDir(v, t.name)
	}
	return d
}

func (t *topic) info() (TopicInfo, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.err != nil && errors.Is(t.err, ErrTopicNotFound) {
		return TopicInfo{}, t.err
	}
	info := TopicInfo{Oldest: t.start, Next: t.next, Segments: len(t.segs)}
	for _, sg := range t.segs {
		info.Bytes += sg.size
	}
	info.DiskBytes = info.Bytes
	if len(t.segs) > 0 {
		// A truncation within the first segment hides the batches before
		// the one holding the oldest offset: they are on disk, not readable.
		es := t.segs[0].entries
		if i := sort.Search(len(es), func(i int) bool { return es[i].off > t.start }); i > 0 {
			info.Bytes -= int64(es[i-1].pos)
		}
	}
	return info, nil
}

// append queues one validated batch and commits it, with whatever else is
// queued, unless another committer already did.
func (t *topic) append(batch []byte, bi batchInfo, expect int64) (int64, error) {
	req := reqPool.Get().(*appendReq)
	req.batch, req.count, req.pid, req.seq = batch, bi.count, bi.pid, bi.seq
	req.cond, req.expect = expect >= 0, expect
	t.appendReqs([]*appendReq{req})
	base, err := req.base, req.err
	*req = appendReq{ready: req.ready}
	reqPool.Put(req)
	return base, err
}

// AppendCallback is told the outcomes of asynchronous appends
// (Store.AppendAsync). After each commit, storage calls Appended for each
// of the callback's appends that the commit held, in the order they were
// queued, then Flush once: a caller that answers clients can send all the
// answers of a commit together. Both run on a storage goroutine and must be
// quick; neither may call Append or AppendMany.
type AppendCallback interface {
	// Appended reports the outcome of the append queued with arg: what
	// Append would have returned.
	Appended(arg any, base int64, err error)
	// Flush follows the Appended calls of one commit.
	Flush()
}

// AppendAsync is Append without the wait, for a caller that has more to
// send before the answer comes back (a connection pipelining produces): it
// validates batch and queues it for the topic's next commit, and returns.
// Batches queued by one goroutine get offsets in the order queued, and
// share commits (one write and fsync per volume) with each other and with
// every other append to the topic.
//
// An error returned (a bad batch, a missing topic) means batch was not
// queued and cb hears nothing of it. Otherwise cb.Appended(arg, ...) is
// called once, after every volume has the batch (and has fsynced it, with
// FsyncAlways). batch must not be used by the caller until then.
func (s *Store) AppendAsync(name string, batch []byte, cb AppendCallback, arg any) error {
	return s.AppendAsyncExpect(name, batch, -1, cb, arg)
}

// AppendAsyncExpect is AppendAsync appending batch only if the topic's
// next offset is expect when its commit comes (expect >= 0; < 0: always):
// else cb hears ErrOffsetMismatch and nothing is written. A batch its
// idempotent producer sent before is answered with its first offset
// whatever expect says.
func (s *Store) AppendAsyncExpect(name string, batch []byte, expect int64, cb AppendCallback, arg any) error {
	bi, err := s.validate(name, batch)
	if err != nil {
		return err
	}
	t, err := s.lookup(name)
	if err != nil {
		return err
	}
	t.appendAsync(&appendReq{batch: batch, count: bi.count, pid: bi.pid, seq: bi.seq, cond: expect >= 0, expect: expect, cb: cb, arg: arg})
	return nil
}

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
func (t *topic) appendReqs(reqs []*appendReq) {
	if len(reqs) == 0 {
		return
	}
	head := reqs[0]
	if head.ready == nil {
		head.ready = make(chan bool, 1)
	}
	head.head = true
	if !t.enqueue(reqs) && !<-head.ready {
		return // committed by another leader
	}
	t.lead(head)
}

// appendAsync queues req, which has cb set, and returns at once; a
// leader commits it and tells cb. With no commit in progress, a new
// goroutine leads.
func (t *topic) appendAsync(req *appendReq) {
	req.head = true
	if t.enqueue([]*appendReq{req}) {
		go t.lead(nil)
	}
}

// enqueue adds reqs to the queue and reports whether the caller must lead,
// no commit being in progress.
func (t *topic) enqueue(reqs []*appendReq) (lead bool) {
	t.qmu.Lock()
	defer t.qmu.Unlock()
	t.queue = append(t.queue, reqs...)
	if t.arrived != nil {
		close(t.arrived)
		t.arrived = nil
	}
	lead = !t.committing
	t.committing = true
	return lead
}

// lead commits what is queued, acknowledges every request it held (self,
// the leader's own, needs no telling), and hands the lead on: to the
// appender heading the queue, or to a new goroutine when the queue's head
// is asynchronous, so that the leader's own appender returns now rather
// than after another commit. A goroutine started for asynchronous requests
// goes on leading while the queue's head is asynchronous.
func (t *topic) lead(self *appendReq) {
	for {
		queued := t.gather()
		start := time.Now()
		t.wmu.Lock()
		t.commit(queued)
		t.wmu.Unlock()
		t.lastCommit = time.Since(start)
		t.lastGroup = 0
		flush := t.flush[:0]
		for _, r := range queued {
			if !r.head {
				continue
			}
			t.lastGroup++
			switch {
			case r.cb != nil:
				r.cb.Appended(r.arg, r.base, r.err)
				if !slices.Contains(flush, r.cb) {
					flush = append(flush, r.cb)
				}
			case r != self:
				r.ready <- false
			}
		}
		for _, cb := range flush {
			cb.Flush()
		}
		clear(flush)
		t.flush = flush[:0]
		clear(queued)
		t.spare = queued[:0]

		t.qmu.Lock()
		var next *appendReq
		if len(t.queue) > 0 {
			next = t.queue[0] // groups are queued whole, so this heads one
		} else {
			t.committing = false
		}
		t.qmu.Unlock()
		switch {
		case next == nil:
			return
		case next.cb == nil:
			next.ready <- true
			return
		case self != nil:
			go t.lead(nil)
			return
		}
	}
}

// gather takes the queue for the next commit. With FsyncAlways, while
// fewer appenders are queued than the last commit held (each asynchronous
// request counts as one), it waits for them,
// up to half the last commit's duration: the appenders just acknowledged
// are on their way back, and an fsync shared by all of them costs what one
// shared by half of them does. Without it, two halves alternate, each
// waiting out the other's fsync. Only the leader calls it.
func (t *topic) gather() []*appendReq {
	t.qmu.Lock()
	if t.s.opts.Fsync == FsyncAlways && t.lastGroup > 1 && heads(t.queue) < t.lastGroup {
		timer := time.NewTimer(t.lastCommit / 2)
		defer timer.Stop()
		for waiting := true; waiting && heads(t.queue) < t.lastGroup; {
			arrived := make(chan struct{})
			t.arrived = arrived
			t.qmu.Unlock()
			select {
			case <-arrived:
			case <-timer.C:
				waiting = false
			}
			t.qmu.Lock()
		}
		t.arrived = nil
	}
	queued := t.queue
	t.queue = t.spare[:0]
	t.qmu.Unlock()
	return queued
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

// commit writes reqs to every volume, then publishes them. wmu must be held.
func (t *topic) commit(reqs []*appendReq) {
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
			return
		}
	}
	bufs := t.bufs[:0]
	defer func() { clear(bufs); t.bufs = bufs[:0] }()
	for i := 0; i < len(reqs); {
		if err != nil {
			finish(reqs[i:], err)
			return
		}
		seg, err2 := t.activeSegment()
		if err2 != nil {
			if transientOpenErr(err2) {
				// Nothing was written: the topic stays writable and the
				// next append tries again.
				finish(reqs[i:], t.resourceErr(err2))
				return
			}
			err = t.fail(err2)
			continue
		}
		// Take the requests that fit in this segment; at least one. A
		// batch its producer sent before is answered with the offset it
		// got then, and not written again.
		bufs = bufs[:0]
		next := seg.next
		size := seg.size
		msgs := seg.messages
		last := now // append time of the newest batch written
		seg0next, seg0size := next, size
		entries := t.entries[:0]
		undo := t.undo[:0]
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
			entries = append(entries, entry{off: next, pos: uint32(size), size: uint32(len(r.batch)), count: uint32(r.count)})
			bufs = append(bufs, r.batch)
			next += int64(r.count)
			size += int64(len(r.batch))
			msgs += int64(r.count)
		}
		if len(bufs) > 0 {
			if werr := t.write(seg, bufs, seg.size); werr != nil {
				for k := len(undo) - 1; k >= 0; k-- {
					t.producers.undo(undo[k])
				}
				clear(undo)
				t.undo = undo[:0]
				if noSpaceErr(werr) && t.rollback(seg) {
					finish(reqs[i:], t.resourceErr(werr))
					return
				}
				err = t.fail(werr)
				continue
			}
			t.publish(seg, entries, size, next, msgs, last)
		}
		clear(undo)
		t.undo = undo[:0]
		t.produced.Add(next - seg0next)
		t.producedBytes.Add(size - seg0size)
		t.entries = entries[:0]
		finish(reqs[i:j], nil)
		i = j
	}
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

// write writes bufs at pos of seg's log on every volume in order, then
// fsyncs every volume at once if the policy says so. wmu must be held.
func (t *topic) write(seg *segment, bufs [][]byte, pos int64) error {
	for v, f := range seg.logs {
		if _, err := f.Writev(bufs, pos); err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // its path is the name the file was created under (next.tmp), not the segment's
			}
			return fmt.Errorf("storage: topic %q: write segment %s on volume %s: %w", t.name, segmentName(seg.base, logSuffix), t.s.opts.Volumes[v], err)
		}
	}
	if t.s.opts.Fsync == FsyncAlways {
		return t.syncFiles(seg.logs)
	}
	t.mu.Lock()
	t.dirty = true
	t.mu.Unlock()
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

// rollback cuts every volume's copy of seg back to its committed size
// after a write that failed for space, so that the topic stays writable
// with exactly what was acknowledged (fsynced again under FsyncAlways). It
// reports whether that worked; if not, the caller fails the topic.
func (t *topic) rollback(seg *segment) bool {
	for v, f := range seg.logs {
		if err := f.Truncate(seg.size); err != nil {
			t.s.opts.Logger.Error("cannot cut a segment back after a failed write", "topic", t.name, "volume", t.s.opts.Volumes[v], "err", err)
			return false
		}
	}
	if t.s.opts.Fsync == FsyncAlways {
		if err := t.syncFiles(seg.logs); err != nil {
			t.s.opts.Logger.Error("cannot fsync a segment cut back after a failed write", "topic", t.name, "err", err)
			return false
		}
	}
	return true
}

// fail makes err sticky: the topic turns read-only. It returns the error
// appends get from now on.
func (t *topic) fail(err error) error {
	if noSpaceErr(err) {
		t.s.measureSpace() // other topics' appends stop at the floor now, not at their own ENOSPC
	}
	t.mu.Lock()
	if t.err == nil {
		t.err = fmt.Errorf("%w: %w", ErrReadOnly, err)
		t.s.opts.Logger.Error("topic is read-only after an I/O error", "topic", t.name, "err", err)
	}
	err = t.err
	t.mu.Unlock()
	return err
}

// takeWaitersLocked removes and returns the waiters that next satisfies.
// mu must be held.
func (t *topic) takeWaitersLocked(next int64) []waiter {
	var ready []waiter
	kept := t.waiters[:0]
	for _, w := range t.waiters {
		if next > w.offset || t.err != nil && errors.Is(t.err, ErrTopicNotFound) {
			ready = append(ready, w)
		} else {
			kept = append(kept, w)
		}
	}
	clear(t.waiters[len(kept):])
	t.waiters = kept
	return ready
}

// markDeleted fails appends and wakes every waiter. wmu must be held.
func (t *topic) markDeleted() {
	t.mu.Lock()
	t.err = fmt.Errorf("%w: %q", ErrTopicNotFound, t.name)
	ready := t.takeWaitersLocked(t.next)
	var segs []*segment
	segs = append(segs, t.segs...)
	t.mu.Unlock()
	for _, sg := range segs {
		_ = sg.closeLogs(t, sg.logs) // the topic is gone: nothing to report to
		sg.logs = nil
	}
	t.bg.Wait()
	t.dropPrepared()
	t.stopIndexes(false)
	for _, w := range ready {
		w.fn()
	}
}

// sync fsyncs the active segment if it was written since the last sync.
// It holds wmu only to find the files, so appends go on during the fsync;
// seg.filesMu keeps the files open meanwhile.
func (t *topic) sync() error {
	t.wmu.Lock()
	t.mu.Lock()
	dirty, dirDirty := t.dirty, t.dirDirty
	t.dirty, t.dirDirty = false, false
	var seg *segment
	if n := len(t.segs); n > 0 {
		seg = t.segs[n-1]
	}
	t.mu.Unlock()
	var logs []File
	var closings uint64
	if seg != nil {
		logs = seg.logs
		closings = seg.closings.Load()
	}
	t.wmu.Unlock()
	if dirDirty {
		for v := range t.s.opts.Volumes {
			if err := t.s.fs.SyncDir(t.s.topicDir(v, t.name)); err != nil {
				return t.fail(fmt.Errorf("storage: topic %q: fsync directory: %w", t.name, err))
			}
		}
	}
	if !dirty || logs == nil {
		return nil
	}
	seg.filesMu.RLock()
	defer seg.filesMu.RUnlock()
	if seg.closings.Load() != closings {
		return nil // sealed or parked meanwhile: both fsync under FsyncInterval
	}
	if err := t.syncFiles(logs); err != nil {
		return t.fail(err)
	}
	return nil
}

// close writes the active segment's index, fsyncs and closes its files.
func (t *topic) close() error {
	t.closeGroups(ErrClosed)
	t.wmu.Lock()
	defer t.wmu.Unlock()
	t.mu.Lock()
	var seg *segment
	if n := len(t.segs); n > 0 {
		seg = t.segs[n-1]
	}
	deleted := t.err != nil && errors.Is(t.err, ErrTopicNotFound)
	if t.err == nil {
		t.err = ErrClosed
	}
	ready := t.takeWaitersLocked(t.next)
	ready = append(ready, t.waiters...)
	t.waiters = nil
	t.mu.Unlock()
	for _, w := range ready {
		w.fn()
	}
	t.bg.Wait()
	t.dropPrepared()
	// Index files are derived data that open rebuilds from the logs: one
	// that cannot be written (a full disk) is logged, and fails no close.
	_ = t.stopIndexes(!deleted)
	if seg == nil || seg.sealed || deleted {
		return nil
	}
	var errs []error
	if seg.logs != nil { // else parked, and fsynced then (FsyncNever: syncfs at Close)
		errs = append(errs, t.syncFiles(seg.logs))
	}
	if err := t.writeIndex(seg); err != nil {
		t.s.opts.Logger.Warn("segment index not written at close; open rebuilds it", "topic", t.name, "segment", seg.base, "err", err)
	}
	errs = append(errs, seg.closeLogs(t, seg.logs))
	seg.logs = nil
	return errors.Join(errs...)
}

// Watch calls fn once the topic's next offset is past offset, that is when
// offset becomes readable, or when the topic is deleted or the store closes.
// If that is already so, fn runs before Watch returns. Otherwise fn runs on
// the goroutine that appended, after the append is visible to readers, and
// must not block. The returned cancel removes fn if it has not run yet and
// reports whether it did so.
func (s *Store) Watch(name string, offset int64, fn func()) (cancel func() bool, err error) {
	t, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	// A read-only topic still waits: it will not grow, so the caller's
	// own deadline ends the wait (firing here would make it spin).
	if t.next > offset || t.err != nil && (errors.Is(t.err, ErrTopicNotFound) || errors.Is(t.err, ErrClosed)) {
		t.mu.Unlock()
		fn()
		return func() bool { return false }, nil
	}
	id := t.s.stats.watchIDs.Add(1)
	t.waiters = append(t.waiters, waiter{id: id, offset: offset, fn: fn})
	t.mu.Unlock()
	return func() bool {
		t.mu.Lock()
		defer t.mu.Unlock()
		for i, w := range t.waiters {
			if w.id == id {
				t.waiters = append(t.waiters[:i], t.waiters[i+1:]...)
				return true
			}
		}
		return false
	}, nil
}
