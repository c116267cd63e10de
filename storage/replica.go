package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/haraqa/haraqa/protocol"
)

// Replication: a follower copies its leader's log batch for batch
// (Replicate) and, when its leader changed, cuts what it holds past the
// point where its log and the new leader's part (TruncateAfter, which
// epochs.go's EpochEnd tells where). See doc.go, "Replication".

// Replicate appends batches that the log's leader stored, at
// their own offsets and with their own append times, as a follower's
// copy of its leader's log: the bytes stored are the leader's.
//
// Each batch is validated as Append validates it (ErrInvalidBatch), and
// the batches must follow each other (each base the previous base plus
// its count, within MaxOffset; ErrInvalidImport). Their append times are
// kept as stamped, even where they go back (a leader's clock stepped
// back): the copy is the leader's log, which a follower may not refuse.
// The first batch's base must be the topic's next offset
// (ErrOffsetMismatch), except into a topic without segments, whose start
// it becomes. Idempotent producers' batches are recorded in the
// producers' table as an append records them, so a follower that becomes
// leader answers a producer's retry with the offset its batch got. The
// topic may have had ordinary appends; the caller must not append to it
// while replicating into it. Nothing is written when a check fails.
//
// Replicate returns the topic's next offset once every volume has the
// batches (fsynced with FsyncAlways). The batches must not be used by the
// caller until it returns.
func (l *Log) Replicate(batches [][]byte) (next int64, err error) {
	s, name := l.t.s, l.t.name
	reqs, err := s.copyReqs(name, 0, batches, true)
	if err != nil {
		return 0, err
	}
	t, err := l.live()
	if err != nil {
		return 0, err
	}
	if len(reqs) == 0 {
		t.mu.RLock()
		defer t.mu.RUnlock()
		return t.next, nil
	}
	_, next, err = t.importBatches(reqs[0].expect, reqs, true)
	return next, err
}

// cutName is the marker of a cut in progress (TruncateAfter): the
// topic's new next offset, in the meta file's layout with cutMagic.
const (
	cutName  = "truncating"
	cutMagic = "HRQT"
)

// TruncateAfter cuts the tail of the log: afterwards its next offset
// is the base of the batch holding offset (offset itself at a batch
// boundary), and every batch from there on is gone from every volume.
// offset at or past the next offset cuts no batch (but forgets the
// leader epochs recorded from offset on); offset in a range
// unreadable on every volume cuts back to the end of the last readable
// batch before it; offset below the start, or in the batch holding the
// start, leaves the topic without segments at its start offset.
//
// The idempotent producers' table is rebuilt from the batches kept (so a
// batch that was cut is stored anew when sent again), leader epochs
// starting at or after the new next offset are forgotten, and committed
// group offsets are left as they are. A read that found its spans before
// the cut may come up short (see doc.go). It returns the topic's next
// offset. See doc.go, "Replication", for what a crash leaves.
func (l *Log) TruncateAfter(offset int64) (next int64, err error) {
	t, err := l.live()
	if err != nil {
		return 0, err
	}
	return t.truncateAfter(offset)
}

func (t *topic) truncateAfter(offset int64) (int64, error) {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	t.committer.quiesce()
	t.bg.Wait() // no seal of a segment being cut or deleted is under way
	start, next, segs, err := t.truncateView()
	if err != nil {
		return 0, err
	}
	if offset >= next && (offset > start || len(segs) == 0) {
		// No batch goes; epochs recorded from offset on (begun by a
		// leader that took nothing, or by a follower before its copy
		// failed) go, as they would with the batches. (A topic whose
		// start is its end, truncated whole, cut at its start still
		// loses its segments below.)
		if err := t.dropEpochsFrom(offset); err != nil {
			return 0, err
		}
		return next, nil
	}
	t.mu.RLock()
	n := max(cutEnd(segs, offset), start)
	t.mu.RUnlock()
	if err := t.markCut(n); err != nil {
		return 0, err
	}
	if err := t.cut(n); err != nil {
		// Cut in part: the marker stays, and the restart that makes the
		// topic writable again finishes the cut.
		return 0, t.fail(err)
	}
	return n, nil
}

// cutEnd returns the end of the last readable batch of segs that ends at
// or before offset, -1 if none does. mu must be held.
func cutEnd(segs []*segment, offset int64) int64 {
	for i := sort.Search(len(segs), func(i int) bool { return segs[i].base > offset }) - 1; i >= 0; i-- {
		es := segs[i].entries
		if j := sort.Search(len(es), func(j int) bool { return es[j].end() > offset }); j > 0 {
			return es[j-1].end()
		}
	}
	return -1
}

// markCut writes n, the next offset a cut is about to leave, as the cut
// marker of every volume, durably: from then on a restart finishes the
// cut. If a volume's write fails, the markers written are removed; if
// that fails too, the topic turns read-only so that nothing is appended
// that a restart would cut. wmu must be held.
func (t *topic) markCut(n int64) error {
	b := encodeStamp(cutMagic, n)
	for v := range t.s.opts.Volumes {
		if err := t.s.writeFileDurable(filepath.Join(t.s.topicDir(v, t.name), cutName), b); err != nil {
			err = fmt.Errorf("storage: topic %q: truncate after %d: %w", t.name, n, err)
			if uerr := t.unmarkCut(); uerr != nil {
				return t.fail(errors.Join(err, uerr))
			}
			return err
		}
	}
	return nil
}

// unmarkCut removes the cut marker from every volume, durably. wmu must
// be held.
func (t *topic) unmarkCut() error {
	for v := range t.s.opts.Volumes {
		dir := t.s.topicDir(v, t.name)
		if err := t.s.fs.Remove(filepath.Join(dir, cutName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("storage: topic %q: remove cut marker: %w", t.name, err)
		}
		if err := t.s.fs.SyncDir(dir); err != nil {
			return fmt.Errorf("storage: topic %q: remove cut marker: %w", t.name, err)
		}
	}
	return nil
}

// cut makes n the topic's next offset, the cut marker holding it on
// every volume: the log, the epochs, the producers' table, then the
// marker removed. n is the end of a readable batch above the start, or
// at most the start, which leaves the topic without segments starting at
// n. wmu must be held, the committer quiesced and the background work
// waited for.
func (t *topic) cut(n int64) error {
	if err := t.cutLog(n); err != nil {
		return err
	}
	if err := t.dropEpochsFrom(n); err != nil {
		return err
	}
	if err := t.rebuildProducers(); err != nil {
		return err
	}
	return t.unmarkCut()
}

// cutLog removes every batch at or past n from every volume: readers see
// the cut first, then the segments past it are deleted (newest first,
// closing their files if open) and the one holding n is cut at the end
// of its last batch before n (its index file removed first), fsynced and
// sealed, its index queued: appends after the cut start a new segment at
// n, so nothing is ever written where a read that began before the cut
// may still look. Then the directories are fsynced. wmu must be held.
func (t *topic) cutLog(n int64) error {
	t.mu.RLock()
	start, next, segs := t.start, t.next, t.segs
	t.mu.RUnlock()
	empty := n <= start
	if !empty && n >= next {
		return nil // a restart found less than the cut kept
	}
	if empty {
		// Without segments the start is known from the meta file only.
		if err := t.persistStart(n); err != nil {
			return err
		}
	}
	k := 0
	if !empty {
		k = sort.Search(len(segs), func(i int) bool { return segs[i].base >= n })
	}
	var last *segment
	var keep int
	var size, msgs, lastTime int64
	if k > 0 {
		last = segs[k-1]
		var err error
		if keep, size, msgs, lastTime, err = t.keptBefore(last, n); err != nil {
			return err
		}
	}
	gone := segs[k:]
	t.mu.Lock()
	t.segs = append([]*segment(nil), segs[:k]...)
	t.next = n
	if empty {
		t.start = n
	}
	bad := t.bad[:0:0]
	for _, r := range t.bad {
		if r.from < n {
			bad = append(bad, offRange{r.from, min(r.to, n)})
		}
	}
	t.bad = bad
	if last != nil {
		// A new slice: a reader may hold the old one, which the next
		// append must not write into.
		last.entries = last.entries[:keep:keep]
		last.size, last.next, last.messages, last.lastTime = size, n, msgs, lastTime
	}
	t.mu.Unlock()
	forget := gone
	if last != nil {
		forget = append(forget[:len(forget):len(forget)], last)
	}
	t.index.forget(forget) // a queued index write of these is over once it returns
	if err := t.deleteSegments(gone); err != nil {
		return err
	}
	if last != nil {
		if err := t.cutSegment(last, size); err != nil {
			return err
		}
		last.sealed = true
		t.index.queue(last)
	}
	for v := range t.s.opts.Volumes {
		if err := t.s.fs.SyncDir(t.s.topicDir(v, t.name)); err != nil {
			return fmt.Errorf("storage: topic %q: truncate after %d: %w", t.name, n, err)
		}
	}
	return nil
}

// keptBefore returns what segment sg keeps of a cut before offset n: how
// many of its entries, their bytes and messages, and the append time of
// the last one kept.
func (t *topic) keptBefore(sg *segment, n int64) (keep int, size, msgs, lastTime int64, err error) {
	t.mu.RLock()
	es := sg.entries
	t.mu.RUnlock()
	keep = sort.Search(len(es), func(i int) bool { return es[i].off >= n })
	for _, e := range es[:keep] {
		msgs += int64(e.count)
	}
	if keep > 0 {
		e := es[keep-1]
		size = int64(e.pos) + int64(e.size)
		if lastTime, err = t.batchTime(sg, e); err != nil {
			return 0, 0, 0, 0, err
		}
	}
	return keep, size, msgs, lastTime, nil
}

// deleteSegments removes the files of gone, newest first, from every
// volume, after closing those open. wmu must be held.
func (t *topic) deleteSegments(gone []*segment) error {
	var paths []string
	defer func() { t.s.cache.invalidate(paths) }()
	for i := len(gone) - 1; i >= 0; i-- {
		sg := gone[i]
		if sg.logs != nil {
			if err := sg.closeLogs(t, sg.logs); err != nil {
				t.s.opts.Logger.Warn("closing a segment being deleted", "topic", t.name, "segment", sg.base, "err", err)
			}
			sg.logs = nil
		}
		for v := range t.s.opts.Volumes {
			dir := t.s.topicDir(v, t.name)
			for _, suffix := range []string{idxSuffix, logSuffix} {
				p := filepath.Join(dir, segmentName(sg.base, suffix))
				if suffix == logSuffix {
					paths = append(paths, p)
				}
				if err := t.s.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("storage: topic %q: delete segment %d: %w", t.name, sg.base, err)
				}
			}
		}
	}
	return nil
}

// cutSegment removes seg's index files and cuts its log to size on every
// volume, fsynced, and closes its files if open. wmu must be held.
func (t *topic) cutSegment(seg *segment, size int64) error {
	for v := range t.s.opts.Volumes {
		p := filepath.Join(t.s.topicDir(v, t.name), segmentName(seg.base, idxSuffix))
		if err := t.s.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("storage: topic %q: cut segment %d: %w", t.name, seg.base, err)
		}
	}
	if logs := seg.logs; logs != nil {
		for v, f := range logs {
			if err := f.Truncate(size); err != nil {
				return fmt.Errorf("storage: topic %q: cut segment %d on volume %s: %w", t.name, seg.base, t.s.opts.Volumes[v], err)
			}
		}
		if err := t.syncFiles(logs); err != nil {
			return err
		}
		seg.logs = nil
		if err := seg.closeLogs(t, logs); err != nil {
			t.s.opts.Logger.Warn("closing a segment cut", "topic", t.name, "segment", seg.base, "err", err)
		}
		return nil
	}
	for v := range t.s.opts.Volumes {
		f, err := t.s.fs.OpenFile(filepath.Join(t.s.topicDir(v, t.name), segmentName(seg.base, logSuffix)), os.O_RDWR, 0)
		if err == nil {
			err = f.Truncate(size)
			if err == nil {
				err = t.s.fsync(f)
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return fmt.Errorf("storage: topic %q: cut segment %d on volume %s: %w", t.name, seg.base, t.s.opts.Volumes[v], err)
		}
	}
	return nil
}

// batchTime reads the append time of e, a batch of seg, from the last
// volume.
func (t *topic) batchTime(seg *segment, e entry) (int64, error) {
	path := filepath.Join(t.s.topicDir(len(t.s.opts.Volumes)-1, t.name), segmentName(seg.base, logSuffix))
	cf, err := t.s.cache.acquire(path)
	if err != nil {
		return 0, fmt.Errorf("storage: topic %q: %w", t.name, err)
	}
	defer t.s.cache.release(cf)
	var hdr [protocol.MinBatchHeaderSize]byte
	if _, err := cf.f.ReadAt(hdr[:], int64(e.pos)); err != nil {
		return 0, fmt.Errorf("storage: topic %q: read batch %d: %w", t.name, e.off, err)
	}
	return protocol.BatchAppendTime(hdr[:]), nil
}

// rebuildProducers rebuilds the idempotent producers' table from the log
// as recovery does: every producer batch replayed in log order at its
// append time, then the producers idle past ProducerIdle forgotten. The
// owners the table had bound stay bound, and its tombstones stay. It
// reads every batch header, from the last volume. wmu must be held.
func (t *topic) rebuildProducers() error {
	opts := &t.s.opts
	t.mu.RLock()
	segs := t.segs
	ents := make([][]entry, len(segs))
	for i, sg := range segs {
		ents[i] = sg.entries
	}
	t.mu.RUnlock()
	old := &t.producers
	pt := producerTable{file: old.file}
	hdr := make([]byte, protocol.BatchHeaderSize)
	dir := t.s.topicDir(len(opts.Volumes)-1, t.name)
	for i, sg := range segs {
		if len(ents[i]) == 0 {
			continue
		}
		cf, err := t.s.cache.acquire(filepath.Join(dir, segmentName(sg.base, logSuffix)))
		if err != nil {
			return fmt.Errorf("storage: topic %q: %w", t.name, err)
		}
		for _, e := range ents[i] {
			h := hdr[:min(int(e.size), len(hdr))]
			if _, err := cf.f.ReadAt(h, int64(e.pos)); err != nil {
				t.s.cache.release(cf)
				return fmt.Errorf("storage: topic %q: read batch %d: %w", t.name, e.off, err)
			}
			if pid, seq := protocol.BatchProducer(h); pid != 0 {
				pt.record(pid, seq, e.off, int(e.count), "", protocol.BatchAppendTime(h), opts.ProducerIdle, opts.MaxProducers)
			}
		}
		t.s.cache.release(cf)
	}
	pt.evict(opts.Now().UnixNano(), opts.ProducerIdle, opts.MaxProducers)
	for id, ps := range pt.m {
		owner := ""
		if o := old.m[id]; o != nil {
			owner = o.owner
		} else if g, ok := old.gone[id]; ok {
			owner = g
		}
		if owner != "" {
			pt.rebind(ps, owner)
		}
	}
	for _, id := range old.goneFIFO {
		owner, ok := old.gone[id]
		if _, buried := pt.gone[id]; ok && !buried && pt.m[id] == nil {
			pt.bury(id, owner, opts.MaxProducers)
		}
	}
	t.producers = pt
	return nil
}

// finishCut finishes a cut that a crash interrupted: a valid cut marker
// on any volume means a cut to the offset it holds had begun (the
// smallest, if they differ), so it is made again on the recovered topic.
// A marker valid nowhere is removed, and the log kept as recovered.
func (r *recovery) finishCut(t *topic, dirs []string) error {
	var n int64
	seen, found := false, false
	for _, dir := range dirs {
		b, err := r.readSmall(filepath.Join(dir, cutName), metaSize)
		if err != nil {
			return err
		}
		if b == nil {
			continue
		}
		seen = true
		if m, ok := decodeStamp(cutMagic, b); ok && (!found || m < n) {
			n, found = m, true
		}
	}
	if !seen {
		return nil
	}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if !found {
		r.logger().Error("cut marker unreadable on every volume: removed, the log kept as found", "topic", r.name)
		return t.unmarkCut()
	}
	if n > t.start {
		// n was the end of a readable batch: the log below it is as
		// it was.
		n = max(cutEnd(t.segs, n), t.start)
	}
	r.logger().Warn("finishing a truncation cut short", "topic", r.name, "next", n)
	return t.cut(n)
}

// A follower's producers file. Batches name their producer but not its
// owner, so Replicate records a new producer bound to none; the follower
// asks its leader for the owners (UnboundProducers, ProducerOwners) and
// binds them (BindProducers) before it fetches again, so that by the time
// the leader counts the batches as held by the follower (an acks=all
// answer), the follower knows who owns their producers too, and a
// failover does not hand a producer id to the first token that uses it.

// maxOwnerQuery bounds the producer ids of one ProducerOwners call, and
// of what UnboundProducers returns.
const maxOwnerQuery = protocol.MaxOwnerQuery

// UnboundProducers returns the producers (at most 1024) of batches, a
// follower's copy stored with Replicate, that the log's table holds
// bound to no owner.
func (l *Log) UnboundProducers(batches [][]byte) ([]uint64, error) {
	t, err := l.live()
	if err != nil {
		return nil, err
	}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	var ids []uint64
	for _, b := range batches {
		pid, _ := protocol.BatchProducer(b)
		if pid == 0 || len(ids) == maxOwnerQuery || slices.Contains(ids, pid) {
			continue
		}
		if ps := t.producers.m[pid]; ps != nil && ps.owner == "" {
			ids = append(ids, pid)
		}
	}
	return ids, nil
}

// ProducerOwners returns the owners of those of ids (at most 1024) that
// the log's table, or its tombstones, binds to one: a leader's answer
// to its follower.
func (l *Log) ProducerOwners(ids []uint64) (map[uint64]string, error) {
	if len(ids) > maxOwnerQuery {
		return nil, fmt.Errorf("%w: %d producer ids asked, at most %d", protocol.ErrInvalidArgument, len(ids), maxOwnerQuery)
	}
	t, err := l.live()
	if err != nil {
		return nil, err
	}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	out := make(map[uint64]string, len(ids))
	for _, id := range ids {
		if ps := t.producers.m[id]; ps != nil && ps.owner != "" {
			out[id] = ps.owner
		} else if g := t.producers.gone[id]; g != "" {
			out[id] = g
		}
	}
	return out, nil
}

// BindProducers binds the producers of the log's table that are bound
// to none to the owners given (as their leader has them), writing the
// producers file of every volume first. Producers the table does not hold,
// or holds bound already, are left as they are.
func (l *Log) BindProducers(owners map[uint64]string) error {
	t, err := l.live()
	if err != nil {
		return err
	}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	pt := &t.producers
	var recs []undoRec
	for id, owner := range owners {
		if err := validOwner(owner); err != nil {
			return err
		}
		if ps := pt.m[id]; ps != nil && ps.owner == "" && owner != "" {
			pt.rebind(ps, owner)
			recs = append(recs, undoRec{id: id, owner: owner, claimed: true})
		}
	}
	if err := t.writeBindings(recs); err != nil {
		for _, u := range recs {
			if ps := pt.m[u.id]; ps != nil {
				pt.rebind(ps, "")
			}
		}
		return err
	}
	return nil
}
