package storage

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/haraqa/haraqa/protocol"
)

func parseBatch(b []byte, limit int) (protocol.Batch, int, error) {
	return protocol.ParseBatchLimit(b, limit)
}

// topic is one topic's segments on every volume.
//
// Locks, in the order they are taken: wmu (the writer: whoever holds it
// writes, rotates, truncates or closes files), then index.mu (queued index
// writes, see indexWriter), then groups.mu (the groups file), then mu (the
// state readers see). The committer's qmu guards only its queue of appends
// waiting for a commit and its fsync stage's counts (see committer).
type topic struct {
	s    *Store
	name string
	log  Log // the handle Store.Log returns

	wmu sync.Mutex
	// committer is the group commit (commit.go): its queue under its own
	// qmu, its writer under wmu.
	committer committer
	prep      *prepared // next segment's files being created; wmu must be held
	// Idempotent producers' recent sequences (producers.go); wmu must be
	// held, but recovery fills it alone.
	producers producerTable
	// importing: every batch the topic holds was imported (Log.Import)
	// and its marker file is on the volumes; wmu must be held.
	importing bool
	bg        sync.WaitGroup // background rolls: next files, seals (rotate.go)

	// index writes the index files of sealed segments once the topic has
	// not rolled for indexDelay, and the active segment's at close
	// (index.go).
	index indexWriter

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

	// epochs are the leader epochs, ascending (epochs.go): replaced, never
	// modified in place; written under wmu and mu, read under mu.
	epochs []EpochStart

	lastWrite atomic.Int64 // append time of the last commit, Unix ns: the file budget parks the oldest first

	produced, producedBytes atomic.Int64 // appended since open
	consumed, consumedBytes atomic.Int64 // returned by Read since open
	// replicated: appended by Replicate (a follower's copy of its leader's
	// log), not counted in produced; replicaRead: returned by ReadReplica.
	replicated, replicatedBytes   atomic.Int64
	replicaRead, replicaReadBytes atomic.Int64
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
	// pid and seq: an idempotent producer's batch (protocol.FlagProducer);
	// owner: who sends it (a token's hash; "": trusted with any producer).
	pid, seq uint64
	owner    string
	// strict: the producer's batch is stored only as its next sequence
	// (AppendOptions.StrictSequence).
	strict bool
	// cond: append only if the topic's next offset is expect.
	cond   bool
	expect int64
	// imp: an imported batch (Log.Import), stamped with its original
	// append time at rather than the commit's; never queued, committed
	// by Import under wmu.
	imp     bool
	replica bool // an imported batch copied from a leader (Replicate)
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
	t := &topic{s: s, name: name}
	t.log.t = t
	t.committer.t = t
	t.index.t = t
	return t
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

// AppendCallback is told the outcomes of asynchronous appends
// (Log.AppendAsync). After each commit, storage calls Appended for each
// of the callback's appends that the commit held, in the order they were
// queued, then Flush once: a caller that answers clients can send all the
// answers of a commit together. Both run on a storage goroutine and must be
// quick; neither may call Append or AppendMany, nor DeleteTopic, Truncate,
// TruncateTime, TruncateAfter, Import, Replicate, SetEpoch or Close (with
// FsyncAlways these wait for the very commit that is telling the
// callback).
type AppendCallback interface {
	// Appended reports the outcome of the append queued with arg: what
	// Append would have returned.
	Appended(arg any, base int64, err error)
	// Flush follows the Appended calls of one commit.
	Flush()
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

// ReadOnly returns the error that turned topic read-only (it wraps
// ErrReadOnly and the failed write's or fsync's cause), nil while the
// topic takes appends, or why there is no such topic.
func (l *Log) ReadOnly() error {
	t, err := l.live()
	if err != nil {
		return err
	}
	return t.readOnly()
}

// readOnly returns the error that turned t read-only, or nil.
func (t *topic) readOnly() error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.err != nil && errors.Is(t.err, ErrReadOnly) {
		return t.err
	}
	return nil
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
	t.index.stop(false)
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
	t.committer.quiesce()
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
	_ = t.index.stop(!deleted)
	if seg == nil || seg.sealed || deleted {
		return nil
	}
	var errs []error
	if seg.logs != nil { // else parked, and fsynced then (FsyncNever: syncfs at Close)
		errs = append(errs, t.syncFiles(seg.logs))
	}
	if err := t.index.write(seg); err != nil {
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
func (l *Log) Watch(offset int64, fn func()) (cancel func() bool, err error) {
	t, err := l.live()
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
