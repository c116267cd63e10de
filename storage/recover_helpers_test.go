package storage

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/haraqa/haraqa/protocol"
)

// The recovery tests' helpers (recover_test.go): write acknowledged
// messages, damage the real files, reopen, and read back what every volume
// serves.

const recTopic = "rec"

// testLogger sends the store's logs (repairs, unreadable ranges) to the
// test log, so a failing test shows what recovery did.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlogWriter{t}, nil))
}

type tlogWriter struct{ t testing.TB }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// recOpts returns options for n fresh volumes with 10-message segments.
func recOpts(t testing.TB, n int) Options {
	t.Helper()
	vols := make([]string, n)
	for i := range vols {
		vols[i] = t.TempDir()
	}
	opts := DefaultOptions(vols...)
	opts.Entries = 10
	opts.Logger = testLogger(t)
	return opts
}

// mustOpen opens a store and closes it when the test ends.
func mustOpen(t testing.TB, opts Options) *Store {
	t.Helper()
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustClose(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// batchSizes are the message counts of the batches populate appends, in a
// cycle, so segments end at varied offsets and batches have varied sizes.
var batchSizes = []int{1, 3, 2, 5, 1, 4, 2, 7}

// populate appends about n messages to topic (created if needed) in batches
// of varying sizes and returns them, indexed by offset from first.
func populate(t testing.TB, s *Store, topic string, first int64, n int) [][]byte {
	t.Helper()
	if err := s.CreateTopic(topic); err != nil && !errors.Is(err, ErrTopicExists) {
		t.Fatal(err)
	}
	var want [][]byte
	for i := 0; len(want) < n; i++ {
		m := msgs(int(first)+len(want), batchSizes[i%len(batchSizes)])
		base, err := lg(t, s, topic).Append(protocol.AppendBatch(nil, m...), AppendOptions{})
		if err != nil {
			t.Fatalf("append: %v", err)
		}
		if want := first + int64(len(want)); base != want {
			t.Fatalf("append got base %d, want %d", base, want)
		}
		want = append(want, m...)
	}
	return want
}

// readBack is what scan found in a topic.
type readBack struct {
	oldest, next int64
	msgs         map[int64][]byte
	unreadable   []offRange // where Read returned ErrUnreadable
}

// badRanges returns the topic's unreadable ranges as the store knows them.
func badRanges(t testing.TB, s *Store, topic string) []offRange {
	t.Helper()
	s.mu.RLock()
	tp := s.topics[topic]
	s.mu.RUnlock()
	if tp == nil {
		t.Fatalf("topic %q not open", topic)
	}
	tp.mu.RLock()
	defer tp.mu.RUnlock()
	return slices.Clone(tp.bad)
}

// scan reads the whole topic from its oldest offset to its next one and
// checks everything served: every batch parses, has a valid CRC and
// well-formed messages, and base offsets are dense and increasing. Where
// Read returns ErrUnreadable it jumps to the end of the store's unreadable
// range holding that offset (failing if there is none).
func scan(t testing.TB, s *Store, topic string) readBack {
	t.Helper()
	info, err := lg(t, s, topic).Info()
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	if info.Oldest < 0 || info.Next < info.Oldest {
		t.Fatalf("info %+v: want 0 <= oldest <= next", info)
	}
	rb := readBack{oldest: info.Oldest, next: info.Next, msgs: make(map[int64][]byte)}
	off := info.Oldest
	for off < info.Next {
		r, err := lg(t, s, topic).Read(off, 0, 4<<10)
		if errors.Is(err, ErrUnreadable) {
			to := int64(-1)
			for _, br := range badRanges(t, s, topic) {
				if br.from <= off && off < br.to {
					to = br.to
				}
			}
			if to < 0 {
				t.Fatalf("read %d: %v, but the offset is in no unreadable range %v", off, err, badRanges(t, s, topic))
			}
			if n := len(rb.unreadable); n > 0 && rb.unreadable[n-1].to == off {
				rb.unreadable[n-1].to = to
			} else {
				rb.unreadable = append(rb.unreadable, offRange{off, to})
			}
			off = to
			continue
		}
		if err != nil {
			t.Fatalf("read %d: %v", off, err)
		}
		if r.Batches == 0 {
			r.Release()
			t.Fatalf("read %d before the end %d returned nothing", off, info.Next)
		}
		b, err := r.AppendTo(nil)
		r.Release()
		if err != nil {
			t.Fatalf("read %d: %v", off, err)
		}
		checkServed(t, b, r, off, rb.msgs)
		off = r.Next
	}
	return rb
}

// checkServed checks the bytes of one read result and records its messages.
func checkServed(t testing.TB, b []byte, r *ReadResult, off int64, into map[int64][]byte) {
	t.Helper()
	if int64(len(b)) != r.Bytes {
		t.Fatalf("read %d: %d bytes, result says %d", off, len(b), r.Bytes)
	}
	cur := r.First
	if cur > off {
		t.Fatalf("read %d: first batch starts at %d, after the offset asked for", off, cur)
	}
	batches := 0
	for len(b) > 0 {
		bt, n, err := protocol.ParseBatch(b)
		if err != nil {
			t.Fatalf("read %d: served bytes do not parse at batch %d: %v", off, batches, err)
		}
		if err := bt.Validate(); err != nil {
			t.Fatalf("read %d: served an invalid batch at %d: %v", off, bt.BaseOffset, err)
		}
		if bt.BaseOffset != cur {
			t.Fatalf("read %d: batch base offset %d, want %d (dense)", off, bt.BaseOffset, cur)
		}
		if batches == 0 && off >= cur+int64(bt.Count) {
			t.Fatalf("read %d: first batch [%d, %d) does not hold it", off, cur, cur+int64(bt.Count))
		}
		err = protocol.Messages(bt.Body, bt.Count, bt.BaseOffset, func(o int64, m []byte) error {
			if prev, ok := into[o]; ok && !bytes.Equal(prev, m) {
				return fmt.Errorf("offset %d served twice with different bytes", o)
			}
			into[o] = append([]byte(nil), m...)
			return nil
		})
		if err != nil {
			t.Fatalf("read %d: %v", off, err)
		}
		cur += int64(bt.Count)
		b = b[n:]
		batches++
	}
	if batches != r.Batches || cur != r.Next {
		t.Fatalf("read %d: %d batches ending at %d, result says %d ending at %d", off, batches, cur, r.Batches, r.Next)
	}
}

// wantMsgs checks that offsets [first, first+len(want)) except those in skip
// read back byte-identical.
func (rb readBack) wantMsgs(t testing.TB, first int64, want [][]byte, skip ...offRange) {
	t.Helper()
next:
	for i, w := range want {
		o := first + int64(i)
		for _, r := range skip {
			if r.from <= o && o < r.to {
				continue next
			}
		}
		got, ok := rb.msgs[o]
		if !ok {
			t.Fatalf("acknowledged offset %d not read back (oldest %d, next %d, unreadable %v)", o, rb.oldest, rb.next, rb.unreadable)
		}
		if !bytes.Equal(got, w) {
			t.Fatalf("offset %d reads back %q, want %q", o, got, w)
		}
	}
}

// topicFiles returns the files of topic's directory on volume vol, except
// temporary ones (*.tmp: the next segment prepared ahead, a durable write in
// progress), which recovery removes.
func topicFiles(t testing.TB, vol, topic string) map[string][]byte {
	t.Helper()
	dir := filepath.Join(vol, topicsDir, topic)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := make(map[string][]byte, len(ents))
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), tmpSuffix) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	return files
}

// diffFiles describes how two sets of files differ; "" if they do not.
func diffFiles(a, b map[string][]byte) string {
	var d []string
	for name, x := range a {
		y, ok := b[name]
		switch {
		case !ok:
			d = append(d, name+" missing")
		case !bytes.Equal(x, y):
			d = append(d, fmt.Sprintf("%s differs (%d and %d bytes)", name, len(x), len(y)))
		}
	}
	for name := range b {
		if _, ok := a[name]; !ok {
			d = append(d, name+" extra")
		}
	}
	slices.Sort(d)
	return strings.Join(d, ", ")
}

// sameVolumes checks that every volume holds byte-identical topic files and
// returns them.
func sameVolumes(t testing.TB, opts Options, topic string) map[string][]byte {
	t.Helper()
	ref := topicFiles(t, opts.Volumes[len(opts.Volumes)-1], topic)
	for _, v := range opts.Volumes[:len(opts.Volumes)-1] {
		if d := diffFiles(ref, topicFiles(t, v, topic)); d != "" {
			t.Fatalf("volume %s differs from the last volume: %s", v, d)
		}
	}
	return ref
}

func segPath(vol, topic string, base int64, suffix string) string {
	return filepath.Join(vol, topicsDir, topic, segmentName(base, suffix))
}

// segBases lists the segment base offsets on a volume.
func segBases(t testing.TB, vol, topic string) []int64 {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(vol, topicsDir, topic))
	if err != nil {
		t.Fatal(err)
	}
	var bases []int64
	for _, e := range ents {
		if b, ok := parseSegmentName(e.Name()); ok {
			bases = append(bases, b)
		}
	}
	slices.Sort(bases)
	return bases
}

// loc is where a batch sits in a segment file.
type loc struct {
	pos, size   int64
	base, count int64
}

// batchLocs parses a valid segment file into its batches.
func batchLocs(t testing.TB, path string) []loc {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var locs []loc
	for p := 0; p < len(b); {
		bt, n, err := protocol.ParseBatch(b[p:])
		if err != nil {
			t.Fatalf("%s at %d: %v", path, p, err)
		}
		locs = append(locs, loc{int64(p), int64(n), bt.BaseOffset, int64(bt.Count)})
		p += n
	}
	return locs
}

// bodyPos is a position in the body of a batch, covered by the CRC.
func (l loc) bodyPos() int64 {
	return l.pos + protocol.MinBatchHeaderSize + (l.size-protocol.MinBatchHeaderSize)/2
}

func (l loc) offsets() offRange { return offRange{l.base, l.base + l.count} }

func truncateFile(t testing.TB, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

func flipByte(t testing.TB, path string, pos int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], pos); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b[:], pos); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t testing.TB, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
}

// fixture is a closed store holding acknowledged messages in several
// segments, ready to be damaged and reopened.
type fixture struct {
	opts  Options
	want  [][]byte          // acknowledged messages, by offset from 0
	files map[string][]byte // topic files as closed, identical on every volume
	bases []int64           // segment bases
}

func newFixture(t testing.TB, vols, n int) *fixture {
	t.Helper()
	opts := recOpts(t, vols)
	s := mustOpen(t, opts)
	want := populate(t, s, recTopic, 0, n)
	mustClose(t, s)
	fx := &fixture{opts: opts, want: want, files: sameVolumes(t, opts, recTopic)}
	fx.bases = segBases(t, fx.vol(-1), recTopic)
	if len(fx.bases) < 4 {
		t.Fatalf("fixture has %d segments, want at least 4", len(fx.bases))
	}
	return fx
}

// vol returns volume i; negative counts from the end.
func (fx *fixture) vol(i int) string {
	if i < 0 {
		i += len(fx.opts.Volumes)
	}
	return fx.opts.Volumes[i]
}

func (fx *fixture) seg(vol int, base int64) string {
	return segPath(fx.vol(vol), recTopic, base, logSuffix)
}

// middle is the base of a sealed segment that is neither first nor last.
func (fx *fixture) middle() int64 { return fx.bases[len(fx.bases)/2] }

func (fx *fixture) active() int64 { return fx.bases[len(fx.bases)-1] }

func (fx *fixture) reopen(t testing.TB) *Store {
	t.Helper()
	return mustOpen(t, fx.opts)
}

// repaired reopens, checks that every acknowledged message reads back and
// that the volumes hold exactly the files written before the damage.
func (fx *fixture) repaired(t testing.TB) *Store {
	t.Helper()
	s := fx.reopen(t)
	st := s.Stats()
	if st.Repairs == 0 {
		t.Errorf("no repair counted: %+v", st)
	}
	if st.UnreadableRanges != 0 {
		t.Errorf("unreadable ranges after a repairable damage: %+v", st)
	}
	rb := scan(t, s, recTopic)
	if rb.oldest != 0 || rb.next != int64(len(fx.want)) || len(rb.unreadable) != 0 {
		t.Fatalf("after repair: oldest %d next %d unreadable %v, want 0, %d, none", rb.oldest, rb.next, rb.unreadable, len(fx.want))
	}
	rb.wantMsgs(t, 0, fx.want)
	// The active segment's index is written at close: a volume refilled
	// from scratch has none while the store is open.
	activeIdx := segmentName(fx.active(), idxSuffix)
	for _, v := range fx.opts.Volumes {
		got := topicFiles(t, v, recTopic)
		if _, ok := got[activeIdx]; !ok {
			got[activeIdx] = fx.files[activeIdx]
		}
		if d := diffFiles(fx.files, got); d != "" {
			t.Fatalf("volume %s not restored: %s", v, d)
		}
	}
	return s
}

// appendMore appends after a reopen and checks the offset and the read back.
func appendMore(t testing.TB, s *Store, topic string) {
	t.Helper()
	info, err := lg(t, s, topic).Info()
	if err != nil {
		t.Fatal(err)
	}
	more := populate(t, s, topic, info.Next, 12)
	scan(t, s, topic).wantMsgs(t, info.Next, more)
}

// reopenClean closes s, reopens and checks that recovery is idempotent:
// nothing more to repair, the same messages readable.
func (fx *fixture) reopenClean(t testing.TB, s *Store) {
	t.Helper()
	before := scan(t, s, recTopic)
	mustClose(t, s)
	s = fx.reopen(t)
	if st := s.Stats(); st.Repairs != 0 {
		t.Fatalf("second reopen repaired again: %+v", st)
	}
	after := scan(t, s, recTopic)
	if after.oldest != before.oldest || after.next != before.next || len(after.msgs) != len(before.msgs) ||
		!slices.Equal(after.unreadable, before.unreadable) {
		t.Fatalf("second reopen: oldest %d next %d %d messages unreadable %v; before: %d %d %d %v",
			after.oldest, after.next, len(after.msgs), after.unreadable,
			before.oldest, before.next, len(before.msgs), before.unreadable)
	}
	for o, m := range before.msgs {
		if !bytes.Equal(after.msgs[o], m) {
			t.Fatalf("second reopen: offset %d changed", o)
		}
	}
	sameVolumes(t, fx.opts, recTopic)
}

func forVolumes(t *testing.T, counts []int, f func(t *testing.T, vols int)) {
	for _, n := range counts {
		t.Run(fmt.Sprintf("vols=%d", n), func(t *testing.T) { f(t, n) })
	}
}
