package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/haraqa/haraqa/protocol"
)

// Recovery tests: write acknowledged messages, close, damage the real files,
// reopen, and check that every acknowledged message that some volume still
// holds reads back byte-identical, that nothing invalid is served, and that
// the volumes are byte-identical again.

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
		base, err := s.Append(topic, protocol.AppendBatch(nil, m...))
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
	info, err := s.Info(topic)
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	if info.Oldest < 0 || info.Next < info.Oldest {
		t.Fatalf("info %+v: want 0 <= oldest <= next", info)
	}
	rb := readBack{oldest: info.Oldest, next: info.Next, msgs: make(map[int64][]byte)}
	off := info.Oldest
	for off < info.Next {
		r, err := s.Read(topic, off, 0, 4<<10)
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
	info, err := s.Info(topic)
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

// (a) The last volume's active segment cut mid-batch.
func TestRecoverTruncatedActiveSegment(t *testing.T) {
	forVolumes(t, []int{1, 3}, func(t *testing.T, vols int) {
		fx := newFixture(t, vols, 45)
		locs := batchLocs(t, fx.seg(-1, fx.active()))
		cut := locs[len(locs)-2] // the next-to-last batch, and everything after it
		truncateFile(t, fx.seg(-1, fx.active()), cut.pos+cut.size/2)
		if vols > 1 {
			s := fx.repaired(t)
			appendMore(t, s, recTopic)
			return
		}
		// One volume: the acknowledged batches from the cut on are gone;
		// the torn tail is cut and appends go on from there.
		s := fx.reopen(t)
		if st := s.Stats(); st.Repairs == 0 || st.TruncatedBytes == 0 {
			t.Errorf("torn tail cut not counted: %+v", st)
		}
		rb := scan(t, s, recTopic)
		if rb.next != cut.base || len(rb.unreadable) != 0 {
			t.Fatalf("next %d unreadable %v, want %d and none", rb.next, rb.unreadable, cut.base)
		}
		rb.wantMsgs(t, 0, fx.want[:cut.base])
		appendMore(t, s, recTopic)
		fx.reopenClean(t, s)
	})
}

// (b) The first volume cut mid-batch, in a sealed and in the active
// segment: refilled from the others.
func TestRecoverTruncatedFirstVolume(t *testing.T) {
	for _, which := range []string{"sealed", "active"} {
		t.Run(which, func(t *testing.T) {
			fx := newFixture(t, 3, 45)
			base := fx.middle()
			if which == "active" {
				base = fx.active()
			}
			locs := batchLocs(t, fx.seg(0, base))
			mid := locs[len(locs)/2]
			truncateFile(t, fx.seg(0, base), mid.pos+mid.size/2)
			s := fx.repaired(t)
			appendMore(t, s, recTopic)
			fx.reopenClean(t, s)
		})
	}
}

// (c) A byte flipped in the middle of a segment of the last volume.
func TestRecoverFlippedByte(t *testing.T) {
	forVolumes(t, []int{1, 3}, func(t *testing.T, vols int) {
		fx := newFixture(t, vols, 45)
		path := fx.seg(-1, fx.middle())
		locs := batchLocs(t, path)
		hit := locs[len(locs)/2]
		flipByte(t, path, hit.bodyPos())
		if vols > 1 {
			s := fx.repaired(t)
			fx.reopenClean(t, s)
			return
		}
		// One volume: that batch is lost, everything else reads back.
		s := fx.reopen(t)
		if st := s.Stats(); st.UnreadableRanges != 1 {
			t.Errorf("stats %+v, want one unreadable range", st)
		}
		rb := scan(t, s, recTopic)
		if !slices.Equal(rb.unreadable, []offRange{hit.offsets()}) {
			t.Fatalf("unreadable %v, want %v", rb.unreadable, hit.offsets())
		}
		rb.wantMsgs(t, 0, fx.want, hit.offsets())
		fx.reopenClean(t, s)
	})
}

// (d) A whole volume directory deleted, lock file included.
func TestRecoverDeletedVolume(t *testing.T) {
	for v := range 3 {
		t.Run(fmt.Sprintf("volume=%d", v), func(t *testing.T) {
			fx := newFixture(t, 3, 45)
			if err := os.RemoveAll(fx.vol(v)); err != nil {
				t.Fatal(err)
			}
			s := fx.repaired(t)
			appendMore(t, s, recTopic)
			fx.reopenClean(t, s)
		})
	}
}

// (e) A volume directory emptied; and one segment file deleted.
func TestRecoverEmptiedVolume(t *testing.T) {
	for _, v := range []int{0, 2} {
		t.Run(fmt.Sprintf("volume=%d", v), func(t *testing.T) {
			fx := newFixture(t, 3, 45)
			ents, err := os.ReadDir(fx.vol(v))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				if err := os.RemoveAll(filepath.Join(fx.vol(v), e.Name())); err != nil {
					t.Fatal(err)
				}
			}
			s := fx.repaired(t)
			appendMore(t, s, recTopic)
		})
	}
	t.Run("segment-file", func(t *testing.T) {
		fx := newFixture(t, 3, 45)
		if err := os.Remove(fx.seg(-1, fx.middle())); err != nil {
			t.Fatal(err)
		}
		s := fx.repaired(t)
		fx.reopenClean(t, s)
	})
}

// (f) Every copy of one batch of a middle segment corrupted: the topic
// opens, those offsets are unreadable, the rest reads back.
func TestRecoverCorruptedEverywhere(t *testing.T) {
	type damage struct {
		name string
		pick func(locs []loc) int // which batch
		do   func(t testing.TB, path string, l loc)
	}
	body := func(t testing.TB, path string, l loc) { flipByte(t, path, l.bodyPos()) }
	length := func(t testing.TB, path string, l loc) { flipByte(t, path, l.pos) } // the low byte of the length field
	baseOff := func(t testing.TB, path string, l loc) { flipByte(t, path, l.pos+4) }
	mid := func(locs []loc) int { return len(locs) / 2 }
	for _, d := range []damage{
		{"body", mid, body},
		{"length", mid, length},
		{"base-offset", mid, baseOff},
		{"first-batch", func([]loc) int { return 0 }, body},
		{"last-batch", func(locs []loc) int { return len(locs) - 1 }, body},
	} {
		t.Run(d.name, func(t *testing.T) {
			forVolumes(t, []int{1, 3}, func(t *testing.T, vols int) {
				fx := newFixture(t, vols, 45)
				locs := batchLocs(t, fx.seg(-1, fx.middle()))
				hit := locs[d.pick(locs)]
				for v := range vols {
					d.do(t, fx.seg(v, fx.middle()), hit)
				}
				s := fx.reopen(t)
				if st := s.Stats(); st.UnreadableRanges == 0 {
					t.Errorf("stats %+v, want an unreadable range", st)
				}
				for o := hit.base; o < hit.base+hit.count; o++ {
					if _, err := s.Read(recTopic, o, 0, 0); !errors.Is(err, ErrUnreadable) {
						t.Fatalf("read %d: %v, want ErrUnreadable", o, err)
					}
				}
				rb := scan(t, s, recTopic)
				if rb.oldest != 0 || rb.next != int64(len(fx.want)) || !slices.Equal(rb.unreadable, []offRange{hit.offsets()}) {
					t.Fatalf("oldest %d next %d unreadable %v, want 0, %d, %v", rb.oldest, rb.next, rb.unreadable, len(fx.want), hit.offsets())
				}
				rb.wantMsgs(t, 0, fx.want, hit.offsets())
				// A read from before the hole stops before it.
				if hit.base > 0 {
					r, err := s.Read(recTopic, hit.base-1, 0, 0)
					if err != nil {
						t.Fatal(err)
					}
					if r.Next != hit.base {
						t.Fatalf("read before the hole ends at %d, want %d", r.Next, hit.base)
					}
					r.Release()
				}
				sameVolumes(t, fx.opts, recTopic)
				appendMore(t, s, recTopic)
				fx.reopenClean(t, s)
			})
		})
	}
}

// (g) A crash mid-write leaves a torn tail on some volumes: it is cut (or,
// when it is a whole valid batch, kept and copied) and appends continue at
// the right offset.
func TestRecoverTornTail(t *testing.T) {
	garbage := make([]byte, 300)
	rand.NewChaCha8([32]byte{1}).Read(garbage)
	type tail struct {
		name  string
		vol   int
		data  func(next int64) []byte
		added int64 // messages the tail adds
	}
	nextBatch := func(next int64) []byte {
		b := protocol.AppendBatch(nil, []byte("unacknowledged-1"), []byte("unacknowledged-2"))
		protocol.StampBatch(b, next, 1)
		return b
	}
	for _, tc := range []tail{
		{"garbage-last", -1, func(int64) []byte { return garbage }, 0},
		{"garbage-first", 0, func(int64) []byte { return garbage }, 0},
		{"half-batch-first", 0, func(n int64) []byte { b := nextBatch(n); return b[:len(b)/2] }, 0},
		{"half-batch-last", -1, func(n int64) []byte { b := nextBatch(n); return b[:len(b)-1] }, 0},
		{"header-only", 0, func(n int64) []byte { return nextBatch(n)[:protocol.MinBatchHeaderSize-3] }, 0},
		{"whole-batch-first", 0, nextBatch, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forVolumes(t, []int{1, 3}, func(t *testing.T, vols int) {
				if vols == 1 && tc.vol == 0 && tc.name != "whole-batch-first" {
					t.Skip("same as the last volume")
				}
				fx := newFixture(t, vols, 45)
				next := int64(len(fx.want))
				appendFile(t, fx.seg(tc.vol, fx.active()), tc.data(next))
				s := fx.reopen(t)
				st := s.Stats()
				if st.Repairs == 0 && (vols > 1 || tc.added == 0) {
					t.Errorf("no repair counted: %+v", st)
				}
				if tc.added == 0 && st.TruncatedBytes == 0 {
					t.Errorf("torn tail not counted: %+v", st)
				}
				rb := scan(t, s, recTopic)
				if rb.next != next+tc.added || len(rb.unreadable) != 0 {
					t.Fatalf("next %d unreadable %v, want %d, none", rb.next, rb.unreadable, next+tc.added)
				}
				rb.wantMsgs(t, 0, fx.want)
				sameVolumes(t, fx.opts, recTopic)
				appendMore(t, s, recTopic)
				fx.reopenClean(t, s)
			})
		})
	}
}

// (h) A reopen after a clean close repairs nothing.
func TestRecoverCleanReopen(t *testing.T) {
	forVolumes(t, []int{1, 3}, func(t *testing.T, vols int) {
		opts := recOpts(t, vols)
		s := mustOpen(t, opts)
		want := populate(t, s, recTopic, 0, 45)
		if err := s.CreateTopic("empty"); err != nil {
			t.Fatal(err)
		}
		exact := populate(t, s, "exact", 0, 0) // created, then exactly one full segment
		for range 10 {
			m := msgs(len(exact), 1)
			if _, err := s.Append("exact", protocol.AppendBatch(nil, m...)); err != nil {
				t.Fatal(err)
			}
			exact = append(exact, m...)
		}
		populate(t, s, "cut", 0, 30)
		if err := s.Truncate("cut", 15); err != nil {
			t.Fatal(err)
		}
		mustClose(t, s)
		for round := range 2 {
			s = mustOpen(t, opts)
			if st := s.Stats(); st.Repairs != 0 || st.UnreadableRanges != 0 || st.TruncatedBytes != 0 {
				t.Fatalf("round %d: clean reopen repaired: %+v", round, st)
			}
			if got := s.ListTopics(""); !slices.Equal(got, []string{"cut", "empty", "exact", recTopic}) {
				t.Fatalf("topics %v", got)
			}
			scan(t, s, recTopic).wantMsgs(t, 0, want)
			scan(t, s, "exact").wantMsgs(t, 0, exact)
			if info, err := s.Info("empty"); err != nil || info != (TopicInfo{}) {
				t.Fatalf("empty topic: %+v %v", info, err)
			}
			if info, err := s.Info("cut"); err != nil || info.Oldest != 15 {
				t.Fatalf("truncated topic: %+v %v", info, err)
			}
			mustClose(t, s)
		}
	})
}

// (i) Truncation survives a reopen, and a damaged meta file is repaired.
func TestRecoverTruncated(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before int64 // passed to Truncate
		oldest int64 // expected
	}{
		{"mid-segment", 15, 15},
		{"segment-boundary", -1, -1}, // the base of the second-to-last segment
		{"past-the-end", 1 << 40, 45},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forVolumes(t, []int{1, 3}, func(t *testing.T, vols int) {
				opts := recOpts(t, vols)
				s := mustOpen(t, opts)
				want := populate(t, s, recTopic, 0, 45)
				before, oldest := tc.before, tc.oldest
				if before < 0 {
					bases := segBases(t, opts.Volumes[0], recTopic)
					before, oldest = bases[len(bases)-2], bases[len(bases)-2]
				}
				if oldest == 45 {
					oldest = int64(len(want))
				}
				if err := s.Truncate(recTopic, before); err != nil {
					t.Fatal(err)
				}
				check := func(s *Store) {
					t.Helper()
					rb := scan(t, s, recTopic)
					if rb.oldest != oldest || rb.next != int64(len(want)) {
						t.Fatalf("oldest %d next %d, want %d %d", rb.oldest, rb.next, oldest, len(want))
					}
					rb.wantMsgs(t, oldest, want[oldest:])
					if _, err := s.Read(recTopic, oldest-1, 0, 0); !errors.Is(err, ErrOffsetOutOfRange) {
						t.Fatalf("read before the oldest: %v, want ErrOffsetOutOfRange", err)
					}
				}
				check(s)
				mustClose(t, s)
				s = mustOpen(t, opts)
				if st := s.Stats(); st.Repairs != 0 {
					t.Errorf("reopen after truncate repaired: %+v", st)
				}
				check(s)
				mustClose(t, s)
				if vols == 1 {
					return
				}
				// Damage the meta file on the last volume: repaired from the others.
				meta := filepath.Join(opts.Volumes[vols-1], topicsDir, recTopic, metaName)
				if _, err := os.Stat(meta); err != nil {
					return // truncated at a segment boundary: no meta file
				}
				flipByte(t, meta, 6)
				s = mustOpen(t, opts)
				if st := s.Stats(); st.Repairs == 0 {
					t.Errorf("damaged meta file not repaired: %+v", st)
				}
				check(s)
				sameVolumes(t, opts, recTopic)
			})
		})
	}
}

// (j) Index files deleted, cut, corrupted or grown are rebuilt from the log.
func TestRecoverIndex(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t testing.TB, path string)
	}{
		{"deleted", func(t testing.TB, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}},
		{"cut", func(t testing.TB, path string) { truncateFile(t, path, indexEntrySize+3) }},
		{"flipped", func(t testing.TB, path string) { flipByte(t, path, indexEntrySize+1) }},
		{"grown", func(t testing.TB, path string) { appendFile(t, path, make([]byte, indexEntrySize)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forVolumes(t, []int{1, 3}, func(t *testing.T, vols int) {
				fx := newFixture(t, vols, 45)
				// A sealed index on the last volume, the first segment's on the
				// first volume, and the active segment's written at close.
				damaged := []string{
					segPath(fx.vol(-1), recTopic, fx.middle(), idxSuffix),
					segPath(fx.vol(0), recTopic, fx.bases[0], idxSuffix),
				}
				if tc.name != "deleted" { // the active index may be missing
					damaged = append(damaged, segPath(fx.vol(0), recTopic, fx.active(), idxSuffix))
				}
				for _, p := range damaged {
					tc.damage(t, p)
				}
				s := fx.reopen(t)
				// A missing index is written without counting a repair:
				// indexes are written after bursts, so a crash leaves some
				// missing. A damaged one is a repair.
				if st := s.Stats(); tc.name == "deleted" && st.Repairs != 0 {
					t.Errorf("stats %+v, want no repair for a missing index", st)
				} else if tc.name != "deleted" && st.Repairs < int64(len(damaged)) {
					t.Errorf("stats %+v, want a repair per damaged index", st)
				}
				rb := scan(t, s, recTopic)
				rb.wantMsgs(t, 0, fx.want)
				for _, p := range damaged {
					got, err := os.ReadFile(p)
					if err != nil {
						t.Fatal(err)
					}
					if want := fx.files[filepath.Base(p)]; !bytes.Equal(got, want) {
						t.Fatalf("%s rebuilt as %x, want %x", p, got, want)
					}
				}
				appendMore(t, s, recTopic)
				mustClose(t, s)
				sameVolumes(t, fx.opts, recTopic)
			})
		})
	}
}

// The active segment's index is checked against the log at open too: one
// that lists batches the log does not hold (after a torn tail) is rewritten.
func TestRecoverIndexMatchesLog(t *testing.T) {
	fx := newFixture(t, 1, 45)
	idx, err := os.ReadFile(segPath(fx.vol(0), recTopic, fx.active(), idxSuffix))
	if err != nil {
		t.Fatal(err)
	}
	locs := batchLocs(t, fx.seg(0, fx.active()))
	if got := len(idx) / indexEntrySize; got != len(locs) {
		t.Fatalf("active index has %d entries, log %d batches", got, len(locs))
	}
	for i, l := range locs {
		rel := binary.LittleEndian.Uint32(idx[i*indexEntrySize:])
		pos := binary.LittleEndian.Uint32(idx[i*indexEntrySize+4:])
		if int64(rel) != l.base-fx.active() || int64(pos) != l.pos {
			t.Fatalf("index entry %d = (%d, %d), want (%d, %d)", i, rel, pos, l.base-fx.active(), l.pos)
		}
	}
	truncateFile(t, fx.seg(0, fx.active()), locs[1].pos)
	s := fx.reopen(t)
	got, err := os.ReadFile(segPath(fx.vol(0), recTopic, fx.active(), idxSuffix))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, idx[:indexEntrySize]) {
		t.Fatalf("active index after the cut: %x, want %x", got, idx[:indexEntrySize])
	}
	scan(t, s, recTopic).wantMsgs(t, 0, fx.want[:locs[1].base])
}

// A segment whose tail is invalid on every volume is cut only when it is
// the last one; a sealed one keeps its bytes and the offsets in between are
// unreadable.
func TestRecoverInvalidTailOfSealedSegment(t *testing.T) {
	fx := newFixture(t, 1, 45)
	path := fx.seg(0, fx.middle())
	locs := batchLocs(t, path)
	last := locs[len(locs)-1]
	truncateFile(t, path, last.pos+last.size-1)
	s := fx.reopen(t)
	rb := scan(t, s, recTopic)
	if !slices.Equal(rb.unreadable, []offRange{last.offsets()}) {
		t.Fatalf("unreadable %v, want %v", rb.unreadable, last.offsets())
	}
	rb.wantMsgs(t, 0, fx.want, last.offsets())
	fx.reopenClean(t, s)
}

// The base offset of a batch is not covered by its CRC. After a batch that
// is corrupted everywhere, recovery resumes at the next valid batch and
// takes its base offset as the end of the unreadable range: a damaged base
// offset near the largest int64 must not make offsets overflow.
func TestRecoverHugeBaseOffset(t *testing.T) {
	opts := recOpts(t, 1)
	dir := filepath.Join(opts.Volumes[0], topicsDir, recTopic)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	seg := fuzzSegment(0, 1, 3)
	seg[len(fuzzSegment(0, 1))+protocol.MinBatchHeaderSize+2] ^= 0x10 // the second batch's body
	seg = append(seg, fuzzSegment(math.MaxInt64-2, 5)...)
	if err := os.WriteFile(filepath.Join(dir, segmentName(0, logSuffix)), seg, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(opts)
	if errors.Is(err, ErrCorruptLayout) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	info, err := s.Info(recTopic)
	if err != nil {
		t.Fatal(err)
	}
	if info.Oldest < 0 || info.Next < info.Oldest {
		t.Fatalf("info %+v: offsets overflowed", info)
	}
	rb := scan(t, s, recTopic)
	rb.wantMsgs(t, 0, msgs(0, 1))
	base, err := s.Append(recTopic, protocol.AppendBatch(nil, []byte("m")))
	if err != nil || base != info.Next || base < 0 {
		t.Fatalf("append: base %d %v, want %d", base, err, info.Next)
	}
}

// TestRecoverNoSpaceForTail: after a kill between the volumes' writes on a
// full disk, the first volume holds a batch the last one lacks, and
// copying it there fails for space. That batch was never acknowledged
// (the last volume is written last), so Open cuts it from every volume
// instead of failing, and counts it; acknowledged messages all read back
// and the topic takes appends at the dropped batch's offset. A copy that
// fails for space while the last volume holds the batch (damage to an
// earlier volume, an acknowledged batch) still fails Open.
func TestRecoverNoSpaceForTail(t *testing.T) {
	for _, vols := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d volumes", vols), func(t *testing.T) {
			fx := newFixture(t, vols, 45)
			next := int64(len(fx.want))
			tail := protocol.AppendBatch(nil, []byte("unacknowledged-1"), []byte("unacknowledged-2"))
			protocol.StampBatch(tail, next, 1)
			appendFile(t, fx.seg(0, fx.active()), tail)
			ffs := newFaultFS()
			ffs.err = syscall.ENOSPC
			ffs.writeAtPrefix = fx.vol(-1) // the last volume is full
			fx.opts.FS = ffs
			s, err := Open(fx.opts)
			if err != nil {
				t.Fatalf("open on a full last volume: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			st := s.Stats()
			if st.DroppedTails != 1 || st.DroppedTailBytes != int64(len(tail)) {
				t.Errorf("dropped %d tails of %d bytes, want 1 of %d", st.DroppedTails, st.DroppedTailBytes, len(tail))
			}
			rb := scan(t, s, recTopic)
			if rb.next != next || len(rb.unreadable) != 0 {
				t.Fatalf("next %d unreadable %v, want %d, none", rb.next, rb.unreadable, next)
			}
			rb.wantMsgs(t, 0, fx.want)
			sameVolumes(t, fx.opts, recTopic)
			ffs.mu.Lock()
			ffs.writeAtPrefix = ""
			ffs.mu.Unlock()
			appendMore(t, s, recTopic)
			fx.reopenClean(t, s)
		})
	}
	t.Run("acknowledged", func(t *testing.T) {
		fx := newFixture(t, 2, 45)
		// The first volume lost its last batches: they are acknowledged.
		p := fx.seg(0, fx.active())
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, fi.Size()/2); err != nil {
			t.Fatal(err)
		}
		ffs := newFaultFS()
		ffs.err = syscall.ENOSPC
		ffs.writeAtPrefix = fx.vol(0)
		fx.opts.FS = ffs
		if s, err := Open(fx.opts); !errors.Is(err, syscall.ENOSPC) {
			if err == nil {
				s.Close()
			}
			t.Fatalf("open with no space to restore acknowledged batches: %v, want ENOSPC", err)
		}
		fx.opts.FS = OSFS{}
		s := mustOpen(t, fx.opts)
		scan(t, s, recTopic).wantMsgs(t, 0, fx.want)
	})
}
