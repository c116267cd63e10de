package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// Creating a file costs about 350 us on an ext4 volume of the reference
// machine, renaming one about 17 us (docs/benchmarks.md). With the default
// 5000 messages per segment a busy topic rolls often, so the files of the
// next segment are created in the background under a temporary name
// (nextName, removed by recovery if unused), kept open, and renamed into
// place when the segment starts: starting a segment costs one rename per
// volume. Sealing the full segment (close, and fsync under FsyncInterval)
// runs in the same background task as preparing the files after the new
// one, so a roll wakes one goroutine. topic.bg counts that work;
// truncation, deletion and close wait for it. Once the topic has gone
// indexDelay without a roll, the idle timer writes the queued indexes and
// closes the prepared files (they stay on disk), so an idle topic holds
// one descriptor per volume, its active segment's.
const nextName = "next" + tmpSuffix

// prepared is the outcome of creating the next segment's files, once done
// is closed: err, or one open file per volume, or (closed by the idle
// timer) none, the files waiting on disk.
type prepared struct {
	done  chan struct{}
	files []File
	err   error
}

// activeSegment returns the segment appends go to, starting a new one when
// there is none or the last is full, and reopening its files when they
// were parked for the file budget. wmu must be held.
func (t *topic) activeSegment() (*segment, error) {
	t.mu.RLock()
	var seg *segment
	if n := len(t.segs); n > 0 {
		seg = t.segs[n-1]
	}
	next := t.next
	t.mu.RUnlock()
	opts := &t.s.opts
	var size, msgs int64
	if seg != nil {
		size, next, msgs = t.committer.cursor(seg)
	}
	if seg != nil && !seg.sealed && msgs < int64(opts.Entries) && size < opts.SegmentBytes {
		if seg.logs == nil {
			if err := t.reopen(seg); err != nil {
				return nil, err
			}
		}
		return seg, nil
	}
	var full []File
	sealing := seg != nil && !seg.sealed
	if sealing {
		if err := t.committer.beforeSeal(seg); err != nil {
			return nil, err
		}
		full = seg.logs // nil when parked: only its index is left to write
		seg.logs = nil
		seg.sealed = true
	}
	tight := t.s.files.tight()
	if sealing && tight {
		t.seal(seg, full)
		sealing = false
	}
	ns, err := t.newSegment(next)
	if err != nil {
		if sealing {
			t.bg.Go(func() { t.seal(seg, full) })
		}
		return nil, err
	}
	if tight {
		return ns, nil // the next segment's files are created when it starts
	}
	// One background task: the files for the segment after ns first (the
	// next roll waits for them), then the full segment's seal.
	p := &prepared{done: make(chan struct{})}
	t.prep = p
	t.index.armIdle()
	t.bg.Go(func() {
		p.files, p.err = t.createNext()
		close(p.done)
		if sealing {
			t.seal(seg, full)
		}
	})
	return ns, nil
}

// reopen opens the log files of the active segment seg again, after they
// were parked to keep the store within its file budget. wmu must be held.
func (t *topic) reopen(seg *segment) error {
	paths := make([]string, len(t.s.opts.Volumes))
	for v := range paths {
		paths[v] = filepath.Join(t.s.topicDir(v, t.name), segmentName(seg.base, logSuffix))
	}
	files, err := t.openFiles(paths, os.O_RDWR, "reopen segment "+segmentName(seg.base, logSuffix))
	if err != nil {
		return err
	}
	seg.logs = files
	return nil
}

// openFiles opens one file per volume within the file budget; on error
// none stays open.
func (t *topic) openFiles(paths []string, flag int, what string) ([]File, error) {
	n := len(paths)
	if err := t.s.files.reserve(t, n); err != nil {
		return nil, fmt.Errorf("storage: topic %q: %s: %w", t.name, what, err)
	}
	files := make([]File, 0, n)
	for v, p := range paths {
		f, err := t.s.fs.OpenFile(p, flag, 0o644)
		if err != nil {
			t.closeFiles(files)
			t.s.files.release(t, n-len(files))
			return nil, fmt.Errorf("storage: topic %q: %s on volume %s: %w", t.name, what, t.s.opts.Volumes[v], err)
		}
		files = append(files, f)
	}
	return files, nil
}

// closeFiles closes write handles of the topic and returns them to the
// file budget. It reports the first error.
func (t *topic) closeFiles(files []File) error {
	var first error
	for _, f := range files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	t.s.files.release(t, len(files))
	return first
}

// park closes the topic's write handles, the active segment's (fsynced
// first under FsyncInterval) and the prepared ones, for the file budget;
// the next append reopens them. It returns how many it closed. wmu must be
// held.
func (t *topic) park() int {
	n := 0
	if p := t.prep; p != nil {
		select {
		case <-p.done:
			n += len(p.files)
			t.closeFiles(p.files) // empty and unused: nothing to lose
			p.files = nil
		default: // still being created
		}
	}
	t.mu.Lock()
	var seg *segment
	if k := len(t.segs); k > 0 {
		seg = t.segs[k-1]
	}
	dirty := t.dirty
	t.dirty = false
	t.mu.Unlock()
	if seg == nil || seg.logs == nil {
		return n
	}
	if dirty && t.s.opts.Fsync == FsyncInterval {
		if err := t.syncFiles(seg.logs); err != nil {
			t.fail(err)
		}
	}
	n += len(seg.logs)
	if err := seg.closeLogs(t, seg.logs); err != nil {
		t.fail(fmt.Errorf("storage: topic %q: close segment %d: %w", t.name, seg.base, err))
	}
	seg.logs = nil
	return n
}

// seal finishes a full segment whose files logs were detached from it:
// fsync (FsyncInterval only; FsyncAlways fsynced every commit), close, and
// its index file queued. It runs in the background.
func (t *topic) seal(seg *segment, logs []File) {
	if t.s.opts.Fsync == FsyncInterval {
		if err := t.syncFiles(logs); err != nil {
			t.fail(err)
		}
	}
	if err := seg.closeLogs(t, logs); err != nil {
		t.fail(fmt.Errorf("storage: topic %q: close segment %d: %w", t.name, seg.base, err))
	}
	t.index.queue(seg)
}

// idle runs when the topic has gone indexDelay without a roll.
func (t *topic) idle() {
	_ = t.index.writeQueued() // logged there; open rebuilds what is missing
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if p := t.prep; p != nil {
		select {
		case <-p.done:
			if p.err == nil {
				t.closeFiles(p.files) // empty and unused: nothing to lose
				p.files = nil
			}
		default: // still being created: look again later
			t.index.armIdle()
		}
	}
}

// createNext creates an empty nextName file in every volume and returns
// them open.
func (t *topic) createNext() ([]File, error) {
	paths := make([]string, len(t.s.opts.Volumes))
	for v := range paths {
		paths[v] = filepath.Join(t.s.topicDir(v, t.name), nextName)
	}
	return t.openFiles(paths, os.O_RDWR|os.O_CREATE|os.O_TRUNC, "create segment")
}

// takePrepared waits for the next segment's files, created in the
// background if a segment was started before, here otherwise (also when
// the background creation failed: the error may have passed). Files nil
// with no error means they are on disk, closed while the topic was idle.
// wmu must be held.
func (t *topic) takePrepared() ([]File, error) {
	p := t.prep
	t.prep = nil
	if p == nil {
		return t.createNext()
	}
	<-p.done
	if p.err != nil {
		level := slog.LevelWarn
		if transientOpenErr(p.err) {
			level = slog.LevelDebug // the retry below says the same if it fails
		}
		t.s.opts.Logger.Log(context.Background(), level, "creating the next segment failed in the background; trying again", "topic", t.name, "err", p.err)
		return t.createNext()
	}
	return p.files, nil
}

// dropPrepared closes the prepared files, once created; recovery removes
// them. wmu must be held.
func (t *topic) dropPrepared() {
	if p := t.prep; p != nil {
		<-p.done
		t.closeFiles(p.files) // empty and unused: nothing to lose
		t.prep = nil
	}
}

// startFile renames the prepared file of dir to path, the new segment's log.
func (t *topic) startFile(dir, path string) error {
	if err := t.s.fs.RenameNoReplace(filepath.Join(dir, nextName), path); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return err
		}
		// Left by a start that failed on a later volume: reuse it if empty.
		fi, serr := t.s.fs.Stat(path)
		if serr != nil {
			return serr
		}
		if fi.Size() > 0 {
			return fmt.Errorf("%w: new segment already holds %d bytes", ErrCorruptLayout, fi.Size())
		}
		if err := t.s.fs.Rename(filepath.Join(dir, nextName), path); err != nil {
			return err
		}
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
// renamed into place. The caller prepares the files for the one after.
// wmu must be held.
func (t *topic) newSegment(base int64) (*segment, error) {
	files, err := t.takePrepared()
	if err != nil {
		return nil, err
	}
	n := len(t.s.opts.Volumes)
	paths := make([]string, n)
	for v := range n {
		dir := t.s.topicDir(v, t.name)
		paths[v] = filepath.Join(dir, segmentName(base, logSuffix))
		if err := t.startFile(dir, paths[v]); err != nil {
			t.closeFiles(files)
			return nil, fmt.Errorf("storage: topic %q: new segment on volume %s: %w", t.name, t.s.opts.Volumes[v], err)
		}
	}
	if files == nil { // closed while the topic was idle: open the renamed files
		if files, err = t.openFiles(paths, os.O_RDWR, "new segment"); err != nil {
			return nil, err
		}
	}
	seg := &segment{base: base, next: base, logs: files}
	t.mu.Lock()
	t.segs = append(t.segs[:len(t.segs):len(t.segs)], seg)
	t.dirDirty = t.s.opts.Fsync == FsyncInterval
	t.mu.Unlock()
	return seg, nil
}
