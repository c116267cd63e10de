package storage

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
)

// Span is a run of whole batches in one segment file of the last volume.
type Span struct {
	File File  // open read-only; valid until the ReadResult is released
	Pos  int64 // position of the first batch in the file
	Len  int64 // bytes
}

// ReadResult is what Read found. Release it when done with its spans.
type ReadResult struct {
	// Offset is the offset asked for, with a negative one resolved against
	// the end and clamped to the oldest offset.
	Offset int64
	// First is the base offset of the first batch returned; it may be
	// before Offset since batches are returned whole. Equal to Offset when
	// the result is empty.
	First int64
	// Next is the offset after the last message returned: the offset to
	// read from next. Equal to Offset when the result is empty.
	Next int64
	// End is the topic's next offset when the read was made.
	End int64
	// Batches and Bytes count what the spans hold.
	Batches int
	Bytes   int64
	// Spans hold the batches in order.
	Spans []Span

	files []*cachedFile
	cache *fileCache
}

// Release gives back the file handles of the spans. The result must not be
// used afterwards. It is safe to call more than once.
func (r *ReadResult) Release() {
	for _, cf := range r.files {
		r.cache.release(cf)
	}
	r.files = nil
	r.Spans = nil
}

// WriteTo copies the batches to w: the copying reader for callers that
// cannot use the spans' files directly.
func (r *ReadResult) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for _, sp := range r.Spans {
		n, err := io.Copy(w, io.NewSectionReader(sp.File, sp.Pos, sp.Len))
		total += n
		if err != nil {
			return total, fmt.Errorf("storage: read segment: %w", err)
		}
		if n != sp.Len {
			return total, fmt.Errorf("storage: read segment: %w", io.ErrUnexpectedEOF)
		}
	}
	return total, nil
}

// AppendTo appends the batches to dst.
func (r *ReadResult) AppendTo(dst []byte) ([]byte, error) {
	start := len(dst)
	dst = append(dst, make([]byte, r.Bytes)...)
	b := dst[start:]
	for _, sp := range r.Spans {
		n, err := sp.File.ReadAt(b[:sp.Len], sp.Pos)
		if int64(n) != sp.Len {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return dst[:start], fmt.Errorf("storage: read segment: %w", err)
		}
		b = b[sp.Len:]
	}
	return dst, nil
}

// Read finds the whole batches that hold the messages [offset, offset+limit)
// of the log, in the last volume, up to maxBytes bytes (but always at
// least one batch, so a consumer can make progress past a large batch).
// limit <= 0 means no count limit; maxBytes <= 0 no byte limit. A negative
// offset counts back from the end (-1 is the last message). An offset
// before the oldest retained message returns ErrOffsetOutOfRange; an offset
// at or past the end returns an empty result. A range corrupted on every
// volume returns ErrUnreadable; a result stops before such a range.
func (l *Log) Read(offset int64, limit int, maxBytes int64) (*ReadResult, error) {
	t, err := l.live()
	if err != nil {
		return nil, err
	}
	// Files are opened under the topic's lock, before any truncation or
	// deletion can remove them, so no retry is needed here.
	return t.read(offset, limit, maxBytes, readConsumer)
}

// ReadReplica is Read for a follower's copy of the log: counted in
// TopicStats.ReplicaReadMessages and ReplicaReadBytes, not as consumed.
func (l *Log) ReadReplica(offset int64, limit int, maxBytes int64) (*ReadResult, error) {
	t, err := l.live()
	if err != nil {
		return nil, err
	}
	return t.read(offset, limit, maxBytes, readReplica)
}

// Peek is Read counted nowhere and without the data: the result's counts
// (Bytes, Batches, Next) with no spans and no file opened. It is the
// server's own look at a range, such as how many bytes a follower has yet
// to copy.
func (l *Log) Peek(offset int64, limit int, maxBytes int64) (*ReadResult, error) {
	t, err := l.live()
	if err != nil {
		return nil, err
	}
	return t.read(offset, limit, maxBytes, readPeek)
}

// readKind is whom a read is for, which decides the counters it adds to.
type readKind uint8

const (
	readConsumer readKind = iota // consumed, consumedBytes
	readReplica                  // replicaRead, replicaReadBytes
	readPeek                     // none, and no file opened
)

// read is Read on t. The whole lookup, and the opening of the files, is
// done under mu (read), so the spans match the files.
func (t *topic) read(offset int64, limit int, maxBytes int64, kind readKind) (*ReadResult, error) {
	r := &ReadResult{cache: t.s.cache}

	t.mu.RLock()
	if t.err != nil && errors.Is(t.err, ErrTopicNotFound) {
		err := t.err
		t.mu.RUnlock()
		return nil, err
	}
	start, next := t.start, t.next
	if offset < 0 {
		offset = max(next+offset, start)
	}
	r.Offset, r.First, r.Next, r.End = offset, offset, offset, next
	if offset < start {
		t.mu.RUnlock()
		return nil, fmt.Errorf("%w: topic %q: offset %d, oldest is %d", ErrOffsetOutOfRange, t.name, offset, start)
	}
	if offset >= next {
		t.mu.RUnlock()
		return r, nil
	}
	want := int64(-1)
	if limit > 0 {
		want = offset + int64(limit)
	}
	spans, cur := t.spansLocked(r, offset, want, maxBytes)
	if r.Batches == 0 {
		t.mu.RUnlock()
		return nil, fmt.Errorf("%w: topic %q: offset %d", ErrUnreadable, t.name, offset)
	}
	r.Next = cur
	if kind == readPeek {
		t.mu.RUnlock()
		return r, nil // the counts only: no file opened
	}
	// Open the files before letting go of t.mu: a deletion renames the
	// topic's directories under it, and truncation's file removals follow
	// its segment list update, so the files opened here are the ones the
	// spans describe.
	if err := t.openSpansLocked(r, spans); err != nil {
		t.mu.RUnlock()
		r.Release()
		return nil, err
	}
	t.mu.RUnlock()
	got := r.Next - r.Offset
	if want >= 0 {
		got = min(r.Next, want) - r.Offset
	}
	switch kind {
	case readConsumer:
		t.consumed.Add(got)
		t.consumedBytes.Add(r.Bytes)
	case readReplica:
		t.replicaRead.Add(got)
		t.replicaReadBytes.Add(r.Bytes)
	}
	return r, nil
}

// segSpan is a run of whole batches in one segment, found under t.mu
// before its file is opened.
type segSpan struct {
	seg      *segment
	pos, len int64
}

// spansLocked finds the batches a read from offset returns: whole batches
// from the one holding offset, contiguous in offsets, before want (< 0: no
// count limit) and within maxBytes (<= 0: no byte limit) but at least one.
// It stops at a gap (a range corrupted on every volume), within a segment
// or between two. It sets r.First, r.Batches and r.Bytes, and returns the
// spans, adjacent batches of a segment merged, and the offset after the
// last batch. No batch found (r.Batches == 0) means offset is in a gap.
// mu must be held (read).
func (t *topic) spansLocked(r *ReadResult, offset, want, maxBytes int64) ([]segSpan, int64) {
	var spans []segSpan
	segs := t.segs
	// The segment holding offset: the last one whose base is <= offset.
	si := sort.Search(len(segs), func(i int) bool { return segs[i].base > offset }) - 1
	cur := offset
	for ; si >= 0 && si < len(segs); si++ {
		seg := segs[si]
		ents := seg.entries
		ei := 0
		if len(spans) == 0 {
			ei = sort.Search(len(ents), func(i int) bool { return ents[i].off > offset }) - 1
			if ei < 0 || ents[ei].end() <= offset {
				break // offset is in a gap: corrupted on every volume
			}
			r.First = ents[ei].off
			cur = ents[ei].off
		}
		for ; ei < len(ents); ei++ {
			e := ents[ei]
			if e.off != cur {
				break // a gap
			}
			if want >= 0 && e.off >= want {
				break
			}
			if maxBytes > 0 && r.Bytes > 0 && r.Bytes+int64(e.size) > maxBytes {
				break
			}
			if n := len(spans); n > 0 && spans[n-1].seg == seg && spans[n-1].pos+spans[n-1].len == int64(e.pos) {
				spans[n-1].len += int64(e.size)
			} else {
				spans = append(spans, segSpan{seg, int64(e.pos), int64(e.size)})
			}
			r.Bytes += int64(e.size)
			r.Batches++
			cur = e.end()
		}
		if ei < len(ents) || (want >= 0 && cur >= want) || (maxBytes > 0 && r.Bytes >= maxBytes) {
			break
		}
		if si+1 < len(segs) && segs[si+1].base != cur {
			break // a gap between segments
		}
	}
	return spans, cur
}

// openSpansLocked opens, through the file cache, the last volume's segment
// file of each span and fills r.Spans and r.files. On error the files
// opened so far stay in r.files for the caller to release. mu must be held
// (read), so that the files opened are the ones the spans describe.
func (t *topic) openSpansLocked(r *ReadResult, spans []segSpan) error {
	last := len(t.s.opts.Volumes) - 1
	dir := t.s.topicDir(last, t.name)
	r.Spans = make([]Span, 0, len(spans))
	for _, sp := range spans {
		cf, err := t.s.cache.acquire(filepath.Join(dir, segmentName(sp.seg.base, logSuffix)))
		if err != nil {
			return fmt.Errorf("storage: topic %q: open segment %d: %w", t.name, sp.seg.base, err)
		}
		r.files = append(r.files, cf)
		r.Spans = append(r.Spans, Span{File: cf.f, Pos: sp.pos, Len: sp.len})
	}
	return nil
}
