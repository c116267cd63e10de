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

func (r *recovery) topic(name string) (*topic, error) {
	s := r.s
	r.name = name
	n := len(s.opts.Volumes)
	dirs := make([]string, n)
	bases := make(map[int64]bool)
	for v := range n {
		dirs[v] = s.topicDir(v, name)
		ents, err := s.fs.ReadDir(dirs[v])
		if errors.Is(err, fs.ErrNotExist) {
			if err := s.fs.MkdirAll(dirs[v], 0o755); err != nil {
				return nil, fmt.Errorf("storage: topic %q: recreate directory on %s: %w", name, s.opts.Volumes[v], err)
			}
			if err := s.fs.SyncDir(filepath.Dir(dirs[v])); err != nil {
				return nil, fmt.Errorf("storage: topic %q: %w", name, err)
			}
			r.repaired(v, "missing topic directory", 0)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("storage: topic %q: %w", name, err)
		}
		for _, e := range ents {
			if base, ok := parseSegmentName(e.Name()); ok {
				bases[base] = true
			} else if strings.HasSuffix(e.Name(), tmpSuffix) {
				// An interrupted durable write; the file it replaces is intact.
				if err := s.fs.Remove(filepath.Join(dirs[v], e.Name())); err != nil {
					return nil, fmt.Errorf("storage: topic %q: %w", name, err)
				}
			}
		}
	}
	sorted := make([]int64, 0, len(bases))
	for b := range bases {
		sorted = append(sorted, b)
	}
	slices.Sort(sorted)

	t := newTopic(s, name)
	off := int64(-1)
	for i, base := range sorted {
		if off >= 0 && base < off {
			return nil, fmt.Errorf("%w: topic %q: segment %d starts before the previous one ends (%d)", ErrCorruptLayout, name, base, off)
		}
		if off >= 0 && base > off {
			t.bad = append(t.bad, offRange{off, base})
			s.stats.unreadable.Add(1)
			s.opts.Logger.Error("offsets unreadable: corrupted on every volume", "topic", name, "from", off, "to", base)
		}
		seg, bad, err := r.segment(dirs, base, i == len(sorted)-1)
		if err != nil {
			return nil, err
		}
		t.bad = append(t.bad, bad...)
		t.segs = append(t.segs, seg)
		off = seg.next
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
	return t, nil
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
	s := r.s
	n := len(dirs)
	r.files = make([]File, n)
	r.sizes = make([]int64, n)
	r.dirty = make([]bool, n)
	created := make([]bool, n)
	defer func() {
		if err != nil || !last {
			for _, f := range r.files {
				if f != nil {
					f.Close()
				}
			}
		}
	}()
	for v, dir := range dirs {
		path := filepath.Join(dir, segmentName(base, logSuffix))
		if _, err := s.fs.Stat(path); errors.Is(err, fs.ErrNotExist) {
			created[v] = true
		}
		f, err := s.fs.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, nil, fmt.Errorf("storage: topic %q: open segment on %s: %w", r.name, s.opts.Volumes[v], err)
		}
		r.files[v] = f
		fi, err := f.Stat()
		if err != nil {
			return nil, nil, fmt.Errorf("storage: topic %q: %w", r.name, err)
		}
		r.sizes[v] = fi.Size()
	}
	copied := make([]int64, n)
	seg = &segment{base: base, next: base}
	maxSize := slices.Max(r.sizes)
	p, off := int64(0), base
	for p < maxSize {
		if src, bt := r.find(p, off, off); src >= 0 {
			raw := r.bufs[src][:len(bt.Raw)]
			for v := range n {
				if v != src {
					c, err := r.ensure(v, p, raw)
					if err != nil {
						return nil, nil, err
					}
					copied[v] += c
				}
			}
			seg.entries = append(seg.entries, entry{off: off, pos: uint32(p), size: uint32(len(raw)), count: uint32(bt.Count)})
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
	for v := range n {
		if r.sizes[v] > p && last {
			if err := r.files[v].Truncate(p); err != nil {
				return nil, nil, fmt.Errorf("storage: topic %q: truncate torn tail on %s: %w", r.name, s.opts.Volumes[v], err)
			}
			s.stats.truncatedBytes.Add(r.sizes[v] - p)
			r.repaired(v, "torn tail cut", 0, "segment", base, "cut", r.sizes[v]-p)
			r.sizes[v] = p
			r.dirty[v] = true
		} else if r.sizes[v] > p {
			s.opts.Logger.Error("invalid bytes at the end of a sealed segment left in place", "topic", r.name,
				"volume", s.opts.Volumes[v], "segment", base, "position", p, "bytes", r.sizes[v]-p)
		}
		if copied[v] > 0 || (created[v] && p > 0) {
			r.repaired(v, "segment data", copied[v], "segment", base, "created", created[v])
		}
		if r.dirty[v] || created[v] {
			if err := r.files[v].Sync(); err != nil {
				return nil, nil, fmt.Errorf("storage: topic %q: fsync repaired segment on %s: %w", r.name, s.opts.Volumes[v], err)
			}
		}
		if created[v] {
			if err := s.fs.SyncDir(dirs[v]); err != nil {
				return nil, nil, fmt.Errorf("storage: topic %q: %w", r.name, err)
			}
		}
	}
	seg.size = p
	seg.next = off
	if err := r.index(dirs, seg, last); err != nil {
		return nil, nil, err
	}
	if last {
		seg.logs = r.files
	}
	return seg, bad, nil
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
			return fmt.Errorf("storage: topic %q: rebuild index: %w", r.name, err)
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
	if r.sizes[v]-p < protocol.BatchHeaderSize {
		return protocol.Batch{}, false
	}
	buf := r.grow(v, protocol.BatchHeaderSize)
	if !r.readAt(v, buf, p) {
		return protocol.Batch{}, false
	}
	size := protocol.BatchSize(buf)
	if size < protocol.BatchHeaderSize || size > int64(r.s.opts.MaxBatchBytes) || p+size > r.sizes[v] {
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
		if l := protocol.BatchSize(hdr); l >= protocol.BatchHeaderSize && l <= int64(r.s.opts.MaxBatchBytes) {
			// Every message takes at least one byte: the corrupted run
			// [p, p+l) cannot hold more than l messages.
			if src, bt := r.find(p+l, off+1, addCapped(off, l)); src >= 0 {
				return p + l, bt.BaseOffset, nil
			}
		}
	}
	best, bestOff := int64(-1), int64(0)
	window := make([]byte, resyncWindow+protocol.BatchHeaderSize)
	for v := len(r.files) - 1; v >= 0; v-- {
		limit := r.sizes[v] - protocol.BatchHeaderSize
		if best >= 0 {
			limit = min(limit, best-1)
		}
		for w := p + 1; w <= limit; w += resyncWindow {
			n, rerr := r.files[v].ReadAt(window, w)
			if rerr != nil && !errors.Is(rerr, io.EOF) {
				return 0, 0, fmt.Errorf("storage: topic %q: scan volume %s: %w", r.name, r.s.opts.Volumes[v], rerr)
			}
			found := false
			for i := 0; i+protocol.BatchHeaderSize <= n && w+int64(i) <= limit && i < resyncWindow; i++ {
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
	_, _, err := protocol.ParseBatchLimit(b[:protocol.BatchHeaderSize], limit)
	return errors.Is(err, protocol.ErrShortBatch) || err == nil
}

// addCapped returns a+b for b >= 0, or math.MaxInt64 when that overflows.
func addCapped(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
