package storage

import (
	"errors"
	"fmt"
	"path/filepath"
)

// Helpers of topic.truncate (topic.go), in the order it calls them. wmu
// must be held for all of them.

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
