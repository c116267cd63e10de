package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/haraqa/haraqa/protocol"
)

// Truncation: topic.truncate, which takes wmu, then its helpers in the
// order it calls them (wmu must be held for them); and offsetAtTime, the
// search by append time that truncating by time and OffsetAt share.

// truncate moves the start of the topic to before and deletes the segments
// that only hold offsets below it, except the newest.
func (t *topic) truncate(before int64) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	t.committer.quiesce()
	t.bg.Wait() // no index write may race with the deletion of its segment
	start, next, segs, err := t.truncateView()
	if err != nil {
		return err
	}
	before = min(before, next)
	if before <= start {
		return nil
	}
	k := segmentsBefore(segs, before)
	if len(segs) == 0 || before > segs[k].base {
		// The start falls inside a kept segment: persist it.
		if err := t.persistStart(before); err != nil {
			return err
		}
	}
	t.moveStart(before, segs[k:])
	t.index.forget(segs[:k])
	var paths []string
	var errs []error
	for _, sg := range segs[:k] {
		for v := range t.s.opts.Volumes {
			dir := t.s.topicDir(v, t.name)
			for _, suffix := range []string{logSuffix, idxSuffix} {
				p := filepath.Join(dir, segmentName(sg.base, suffix))
				paths = append(paths, p)
				if err := t.s.fs.Remove(p); err != nil && !os.IsNotExist(err) {
					errs = append(errs, err)
				}
			}
		}
	}
	if k > 0 {
		for v := range t.s.opts.Volumes {
			errs = append(errs, t.s.fs.SyncDir(t.s.topicDir(v, t.name)))
		}
	}
	t.s.cache.invalidate(paths)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("storage: topic %q: truncate: %w", t.name, err)
	}
	return nil
}

// offsetAtTime returns the offset of the first batch appended at or after
// ns, reading batch headers from the last volume by binary search.
func (t *topic) offsetAtTime(ns int64) (int64, error) {
	t.mu.RLock()
	segs, next := t.segs, t.next
	// Segments whose newest batch is older than ns are skipped whole.
	i := sort.Search(len(segs), func(i int) bool { return segs[i].lastTime >= ns })
	if i == len(segs) {
		t.mu.RUnlock()
		return next, nil
	}
	seg := segs[i]
	entries, segNext := seg.entries, seg.next
	t.mu.RUnlock()
	path := filepath.Join(t.s.topicDir(len(t.s.opts.Volumes)-1, t.name), segmentName(seg.base, logSuffix))
	cf, err := t.s.cache.acquire(path)
	if err != nil {
		return 0, fmt.Errorf("storage: topic %q: %w", t.name, err)
	}
	defer t.s.cache.release(cf)
	var hdr [protocol.MinBatchHeaderSize]byte
	var rerr error
	j := sort.Search(len(entries), func(j int) bool {
		if rerr != nil {
			return true
		}
		if _, err := cf.f.ReadAt(hdr[:], int64(entries[j].pos)); err != nil {
			rerr = err
			return true
		}
		return protocol.BatchAppendTime(hdr[:]) >= ns
	})
	if rerr != nil {
		return 0, fmt.Errorf("storage: topic %q: read batch time: %w", t.name, rerr)
	}
	if j == len(entries) {
		return segNext, nil
	}
	return entries[j].off, nil
}

// truncateView returns what truncation starts from, read under mu: the
// start, the next offset and the segments. A topic closed or deleted
// returns its sticky error; a read-only one can still be truncated.
func (t *topic) truncateView() (start, next int64, segs []*segment, err error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.err != nil && !errors.Is(t.err, ErrReadOnly) {
		return 0, 0, nil, t.err
	}
	return t.start, t.next, t.segs, nil
}

// segmentsBefore returns k such that segments [0, k) end at or before
// `before` and go. The newest segment is always kept, so the next offset
// survives.
func segmentsBefore(segs []*segment, before int64) int {
	k := 0
	for k < len(segs)-1 && segs[k+1].base <= before {
		k++
	}
	return k
}

// persistStart writes before as the start offset to the meta file of every
// volume, durably, before readers see it: a start inside a kept segment is
// known from the meta file only, and recovery takes the largest one found.
func (t *topic) persistStart(before int64) error {
	for v := range t.s.opts.Volumes {
		if err := t.s.writeFileDurable(filepath.Join(t.s.topicDir(v, t.name), metaName), encodeMeta(before)); err != nil {
			return fmt.Errorf("storage: topic %q: truncate: %w", t.name, err)
		}
	}
	return nil
}

// moveStart publishes the new start to readers: the kept segments only,
// and the unreadable ranges cut at before. It comes before the removal of
// the dropped segments' files, so a read never finds a segment whose file
// is gone (see read).
func (t *topic) moveStart(before int64, kept []*segment) {
	t.mu.Lock()
	t.start = before
	t.segs = append([]*segment(nil), kept...)
	bad := t.bad[:0:0]
	for _, r := range t.bad {
		if r.to > before {
			bad = append(bad, offRange{max(r.from, before), r.to})
		}
	}
	t.bad = bad
	t.mu.Unlock()
}
