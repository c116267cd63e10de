package storage

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/haraqa/haraqa/protocol"
)

// recoverAll opens every topic found on any volume, repairing as it goes.
func (s *Store) recoverAll() error {
	names := make(map[string]bool)
	for _, vol := range s.opts.Volumes {
		root := filepath.Join(vol, topicsDir)
		ents, err := s.fs.ReadDir(root)
		if err != nil {
			return fmt.Errorf("storage: volume %s: %w", vol, err)
		}
		for _, e := range ents {
			name := e.Name()
			if strings.HasPrefix(name, deletedPrefix) {
				// A deletion interrupted by a crash: finish it.
				if err := s.fs.RemoveAll(filepath.Join(root, name)); err != nil {
					return fmt.Errorf("storage: volume %s: remove deleted topic: %w", vol, err)
				}
				continue
			}
			if !e.IsDir() || validTopic(name) != nil {
				s.opts.Logger.Warn("ignoring unknown entry in volume", "volume", vol, "name", name)
				continue
			}
			names[name] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for name := range names {
		sorted = append(sorted, name)
	}
	slices.Sort(sorted)
	r := &recovery{s: s, bufs: make([][]byte, len(s.opts.Volumes))}
	for _, name := range sorted {
		t, err := r.topic(name)
		if err != nil {
			return err
		}
		s.topics[name] = t
	}
	return nil
}

// recovery holds the scratch state of recovering topics at open.
type recovery struct {
	s    *Store
	name string // topic being recovered
	t    *topic // topic being recovered
	bufs [][]byte

	// per segment
	files []File
	sizes []int64
	dirty []bool
}

func (r *recovery) logger() *slog.Logger { return r.s.opts.Logger }

func (r *recovery) repaired(volume int, what string, bytes int64, args ...any) {
	r.s.stats.repairs.Add(1)
	r.s.stats.repairedBytes.Add(bytes)
	r.logger().Warn("repaired "+what, append([]any{"topic", r.name, "volume", r.s.opts.Volumes[volume], "bytes", bytes}, args...)...)
}

// topic recovers topic name from every volume: it lists the segments any
// volume holds, recovers them in order, and takes the start offset from the
// meta files.
func (r *recovery) topic(name string) (*topic, error) {
	r.name = name
	dirs := make([]string, len(r.s.opts.Volumes))
	bases, err := r.bases(dirs)
	if err != nil {
		return nil, err
	}
	t := newTopic(r.s, name)
	r.t = t
	off, err := r.segments(t, dirs, bases)
	if err != nil {
		return nil, err
	}
	// The producers scan recorded, less those idle too long by now.
	t.producers.evict(r.s.opts.Now().UnixNano(), r.s.opts.ProducerIdle, r.s.opts.MaxProducers)
	if err := r.bindings(t, dirs); err != nil {
		return nil, err
	}
	start, err := r.meta(dirs)
	if err != nil {
		return nil, err
	}
	if len(t.segs) == 0 {
		t.next = start
	} else {
		t.next = off
		start = max(start, t.segs[0].base)
	}
	t.start = min(start, t.next)
	if err := r.groups(t, dirs); err != nil {
		return nil, err
	}
	for _, dir := range dirs {
		// An import goes on after a restart; a marker on any volume
		// counts (the first ordinary append removes it from all).
		if _, err := r.s.fs.Stat(filepath.Join(dir, importName)); err == nil {
			t.importing = true
			break
		}
	}
	if err := r.epochs(t, dirs); err != nil {
		return nil, err
	}
	// Last: a cut a crash interrupted is finished on the recovered topic.
	if err := r.finishCut(t, dirs); err != nil {
		return nil, err
	}
	return t, nil
}

// bases fills dirs with the topic's directory on each volume and returns
// the base offsets of the segments found on any of them, sorted (segment
// recreates one that some volumes lack from the others).
func (r *recovery) bases(dirs []string) ([]int64, error) {
	bases := make(map[int64]bool)
	for v := range dirs {
		dirs[v] = r.s.topicDir(v, r.name)
		if err := r.listDir(v, dirs[v], bases); err != nil {
			return nil, err
		}
	}
	sorted := make([]int64, 0, len(bases))
	for b := range bases {
		sorted = append(sorted, b)
	}
	slices.Sort(sorted)
	return sorted, nil
}

// listDir adds the segment bases in dir, the topic's directory on volume v,
// to bases. A missing directory is recreated (and its parent fsynced) so the
// segments of the other volumes can be copied into it; leftover temporary
// files are removed.
func (r *recovery) listDir(v int, dir string, bases map[int64]bool) error {
	s := r.s
	ents, err := s.fs.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := s.fs.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("storage: topic %q: recreate directory on %s: %w", r.name, s.opts.Volumes[v], err)
		}
		if err := s.fs.SyncDir(filepath.Dir(dir)); err != nil {
			return fmt.Errorf("storage: topic %q: %w", r.name, err)
		}
		r.repaired(v, "missing topic directory", 0)
		return nil
	}
	if err != nil {
		return fmt.Errorf("storage: topic %q: %w", r.name, err)
	}
	for _, e := range ents {
		if base, ok := parseSegmentName(e.Name()); ok {
			bases[base] = true
		} else if strings.HasSuffix(e.Name(), tmpSuffix) {
			// An interrupted durable write; the file it replaces is intact.
			if err := s.fs.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("storage: topic %q: %w", r.name, err)
			}
		}
	}
	return nil
}

// segments recovers the segments at bases, in order, into t.segs, and
// returns the offset after the last one (-1 if there is none). A hole
// between two segments (a whole segment lost on every volume) becomes an
// unreadable range; segments that overlap are a layout no crash makes.
func (r *recovery) segments(t *topic, dirs []string, bases []int64) (int64, error) {
	s := r.s
	off := int64(-1)
	for i, base := range bases {
		if off >= 0 && base < off {
			return 0, fmt.Errorf("%w: topic %q: segment %d starts before the previous one ends (%d)", ErrCorruptLayout, r.name, base, off)
		}
		if off >= 0 && base > off {
			t.bad = append(t.bad, offRange{off, base})
			s.stats.unreadable.Add(1)
			s.opts.Logger.Error("offsets unreadable: corrupted on every volume", "topic", r.name, "from", off, "to", base)
		}
		seg, bad, err := r.segment(dirs, base, i == len(bases)-1)
		if err != nil {
			return 0, err
		}
		t.bad = append(t.bad, bad...)
		t.segs = append(t.segs, seg)
		off = seg.next
	}
	return off, nil
}

// meta reads the start offset from the meta files, taking the largest
// valid one (truncation only moves it forward), and writes it back to the
// volumes whose copy is missing or different.
func (r *recovery) meta(dirs []string) (int64, error) {
	var start int64
	found := false
	have := make([][]byte, len(dirs))
	for v, dir := range dirs {
		b, err := r.readSmall(filepath.Join(dir, metaName), metaSize)
		if err != nil {
			return 0, err
		}
		have[v] = b
		if m, ok := decodeMeta(b); ok {
			start = max(start, m)
			found = true
		}
	}
	if !found {
		return 0, nil
	}
	want := encodeMeta(start)
	for v, dir := range dirs {
		if !bytes.Equal(have[v], want) {
			if err := r.s.writeFileDurable(filepath.Join(dir, metaName), want); err != nil {
				return 0, fmt.Errorf("storage: topic %q: %w", r.name, err)
			}
			r.repaired(v, "meta file", metaSize)
		}
	}
	return start, nil
}

// readSmall reads a whole small file; nil if it does not exist or is larger
// than max (in which case it is invalid anyway).
func (r *recovery) readSmall(path string, max int64) ([]byte, error) {
	f, err := r.s.fs.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("storage: topic %q: %w", r.name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("storage: topic %q: %w", r.name, err)
	}
	if fi.Size() > max {
		return []byte{}, nil
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("storage: topic %q: %w", r.name, err)
	}
	return b, nil
}

// segment recovers one segment across all volumes: batch by batch, the
// copy of the last volume holding a valid batch at that position with the
// expected base offset is the reference, and every other volume is made
// identical to it. Runs of bytes no volume holds a valid copy of become
// unreadable ranges; a tail that is invalid everywhere is cut (only in the
// last segment, the only one a crash can tear).
func (r *recovery) segment(dirs []string, base int64, last bool) (seg *segment, bad []offRange, err error) {
	n := len(dirs)
	r.files = make([]File, n)
	r.sizes = make([]int64, n)
	r.dirty = make([]bool, n)
	// Nothing stays open: the first append reopens the last segment
	// within the file budget, so opening any number of topics holds at
	// most one segment's files at a time.
	defer func() {
		for _, f := range r.files {
			if f != nil {
				f.Close()
			}
		}
	}()
	created, err := r.openSegment(dirs, base)
	if err != nil {
		return nil, nil, err
	}
	copied := make([]int64, n)
	seg, bad, err = r.scan(base, copied, last)
	if err != nil {
		return nil, nil, err
	}
	for v := range n {
		if err := r.settle(v, dirs[v], seg, last, created[v], copied[v]); err != nil {
			return nil, nil, err
		}
	}
	if err := r.index(dirs, seg, last); err != nil {
		return nil, nil, err
	}
	return seg, bad, nil
}

// openSegment opens (creating where missing) the log of segment base on
// every volume into r.files, with its size in r.sizes, and reports which
// volumes had to create it: those need their directory fsynced once
// repaired. Files opened before an error are left in r.files to be closed.
func (r *recovery) openSegment(dirs []string, base int64) (created []bool, err error) {
	s := r.s
	created = make([]bool, len(dirs))
	for v, dir := range dirs {
		path := filepath.Join(dir, segmentName(base, logSuffix))
		if _, err := s.fs.Stat(path); errors.Is(err, fs.ErrNotExist) {
			created[v] = true
		}
		f, err := s.fs.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("storage: topic %q: open segment on %s: %w", r.name, s.opts.Volumes[v], err)
		}
		r.files[v] = f
		fi, err := f.Stat()
		if err != nil {
			return nil, fmt.Errorf("storage: topic %q: %w", r.name, err)
		}
		r.sizes[v] = fi.Size()
	}
	return created, nil
}

// scan walks the open segment base batch by batch up to the end of its
// longest copy, copying each reference batch to the volumes that lack it
// (counting the bytes written per volume in copied) and skipping runs no
// volume holds a valid copy of, which it returns as unreadable ranges. It
// stops at the first position nothing valid follows on any volume: the
// returned segment's size and next offset end there. In the last segment
// it also stops where a tail the last volume lacks cannot be copied for
// want of space (dropTail).
func (r *recovery) scan(base int64, copied []int64, last bool) (seg *segment, bad []offRange, err error) {
	s := r.s
	seg = &segment{base: base, next: base}
	maxSize := slices.Max(r.sizes)
	p, off := int64(0), base
	for p < maxSize {
		if src, bt := r.find(p, off, off); src >= 0 {
			raw := r.bufs[src][:len(bt.Raw)]
			if err := r.replicate(src, p, raw, copied); err != nil {
				if !r.unacknowledged(last, src, p, len(raw), err) {
					return nil, nil, err
				}
				if err := r.dropTail(base, p, off, maxSize, err); err != nil {
					return nil, nil, err
				}
				break
			}
			seg.entries = append(seg.entries, entry{off: off, pos: uint32(p), size: uint32(len(raw)), count: uint32(bt.Count)})
			if bt.ProducerID != 0 {
				// The idempotent producers' table is rebuilt from the
				// batches as they are read, in log order.
				o := &s.opts
				r.t.producers.record(bt.ProducerID, bt.Sequence, off, bt.Count, "", bt.AppendTime, o.ProducerIdle, o.MaxProducers)
			}
			off += int64(bt.Count)
			seg.messages += int64(bt.Count)
			seg.lastTime = bt.AppendTime
			p += int64(len(raw))
			continue
		}
		q, nb, err := r.resync(p, off)
		if err != nil {
			return nil, nil, err
		}
		if q < 0 {
			break // nothing valid follows on any volume
		}
		bad = append(bad, offRange{off, nb})
		s.stats.unreadable.Add(1)
		s.opts.Logger.Error("offsets unreadable: corrupted on every volume", "topic", r.name,
			"segment", base, "position", p, "bytes", q-p, "from", off, "to", nb)
		off, p = nb, q
	}
	seg.size = p
	seg.next = off
	return seg, bad, nil
}

// replicate makes every volume but src hold raw, src's batch, at p, adding
// the bytes written to each volume to copied.
func (r *recovery) replicate(src int, p int64, raw []byte, copied []int64) error {
	for v := range r.files {
		if v != src {
			c, err := r.ensure(v, p, raw)
			if err != nil {
				return err
			}
			copied[v] += c
		}
	}
	return nil
}

// unacknowledged reports whether a batch of len n at p that could not be
// copied to every volume (err) is an unacknowledged tail that recovery may
// drop rather than fail: the copy failed for space, in the last segment
// (the only one appends extend), and the last volume does not hold the
// batch and nothing past its end (it ends before the batch does), while
// an earlier one does. Volumes are written in order and a batch is
// acknowledged only once the last one has it, so such a batch was in
// flight at a crash. A batch that an earlier volume lacks while the last
// one holds it was acknowledged and lost to damage: its copy failing is
// an error.
func (r *recovery) unacknowledged(last bool, src int, p int64, n int, err error) bool {
	lastVol := len(r.files) - 1
	return last && noSpaceErr(err) && src != lastVol && r.sizes[lastVol] < p+int64(n)
}

// dropTail cuts every volume's copy of the last segment base back to p,
// the longest prefix all of them hold, because the tail from p (offsets
// from off on, an unacknowledged batch or more, see unacknowledged) could
// not be copied to every volume for want of space (why): starting
// without it makes the disk no fuller, while copying it would need the
// space the disk lacks. Logged and counted in Stats.DroppedTailBytes.
func (r *recovery) dropTail(base, p, off, end int64, why error) error {
	s := r.s
	for v, f := range r.files {
		if err := f.Truncate(p); err != nil {
			return fmt.Errorf("storage: topic %q: cut unreplicated tail on %s: %w", r.name, s.opts.Volumes[v], err)
		}
		if r.sizes[v] > p {
			s.stats.truncatedBytes.Add(r.sizes[v] - p)
		}
		r.sizes[v] = p
		r.dirty[v] = true
	}
	s.stats.droppedTails.Add(1)
	s.stats.droppedTailBytes.Add(end - p)
	s.opts.Logger.Error("unacknowledged tail dropped: no space to copy it to every volume", "topic", r.name,
		"segment", base, "position", p, "bytes", end-p, "from", off, "err", why)
	return nil
}

// settle finishes volume v's copy of the scanned segment seg, whose
// directory is dir: it cuts the invalid tail past seg.size in the last
// segment (a sealed segment's is logged and left alone, no crash tears
// one), reports the repairs, and fsyncs the log if it was written to or
// created, then the directory if it was created, so the repair is durable
// before the topic opens.
func (r *recovery) settle(v int, dir string, seg *segment, last, created bool, copied int64) error {
	s := r.s
	p := seg.size
	if r.sizes[v] > p && last {
		if err := r.files[v].Truncate(p); err != nil {
			return fmt.Errorf("storage: topic %q: truncate torn tail on %s: %w", r.name, s.opts.Volumes[v], err)
		}
		s.stats.truncatedBytes.Add(r.sizes[v] - p)
		r.repaired(v, "torn tail cut", 0, "segment", seg.base, "cut", r.sizes[v]-p)
		r.sizes[v] = p
		r.dirty[v] = true
	} else if r.sizes[v] > p {
		s.opts.Logger.Error("invalid bytes at the end of a sealed segment left in place", "topic", r.name,
			"volume", s.opts.Volumes[v], "segment", seg.base, "position", p, "bytes", r.sizes[v]-p)
	}
	if copied > 0 || (created && p > 0) {
		r.repaired(v, "segment data", copied, "segment", seg.base, "created", created)
	}
	if r.dirty[v] || created {
		if err := r.files[v].Sync(); err != nil {
			return fmt.Errorf("storage: topic %q: fsync repaired segment on %s: %w", r.name, s.opts.Volumes[v], err)
		}
	}
	if created {
		if err := s.fs.SyncDir(dir); err != nil {
			return fmt.Errorf("storage: topic %q: %w", r.name, err)
		}
	}
	return nil
}

// index makes every volume's index file of seg match its log; the active
// segment's index may be missing (it is written when sealed).
func (r *recovery) index(dirs []string, seg *segment, last bool) error {
	want := appendIndex(nil, seg.base, seg.entries)
	for v, dir := range dirs {
		path := filepath.Join(dir, segmentName(seg.base, idxSuffix))
		have, err := r.readSmall(path, int64(len(want)))
		if err != nil {
			return err
		}
		if bytes.Equal(have, want) && (have != nil || last) {
			continue
		}
		if have == nil && last {
			continue
		}
		if err := r.s.writeFile(path, want); err != nil {
			// The index is derived from the log, which recovery has just
			// read: without it the topic serves all the same (a later
			// open writes it), so a full disk does not stop start-up.
			r.logger().Warn("index not rebuilt; serving without it", "topic", r.name, "volume", r.s.opts.Volumes[v], "segment", seg.base, "err", err)
			continue
		}
		if have == nil {
			// Indexes are written after a burst of appends (indexDelay):
			// one missing after a crash is expected, not damage.
			r.logger().Info("index written from log", "topic", r.name, "volume", r.s.opts.Volumes[v], "segment", seg.base)
			continue
		}
		r.repaired(v, "index rebuilt from log", int64(len(want)), "segment", seg.base)
	}
	return nil
}

// find returns the last volume holding a valid batch at p whose base offset
// is in [lo, hi], and the batch (read into r.bufs[volume]); -1 if none.
func (r *recovery) find(p, lo, hi int64) (int, protocol.Batch) {
	for v := len(r.files) - 1; v >= 0; v-- {
		if bt, ok := r.readBatch(v, p); ok && bt.BaseOffset >= lo && bt.BaseOffset <= hi && bt.BaseOffset <= math.MaxInt64-int64(bt.Count) {
			return v, bt
		}
	}
	return -1, protocol.Batch{}
}

// readBatch reads and validates the batch at p of volume v into r.bufs[v].
func (r *recovery) readBatch(v int, p int64) (protocol.Batch, bool) {
	if r.sizes[v]-p < protocol.MinBatchHeaderSize {
		return protocol.Batch{}, false
	}
	buf := r.grow(v, protocol.MinBatchHeaderSize)
	if !r.readAt(v, buf, p) {
		return protocol.Batch{}, false
	}
	size := protocol.BatchSize(buf)
	if size < protocol.MinBatchHeaderSize || size > int64(r.s.opts.MaxBatchBytes) || p+size > r.sizes[v] {
		return protocol.Batch{}, false
	}
	buf = r.grow(v, int(size))
	if !r.readAt(v, buf, p) {
		return protocol.Batch{}, false
	}
	bt, _, err := protocol.ParseBatchLimit(buf, r.s.opts.MaxBatchBytes)
	if err != nil || bt.Validate() != nil {
		return protocol.Batch{}, false
	}
	return bt, true
}

// readAt fills buf from volume v at p; a read error counts as an invalid copy
// (another volume may hold a good one) and is logged.
func (r *recovery) readAt(v int, buf []byte, p int64) bool {
	n, err := r.files[v].ReadAt(buf, p)
	if n == len(buf) {
		return true
	}
	if err != nil && !errors.Is(err, io.EOF) {
		r.logger().Error("read error during recovery", "topic", r.name, "volume", r.s.opts.Volumes[v], "position", p, "err", err)
	}
	return false
}

func (r *recovery) grow(v, n int) []byte {
	if cap(r.bufs[v]) < n {
		r.bufs[v] = make([]byte, n)
	}
	return r.bufs[v][:n]
}

// ensure makes volume v hold raw at p, returning the bytes it had to write.
func (r *recovery) ensure(v int, p int64, raw []byte) (int64, error) {
	if r.sizes[v] >= p+int64(len(raw)) {
		have := r.grow(v, len(raw))
		if r.readAt(v, have, p) && bytes.Equal(have, raw) {
			return 0, nil
		}
	}
	if _, err := r.files[v].WriteAt(raw, p); err != nil {
		return 0, fmt.Errorf("storage: topic %q: repair volume %s: %w", r.name, r.s.opts.Volumes[v], err)
	}
	r.dirty[v] = true
	r.sizes[v] = max(r.sizes[v], p+int64(len(raw)))
	return int64(len(raw)), nil
}

// resyncWindow is how much of a segment is scanned at a time when looking
// for the next valid batch after corruption.
const resyncWindow = 1 << 20

// resync looks for the first position q > p where some volume holds a valid
// batch with a base offset above off: the end of a corrupted run. It first
// trusts the corrupted batch's length field, then scans byte by byte. It
// returns q = -1 when nothing valid follows.
func (r *recovery) resync(p, off int64) (q, nextOff int64, err error) {
	for v := len(r.files) - 1; v >= 0; v-- {
		if r.sizes[v]-p < 4 {
			continue
		}
		hdr := r.grow(v, 4)
		if !r.readAt(v, hdr, p) {
			continue
		}
		if l := protocol.BatchSize(hdr); l >= protocol.MinBatchHeaderSize && l <= int64(r.s.opts.MaxBatchBytes) {
			// Every message takes at least one byte: the corrupted run
			// [p, p+l) cannot hold more than l messages.
			if src, bt := r.find(p+l, off+1, addCapped(off, l)); src >= 0 {
				return p + l, bt.BaseOffset, nil
			}
		}
	}
	best, bestOff := int64(-1), int64(0)
	window := make([]byte, resyncWindow+protocol.MinBatchHeaderSize)
	for v := len(r.files) - 1; v >= 0; v-- {
		limit := r.sizes[v] - protocol.MinBatchHeaderSize
		if best >= 0 {
			limit = min(limit, best-1)
		}
		for w := p + 1; w <= limit; w += resyncWindow {
			n, rerr := r.files[v].ReadAt(window, w)
			if rerr != nil && !errors.Is(rerr, io.EOF) {
				return 0, 0, fmt.Errorf("storage: topic %q: scan volume %s: %w", r.name, r.s.opts.Volumes[v], rerr)
			}
			found := false
			for i := 0; i+protocol.MinBatchHeaderSize <= n && w+int64(i) <= limit && i < resyncWindow; i++ {
				if !plausibleHeader(window[i:], r.s.opts.MaxBatchBytes) {
					continue
				}
				q := w + int64(i)
				if src, bt := r.find(q, off+1, addCapped(off, q-p)); src >= 0 {
					best, bestOff, found = w+int64(i), bt.BaseOffset, true
					break
				}
			}
			if found {
				break
			}
		}
	}
	return best, bestOff, nil
}

// plausibleHeader is a cheap filter before a full read and CRC check.
func plausibleHeader(b []byte, limit int) bool {
	_, _, err := protocol.ParseBatchLimit(b[:protocol.MinBatchHeaderSize], limit)
	return errors.Is(err, protocol.ErrShortBatch) || err == nil
}

// addCapped returns a+b for b >= 0, or math.MaxInt64 when that overflows.
func addCapped(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
