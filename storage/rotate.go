package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Creating a file costs about 350 us on an ext4 volume of the reference
// machine, renaming one about 17 us (docs/benchmarks.md). With the default
// 5000 messages per segment a busy topic rolls often, so the files of the
// next segment are created in the background under a temporary name
// (nextName, removed by recovery if unused) and renamed into place when the
// segment starts; sealing (index write, close, and fsync under
// FsyncInterval) also runs in the background. topic.bg counts that work;
// truncation, deletion and close wait for it.
const nextName = "next" + tmpSuffix

// prepared is the outcome of creating the next segment's files.
type prepared struct {
	done chan struct{}
	err  error
}

// activeSegment returns the segment appends go to, starting a new one when
// there is none or the last is full. wmu must be held.
func (t *topic) activeSegment() (*segment, error) {
	t.mu.RLock()
	var seg *segment
	if n := len(t.segs); n > 0 {
		seg = t.segs[n-1]
	}
	next := t.next
	t.mu.RUnlock()
	opts := &t.s.opts
	if seg != nil && seg.logs != nil && seg.messages < int64(opts.Entries) && seg.size < opts.SegmentBytes {
		return seg, nil
	}
	if seg != nil {
		if seg.logs == nil && seg.base == next {
			return nil, fmt.Errorf("%w: topic %q: active segment %d is closed", ErrCorruptLayout, t.name, seg.base)
		}
		t.seal(seg)
	}
	return t.newSegment(next)
}

// seal hands a full segment to the background: fsync (FsyncInterval only;
// FsyncAlways fsynced every commit), index write, close. wmu must be held.
func (t *topic) seal(seg *segment) {
	logs := seg.logs
	seg.logs = nil
	if logs == nil {
		return
	}
	t.bg.Go(func() {
		var errs []error
		if t.s.opts.Fsync == FsyncInterval {
			if err := t.syncFiles(logs); err != nil {
				t.fail(err)
			}
		}
		if err := t.writeIndex(seg); err != nil {
			// The index is derived; recovery rebuilds it. Say so and go on.
			t.s.opts.Logger.Warn("segment index not written", "topic", t.name, "segment", seg.base, "err", err)
		}
		errs = append(errs, seg.closeLogs(logs))
		if err := errors.Join(errs...); err != nil {
			t.fail(fmt.Errorf("storage: topic %q: close segment %d: %w", t.name, seg.base, err))
		}
	})
}

// writeIndex writes seg's index file on every volume. It is derived data, so
// it is written in place without fsync.
func (t *topic) writeIndex(seg *segment) error {
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

// prepare starts creating the next segment's files. wmu must be held.
func (t *topic) prepare() {
	p := &prepared{done: make(chan struct{})}
	t.prep = p
	t.bg.Go(func() {
		defer close(p.done)
		p.err = t.createNext()
	})
}

// createNext creates an empty nextName file in every volume and closes it:
// an idle topic holds no descriptor for its next segment.
func (t *topic) createNext() error {
	for v := range t.s.opts.Volumes {
		f, err := t.s.fs.OpenFile(filepath.Join(t.s.topicDir(v, t.name), nextName), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err == nil {
			err = f.Close()
		}
		if err != nil {
			return fmt.Errorf("storage: topic %q: create segment on volume %s: %w", t.name, t.s.opts.Volumes[v], err)
		}
	}
	return nil
}

// takePrepared waits for the next segment's files, created in the
// background if prepare ran, here otherwise. wmu must be held.
func (t *topic) takePrepared() error {
	p := t.prep
	t.prep = nil
	if p == nil {
		return t.createNext()
	}
	<-p.done
	return p.err
}

// dropPrepared forgets the prepared files, once created; recovery removes
// them. wmu must be held.
func (t *topic) dropPrepared() {
	if p := t.prep; p != nil {
		<-p.done
		t.prep = nil
	}
}

func closeAll(files []File) {
	for _, f := range files {
		f.Close()
	}
}

// startFile renames the prepared file of dir to path, the new segment's log.
func (t *topic) startFile(dir, path string) error {
	if fi, err := t.s.fs.Stat(path); err == nil && fi.Size() > 0 {
		return fmt.Errorf("%w: new segment already holds %d bytes", ErrCorruptLayout, fi.Size())
	}
	if err := t.s.fs.Rename(filepath.Join(dir, nextName), path); err != nil {
		return err
	}
	if t.s.opts.Fsync == FsyncAlways {
		// The new file's directory entry must be durable before data in it
		// is acknowledged as durable. (FsyncInterval syncs the directory
		// with the next interval's fsync.)
		return t.s.fs.SyncDir(dir)
	}
	return nil
}

// newSegment starts the segment with the given base: the prepared files are
// renamed into place, and the files for the one after are prepared.
// wmu must be held.
func (t *topic) newSegment(base int64) (*segment, error) {
	if err := t.takePrepared(); err != nil {
		return nil, err
	}
	files := make([]File, 0, len(t.s.opts.Volumes))
	for v := range t.s.opts.Volumes {
		dir := t.s.topicDir(v, t.name)
		path := filepath.Join(dir, segmentName(base, logSuffix))
		err := t.startFile(dir, path)
		var f File
		if err == nil {
			f, err = t.s.fs.OpenFile(path, os.O_RDWR, 0)
		}
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("storage: topic %q: new segment on volume %s: %w", t.name, t.s.opts.Volumes[v], err)
		}
		files = append(files, f)
	}
	seg := &segment{base: base, next: base, logs: files}
	t.mu.Lock()
	t.segs = append(t.segs[:len(t.segs):len(t.segs)], seg)
	t.dirDirty = t.s.opts.Fsync == FsyncInterval
	t.mu.Unlock()
	t.prepare()
	return seg, nil
}
