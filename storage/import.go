package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/haraqa/haraqa/protocol"
)

// MaxOffset bounds a topic's offsets: every message's offset is below it
// and a topic's next offset at most it, so that no offset computed from
// one (an offset plus a count, a limit or a margin) overflows an int64.
// An append whose messages would pass it fails with ErrOffsetLimit, an
// import with an offset or batches past it with ErrInvalidImport. At a
// million messages a second, 2^62 offsets last 146,000 years.
const MaxOffset = 1 << 62

// importName is the marker file of a topic being imported: present on
// every volume from the first Import until the first ordinary append.
const importName = "importing"

// Import appends batches that another store kept, at their own offsets
// and with their own append times: the base offset and append time
// stamped in each batch's header are kept as they are, so offsets and
// OffsetAt answers survive a move between servers. It is how a topic is
// copied: into a topic that holds nothing yet, or one that has received
// only imports since (the topic "is being imported").
//
// offset is where the import goes on from. Into a topic without
// segments (created and never appended to) it may be any offset in
// [0, MaxOffset]: it
// becomes the topic's oldest offset, and the first batch must hold it
// (its base at or below offset, its end above it), so a copy of a
// truncated topic starts where the original does. Otherwise offset, and
// the first batch's base, must be the topic's next offset
// (ErrOffsetMismatch). With no batches, an import into a topic without
// segments only sets its oldest and next offsets to offset.
//
// Batches must follow each other (each base is the previous base plus its
// count) with append times that never go back, and the first time must
// not be before the topic's newest batch's (ErrInvalidImport). Each is
// validated as Append validates it (ErrInvalidBatch). A topic that has
// received an ordinary append is not imported into (ErrImportRefused):
// the first ordinary append ends the import. Nothing is written when any
// check fails.
//
// Import returns the topic's oldest and next offsets after it, once every
// volume has the batches (fsynced with FsyncAlways). The batches must not
// be used by the caller until it returns.
func (l *Log) Import(offset int64, batches [][]byte) (oldest, next int64, err error) {
	reqs, err := l.t.s.importReqs(l.t.name, offset, batches)
	if err != nil {
		return 0, 0, err
	}
	t, err := l.live()
	if err != nil {
		return 0, 0, err
	}
	return t.importBatches(offset, reqs, false)
}

// ValidateImport checks batches as Import into topic name at offset would
// check them on their own (offsets, append times, each batch as Append
// validates it), without a log: for a caller that found the topic missing
// and must tell an import no topic would take from one that only lacks
// its topic.
func (s *Store) ValidateImport(name string, offset int64, batches [][]byte) error {
	_, err := s.importReqs(name, offset, batches)
	return err
}

// importReqs checks offset and batches for an import into topic name
// and returns them as requests (copyReqs).
func (s *Store) importReqs(name string, offset int64, batches [][]byte) ([]*appendReq, error) {
	if offset < 0 || offset > MaxOffset {
		return nil, fmt.Errorf("%w: topic %q: offset %d is outside [0, %d]", ErrInvalidImport, name, offset, int64(MaxOffset))
	}
	return s.copyReqs(name, offset, batches, false)
}

// copyReqs validates batches another store kept (Import, Replicate) as
// Append validates a batch, and against each other: offsets within
// MaxOffset, each base the previous base plus its count and, for an
// import, append times that never go back and a first batch holding
// offset. It returns them as requests keeping their own offsets and
// times.
func (s *Store) copyReqs(name string, offset int64, batches [][]byte, replica bool) ([]*appendReq, error) {
	reqs := make([]*appendReq, len(batches))
	var prev protocol.Batch
	for i, b := range batches {
		bi, err := s.validate(name, b, "")
		if err != nil {
			return nil, err
		}
		bt, _, _ := parseBatch(b, s.opts.MaxBatchBytes) // valid: validate parsed it
		switch {
		case bt.BaseOffset < 0 || bt.BaseOffset > MaxOffset-int64(bt.Count):
			return nil, fmt.Errorf("%w: topic %q: batch %d holds offsets from %d, outside [0, %d)", ErrInvalidImport, name, i, bt.BaseOffset, int64(MaxOffset))
		case i == 0 && !replica && (bt.BaseOffset > offset || bt.BaseOffset+int64(bt.Count) <= offset):
			return nil, fmt.Errorf("%w: topic %q: the first batch holds offsets [%d, %d), not %d", ErrInvalidImport, name, bt.BaseOffset, bt.BaseOffset+int64(bt.Count), offset)
		case i > 0 && bt.BaseOffset != prev.BaseOffset+int64(prev.Count):
			return nil, fmt.Errorf("%w: topic %q: batch %d starts at offset %d, not %d", ErrInvalidImport, name, i, bt.BaseOffset, prev.BaseOffset+int64(prev.Count))
		case i > 0 && !replica && bt.AppendTime < prev.AppendTime:
			return nil, fmt.Errorf("%w: topic %q: batch %d was appended before the one it follows", ErrInvalidImport, name, i)
		}
		prev = bt
		reqs[i] = &appendReq{batch: b, count: bi.count, pid: bi.pid, seq: bi.seq,
			cond: true, expect: bt.BaseOffset, imp: true, replica: replica, at: bt.AppendTime}
	}
	return reqs, nil
}

// importBatches commits reqs, copied batches already checked against
// each other (copyReqs), after checking them against the topic: an
// import (Import) or a follower's copy of its leader's log (replica,
// Replicate), which needs no marker and goes into any topic.
func (t *topic) importBatches(offset int64, reqs []*appendReq, replica bool) (oldest, next int64, err error) {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	t.committer.quiesce()
	t.mu.RLock()
	terr, empty, next := t.err, len(t.segs) == 0, t.next
	var lastTime int64
	if !empty {
		lastTime = t.segs[len(t.segs)-1].lastTime
	}
	t.mu.RUnlock()
	if terr != nil {
		return 0, 0, terr
	}
	switch {
	case !empty && !replica && !t.importing:
		return 0, 0, fmt.Errorf("%w: topic %q holds messages that were not imported", ErrImportRefused, t.name)
	case !empty && offset != next:
		return 0, 0, fmt.Errorf("%w: topic %q: its next offset is %d, not %d", ErrOffsetMismatch, t.name, next, offset)
	case !empty && !replica && len(reqs) > 0 && reqs[0].at < lastTime:
		return 0, 0, fmt.Errorf("%w: topic %q: the first batch was appended before the topic's newest", ErrInvalidImport, t.name)
	}
	if empty {
		if replica {
			err = t.persistStart(offset)
		} else {
			err = t.beginImport(offset)
		}
		if err != nil {
			return 0, 0, err
		}
		base := offset
		if len(reqs) > 0 {
			base = reqs[0].expect
		}
		t.mu.Lock()
		t.start, t.next = base, base // the first segment starts at base
		t.mu.Unlock()
	}
	fl := t.committer.commit(reqs, false)
	t.committer.settle(fl)
	for _, r := range reqs {
		if r.err != nil {
			err = r.err
			break
		}
	}
	fl.reqs = nil // the caller's
	t.committer.release(fl)
	t.mu.Lock()
	if empty {
		if len(t.segs) == 0 {
			t.next = offset
		}
		t.start = min(offset, t.next)
	}
	oldest, next = t.start, t.next
	t.mu.Unlock()
	return oldest, next, err
}

// beginImport makes the topic, which has no segments, one being imported
// from offset: the start offset and the marker written durably on every
// volume. wmu must be held.
func (t *topic) beginImport(offset int64) error {
	if err := t.persistStart(offset); err != nil {
		return err
	}
	if t.importing {
		return nil
	}
	for v := range t.s.opts.Volumes {
		if err := t.s.writeFileDurable(filepath.Join(t.s.topicDir(v, t.name), importName), nil); err != nil {
			return fmt.Errorf("storage: topic %q: import: %w", t.name, err)
		}
	}
	t.importing = true
	return nil
}

// endImport removes the import marker from every volume before the first
// ordinary append is written. wmu must be held.
func (t *topic) endImport() error {
	for v := range t.s.opts.Volumes {
		dir := t.s.topicDir(v, t.name)
		if err := t.s.fs.Remove(filepath.Join(dir, importName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("storage: topic %q: end import: %w", t.name, err)
		}
		if err := t.s.fs.SyncDir(dir); err != nil {
			return fmt.Errorf("storage: topic %q: end import: %w", t.name, err)
		}
	}
	t.importing = false
	return nil
}
