package storage

import (
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// indexDelay is how long a topic goes without starting a segment before the
// index files of the segments it sealed are written. A busy topic of small
// messages starts a segment every few hundred microseconds; creating two
// files per segment (log and index) while appending costs more than the
// appends, and the index is derived data that open rebuilds from the log
// when it is missing. So index files are written when the burst is over,
// and at Close.
const indexDelay = 200 * time.Millisecond

// indexWriter writes a topic's index files (see doc.go, "Segment index"):
// those of sealed segments, queued until the topic has gone indexDelay
// without a roll, and the active segment's at close. Its timer is the
// topic's idle timer, which also closes the prepared files (topic.idle).
// mu is held while a queued index is written, so truncation and deletion,
// which take it, never race with the write.
type indexWriter struct {
	t *topic

	mu     sync.Mutex
	queued []*segment  // sealed segments whose index files are not written yet; mu must be held
	timer  *time.Timer // the idle timer; mu must be held
	done   bool        // closed or deleted: no more index writes; mu must be held
}

// queue queues seg's index file to be written once the topic has not
// rolled for indexDelay.
func (w *indexWriter) queue(seg *segment) {
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return
	}
	w.queued = append(w.queued, seg)
	w.mu.Unlock()
	w.armIdle()
}

// armIdle (re)starts the idle timer: indexDelay from now, unless rearmed,
// it writes the queued indexes and closes the prepared files.
func (w *indexWriter) armIdle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	if w.timer == nil {
		w.timer = time.AfterFunc(indexDelay, w.t.idle)
	} else {
		w.timer.Reset(indexDelay)
	}
}

// writeQueued writes the queued index files, oldest first, and returns the
// first error. A failed index is logged and left to open to rebuild.
func (w *indexWriter) writeQueued() error {
	var first error
	for {
		w.mu.Lock()
		if w.done || len(w.queued) == 0 {
			w.queued = nil
			w.mu.Unlock()
			return first
		}
		seg := w.queued[0]
		w.queued = w.queued[1:]
		err := w.write(seg)
		w.mu.Unlock()
		if err != nil {
			w.t.s.opts.Logger.Warn("segment index not written", "topic", w.t.name, "segment", seg.base, "err", err)
			if first == nil {
				first = err
			}
		}
	}
}

// stop ends index writing: the queued files are written first when
// write is set (Close), dropped otherwise (deletion).
func (w *indexWriter) stop(write bool) error {
	var err error
	if write {
		err = w.writeQueued()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	w.queued = nil
	if w.timer != nil {
		w.timer.Stop()
	}
	return err
}

// forget drops the queued index files of segments being deleted.
func (w *indexWriter) forget(gone []*segment) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.queued = slices.DeleteFunc(w.queued, func(sg *segment) bool {
		return slices.Contains(gone, sg)
	})
}

// write writes seg's index file on every volume. It is derived data, so
// it is written in place without fsync.
func (w *indexWriter) write(seg *segment) error {
	t := w.t
	t.mu.RLock()
	idx := appendIndex(make([]byte, 0, len(seg.entries)*indexEntrySize), seg.base, seg.entries)
	t.mu.RUnlock()
	for v := range t.s.opts.Volumes {
		path := filepath.Join(t.s.topicDir(v, t.name), segmentName(seg.base, idxSuffix))
		if err := t.s.writeFile(path, idx); err != nil {
			return fmt.Errorf("storage: topic %q: write index: %w", t.name, err)
		}
	}
	return nil
}
