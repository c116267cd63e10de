package storage

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// Writing and recovering the groups file (its format: groupsfile.go).

// writeGroupLocked records one change of g on every volume, in volume
// order, under the fsync policy: rec (a commit or delete record) appended
// to the log, or, when the log would grow past twice its live size plus
// groupsCompactSlack, when it does not exist yet, is of the old format, or
// a write failed since the last rewrite, the whole compacted log written
// in its place (also when the append fails on a volume, say its file was
// removed). g.m already holds the change and liveDelta is what it changes
// of the live size. g.mu must be held.
func (t *topic) writeGroupLocked(g *groupTable, rec []byte, liveDelta int64) error {
	live := g.live + liveDelta
	if g.appendable && g.logSize+int64(len(rec)) <= 2*live+groupsCompactSlack {
		at := g.logSize
		if t.eachGroupsVolume(func(path string) error { return t.appendGroups(path, rec, at) }) == nil {
			g.logSize += int64(len(rec))
			g.live = live
			return nil
		}
		// Some volumes may hold the record, or part of it: every copy
		// is rewritten, now or by the next write.
		g.appendable = false
	}
	data := encodeGroupsLog(g.m)
	if err := t.eachGroupsVolume(func(path string) error { return t.rewriteGroups(path, data) }); err != nil {
		g.appendable = false
		return err
	}
	g.appendable, g.logSize, g.live = true, int64(len(data)), int64(len(data))
	return nil
}

// eachGroupsVolume runs fn on the groups file path of every volume in
// order, stopping at the first error, which it logs and returns as a
// client is told it (ErrNoSpace, or a groupWriteError without the path).
func (t *topic) eachGroupsVolume(fn func(path string) error) error {
	for v := range t.s.opts.Volumes {
		if err := fn(filepath.Join(t.s.topicDir(v, t.name), groupsName)); err != nil {
			t.s.opts.Logger.Error("writing the groups file failed", "topic", t.name, "volume", t.s.opts.Volumes[v], "err", err)
			if noSpaceErr(err) {
				return fmt.Errorf("%w: topic %q: the groups file could not be written", ErrNoSpace, t.name)
			}
			return &groupWriteError{topic: t.name, cause: err}
		}
	}
	if t.s.opts.Fsync == FsyncInterval {
		t.groups.dirty = true
	}
	return nil
}

// rewriteGroups replaces the groups file at path with data: a temporary
// file renamed into place, which a crash of the process cannot tear; with
// FsyncAlways fsynced before the rename and the directory after it.
func (t *topic) rewriteGroups(path string, data []byte) error {
	if t.s.opts.Fsync == FsyncAlways {
		return t.s.writeFileDurable(path, data)
	}
	return t.s.writeFile(path, data)
}

// appendGroups writes rec at offset at of the groups file at path, and
// with FsyncAlways fsyncs the file. A record cut short by a crash fails
// its CRC and is dropped at open, as a commit never acknowledged.
func (t *topic) appendGroups(path string, rec []byte, at int64) error {
	f, err := t.s.fs.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(rec, at)
	if err == nil && t.s.opts.Fsync == FsyncAlways {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// groups reads the topic's groups file from every volume and takes as the
// reference the copy of the last volume, in reverse volume order, whose
// file is wholly valid, as for a batch: changes are written in volume
// order, so the last volume never holds one the others lack. Every other
// volume whose copy is missing, damaged or different gets the reference.
// When no copy is wholly valid, the last one with a valid header is taken
// up to its first bad record (a record torn by a crash, never
// acknowledged), compacted and written to every volume. When no volume
// holds a groups file with a valid header but some hold a file, the
// groups are lost: that is logged and counted as unreadable.
func (r *recovery) groups(t *topic, dirs []string) error {
	have := make([][]byte, len(dirs))
	ref, torn := -1, -1
	var recs, tornRecs map[string]groupRecord
	legacy := false
	for v := len(dirs) - 1; v >= 0; v-- {
		b, err := r.readSmall(filepath.Join(dirs[v], groupsName), maxGroupsReadSize)
		if err != nil {
			return err
		}
		have[v] = b
		if ref >= 0 {
			continue
		}
		if m, _, clean, old, ok := decodeGroupsFile(b); clean {
			ref, recs, legacy = v, m, old
		} else if ok && torn < 0 {
			torn, tornRecs = v, m
		}
	}
	if ref < 0 && torn < 0 {
		for v, b := range have {
			if b != nil {
				r.s.stats.unreadable.Add(1)
				r.logger().Error("groups file unreadable on every volume: the topic's committed offsets are lost", "topic", r.name, "volume", r.s.opts.Volumes[v])
				break
			}
		}
		return nil
	}
	g := &t.groups
	g.m = make(map[string]*groupEntry, len(recs)+len(tornRecs))
	want := []byte(nil)
	if ref >= 0 {
		want = have[ref]
		for name, rec := range recs {
			g.m[name] = &groupEntry{committed: rec.committed, owner: rec.owner}
		}
	} else {
		for name, rec := range tornRecs {
			g.m[name] = &groupEntry{committed: rec.committed, owner: rec.owner}
		}
		want = encodeGroupsLog(g.m)
		r.logger().Warn("groups file: no volume's copy is wholly valid; the records up to the first bad one are kept", "topic", r.name, "volume", r.s.opts.Volumes[torn])
	}
	for v, dir := range dirs {
		if v != ref && !bytes.Equal(have[v], want) {
			if err := r.s.writeFileDurable(filepath.Join(dir, groupsName), want); err != nil {
				return fmt.Errorf("storage: topic %q: %w", r.name, err)
			}
			r.repaired(v, "groups file", int64(len(want)))
		}
	}
	g.logSize, g.live, g.appendable = int64(len(want)), int64(len(encodeGroupsLog(g.m))), !legacy
	for _, e := range g.m {
		r.s.countGroup(e.owner, 1)
	}
	return nil
}
