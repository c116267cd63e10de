package storage

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// logAndIndexFiles returns the segment logs and indexes of topic on vol.
func logAndIndexFiles(t testing.TB, vol, topic string) map[string][]byte {
	t.Helper()
	files := topicFiles(t, vol, topic)
	for name := range files {
		if !strings.HasSuffix(name, logSuffix) && !strings.HasSuffix(name, idxSuffix) {
			delete(files, name)
		}
	}
	return files
}

// leaderLog appends n messages to topic "r" of a leader store in batches
// of varied sizes, every third one from an idempotent producer, with a
// clock that moves, and returns the store and the stored batches.
func leaderLog(t *testing.T, n int, tweak ...func(*Options)) (*Store, Options, [][]byte) {
	t.Helper()
	clk := newFakeClock()
	leader, opts := openTest(t, 2, append([]func(*Options){func(o *Options) { o.Now = clk.Now }}, tweak...)...)
	if err := leader.CreateTopic("r"); err != nil {
		t.Fatal(err)
	}
	next := 0
	for i := 0; next < n; i++ {
		m := msgs(next, batchSizes[i%len(batchSizes)])
		b := protocol.AppendBatch(nil, m...)
		if i%3 == 0 {
			b = idemBatch(42, uint64(i/3), m...)
		}
		if _, err := lg(t, leader, "r").Append(b, AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		next += len(m)
		clk.Add(time.Second)
	}
	return leader, opts, rawBatches(t, leader, "r", 0)
}

// TestReplicateByteIdentical: a follower that replicates its leader's
// batches, in several calls, holds the leader's bytes: the same segment
// logs and indexes on every volume, the same reads and OffsetAt answers,
// across a restart, under every fsync policy.
func TestReplicateByteIdentical(t *testing.T) {
	for _, policy := range []FsyncPolicy{FsyncNever, FsyncAlways} {
		t.Run(policy.String(), func(t *testing.T) {
			leader, lopts, batches := leaderLog(t, 57, func(o *Options) { o.Fsync = policy })
			follower, fopts := openTest(t, 3, func(o *Options) { o.Fsync = policy; o.Logger = testLogger(t) })
			if err := follower.CreateTopic("r"); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < len(batches); i += 5 {
				chunk := make([][]byte, 0, 5)
				for _, b := range batches[i:min(i+5, len(batches))] {
					chunk = append(chunk, slices.Clone(b))
				}
				next, err := lg(t, follower, "r").Replicate(chunk)
				if err != nil {
					t.Fatalf("replicate from batch %d: %v", i, err)
				}
				if want := baseOf(t, batches[min(i+5, len(batches))-1]) + int64(countOf(t, batches[min(i+5, len(batches))-1])); next != want {
					t.Fatalf("replicate from batch %d: next %d, want %d", i, next, want)
				}
			}
			if got := rawBatches(t, follower, "r", 0); !slices.EqualFunc(got, batches, bytes.Equal) {
				t.Fatal("the follower serves other bytes than the leader")
			}
			for _, at := range []time.Duration{-time.Hour, 3 * time.Second, 10500 * time.Millisecond, time.Hour} {
				at := time.Unix(0, protocol.BatchAppendTime(batches[0])).Add(at)
				w, err1 := lg(t, leader, "r").OffsetAt(at)
				g, err2 := lg(t, follower, "r").OffsetAt(at)
				if err1 != nil || err2 != nil || g != w {
					t.Fatalf("OffsetAt %v: follower %d %v, leader %d %v", at, g, err2, w, err1)
				}
			}
			mustClose(t, leader)
			mustClose(t, follower)
			want := logAndIndexFiles(t, lopts.Volumes[1], "r")
			for _, v := range fopts.Volumes {
				if d := diffFiles(want, logAndIndexFiles(t, v, "r")); d != "" {
					t.Fatalf("volume %s differs from the leader's: %s", v, d)
				}
			}
			follower = mustOpen(t, fopts)
			if st := follower.Stats(); st.Repairs != 0 {
				t.Fatalf("reopen repaired: %+v", st)
			}
			if got := rawBatches(t, follower, "r", 0); !slices.EqualFunc(got, batches, bytes.Equal) {
				t.Fatal("after a restart the follower serves other bytes than the leader")
			}
		})
	}
}

func countOf(t testing.TB, b []byte) int {
	t.Helper()
	bt, _, err := protocol.ParseBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	return bt.Count
}

// TestReplicateRefused: batches not at the next offset, with a gap, a
// corrupt one and a missing topic are refused and nothing is written; no
// batches answers the next offset; append times that go back are kept.
func TestReplicateRefused(t *testing.T) {
	_, _, batches := leaderLog(t, 30)
	f, _ := openTest(t, 2)
	if _, err := f.Log("missing"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("missing topic: %v", err)
	}
	if err := f.CreateTopic("r"); err != nil {
		t.Fatal(err)
	}
	if next, err := lg(t, f, "r").Replicate(slices.Clone(batches[:3])); err != nil || next != baseOf(t, batches[3]) {
		t.Fatalf("first replicate: %d %v", next, err)
	}
	info, _ := lg(t, f, "r").Info()
	if _, err := lg(t, f, "r").Replicate([][]byte{slices.Clone(batches[4])}); !errors.Is(err, ErrOffsetMismatch) {
		t.Fatalf("past the next offset: %v, want ErrOffsetMismatch", err)
	}
	if _, err := lg(t, f, "r").Replicate([][]byte{slices.Clone(batches[2])}); !errors.Is(err, ErrOffsetMismatch) {
		t.Fatalf("before the next offset: %v, want ErrOffsetMismatch", err)
	}
	if _, err := lg(t, f, "r").Replicate([][]byte{slices.Clone(batches[3]), slices.Clone(batches[5])}); !errors.Is(err, ErrInvalidImport) {
		t.Fatalf("a gap: %v, want ErrInvalidImport", err)
	}
	bad := slices.Clone(batches[3])
	bad[len(bad)-1] ^= 1
	if _, err := lg(t, f, "r").Replicate([][]byte{bad}); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("corrupt batch: %v, want ErrInvalidBatch", err)
	}
	if got, _ := lg(t, f, "r").Info(); got != info {
		t.Fatalf("refused replicates wrote: %+v, was %+v", got, info)
	}
	if next, err := lg(t, f, "r").Replicate(nil); err != nil || next != info.Next {
		t.Fatalf("no batches: %d %v, want %d", next, err, info.Next)
	}
	// A leader whose clock stepped back stored times that go back: kept.
	back := [][]byte{slices.Clone(batches[3]), slices.Clone(batches[4])}
	protocol.StampBatch(back[1], baseOf(t, back[1]), protocol.BatchAppendTime(back[0])-int64(time.Minute))
	if _, err := lg(t, f, "r").Replicate(back); err != nil {
		t.Fatalf("times going back: %v", err)
	}
	if got := rawBatches(t, f, "r", baseOf(t, back[0])); !slices.EqualFunc(got, back, bytes.Equal) {
		t.Fatal("times going back not kept as stamped")
	}
}

// TestReplicateIntoAppendedTopic: Replicate goes on a topic that received
// ordinary appends, and an import in progress; into a topic without
// segments its first base becomes the start, kept by a restart.
func TestReplicateIntoAppendedTopic(t *testing.T) {
	leader, _, _ := leaderLog(t, 25) // next 25
	more := populate(t, leader, "r", 25, 15)
	end := 25 + int64(len(more))
	tail := rawBatches(t, leader, "r", 25)

	f, fopts := openTest(t, 2)
	want := populate(t, f, "r", 0, 25) // the same offsets, appended the ordinary way
	next, err := lg(t, f, "r").Replicate(tail)
	if err != nil || next != end {
		t.Fatalf("replicate after appends: %d %v, want %d", next, err, end)
	}
	want = append(want, more...)
	if got := readAll(t, f, "r", 0); !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatal("messages differ after replicating onto appends")
	}

	// A topic being imported takes replicated batches, and stays one.
	if err := f.CreateTopic("imp"); err != nil {
		t.Fatal(err)
	}
	head := rawBatches(t, leader, "r", 0)
	if _, _, err := lg(t, f, "imp").Import(0, slices.Clone(head[:2])); err != nil {
		t.Fatal(err)
	}
	if _, err := lg(t, f, "imp").Replicate(slices.Clone(head[2:4])); err != nil {
		t.Fatalf("replicate into an import: %v", err)
	}

	// No segments: the first base is the start. A follower records the
	// epoch of the first batch before copying it, past the next offset.
	if err := f.CreateTopic("e"); err != nil {
		t.Fatal(err)
	}
	if err := lg(t, f, "e").SetEpoch(3, 25); err != nil {
		t.Fatalf("epoch before the first batch: %v", err)
	}
	if next, err := lg(t, f, "e").Replicate(tail); err != nil || next != end {
		t.Fatalf("replicate into an empty topic: %d %v, want %d", next, err, end)
	}
	mustClose(t, f)
	f = mustOpen(t, fopts)
	if info, err := lg(t, f, "e").Info(); err != nil || info.Oldest != 25 || info.Next != end {
		t.Fatalf("after a restart: %+v %v, want oldest 25 next %d", info, err, end)
	}
	if got := readAll(t, f, "e", 25); !slices.EqualFunc(got, more, bytes.Equal) {
		t.Fatal("messages differ in the topic replicated from empty")
	}
	if found, got, err := lg(t, f, "e").EpochEnd(3); err != nil || found != 3 || got != end {
		t.Fatalf("EpochEnd after a restart: %d %d %v, want 3 %d", found, got, err, end)
	}
}

// TestReplicateProducers: a follower records its leader's idempotent
// batches, so a producer's retry sent to it once it leads is answered
// with the offset the batch got, before and after a restart.
func TestReplicateProducers(t *testing.T) {
	leader, _ := openTest(t, 1)
	if err := leader.CreateTopic("p"); err != nil {
		t.Fatal(err)
	}
	var bases []int64
	for seq := range uint64(5) {
		bases = append(bases, mustAppend(t, leader, "p", idemBatch(7, seq, msgs(int(seq)*2, 2)...)))
	}
	f, fopts := openTest(t, 2)
	if err := f.CreateTopic("p"); err != nil {
		t.Fatal(err)
	}
	if _, err := lg(t, f, "p").Replicate(rawBatches(t, leader, "p", 0)); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		for seq := range uint64(5) {
			if got := mustAppend(t, f, "p", idemBatch(7, seq, msgs(int(seq)*2, 2)...)); got != bases[seq] {
				t.Fatalf("%s: retried seq %d: base %d, want %d", when, seq, got, bases[seq])
			}
		}
		if info, _ := lg(t, f, "p").Info(); info.Next != 10 {
			t.Fatalf("%s: next %d, want 10: a retry was stored", when, info.Next)
		}
	}
	check("replicated")
	mustClose(t, f)
	f = mustOpen(t, fopts)
	check("reopened")
	if got := mustAppend(t, f, "p", idemBatch(7, 5, msgs(10, 1)...)); got != 10 {
		t.Fatalf("next sequence: base %d, want 10", got)
	}
}

// cutCase is a TruncateAfter on the populate fixture: batches 0(1) 1(3)
// 4(2) 6(5) | 11(1) 12(4) 16(2) 18(7) | 25(1) 26(3) 29(2) 31(5) | 36(1)
// 37(4) 41(2) 43(7) | 50(1) 51(3) 54(2) 56(5), "|" a segment boundary.
type cutCase struct {
	name         string
	truncate     int64 // Truncate first, when > 0
	offset       int64
	next, oldest int64
	segs         []int64 // segment bases left
}

var cutCases = []cutCase{
	{name: "boundary", offset: 29, next: 29, segs: []int64{0, 11, 25}},
	{name: "mid-batch", offset: 33, next: 31, segs: []int64{0, 11, 25}},
	{name: "segment-base", offset: 36, next: 36, segs: []int64{0, 11, 25}},
	{name: "first-batch", offset: 0, next: 0},
	{name: "below-start", truncate: 14, offset: 3, next: 14, oldest: 14},
	{name: "start-batch", truncate: 14, offset: 15, next: 14, oldest: 14},
	{name: "after-start", truncate: 14, offset: 17, next: 16, oldest: 14, segs: []int64{11}},
	{name: "at-next", offset: 61, next: 61, segs: []int64{0, 11, 25, 36, 50}},
	{name: "past-next", offset: 1000, next: 61, segs: []int64{0, 11, 25, 36, 50}},
	{name: "negative", offset: -5, next: 0},
}

// TestTruncateAfter cuts the tail at a batch boundary, inside a batch, at
// a segment's base, below and at the start, at and past the end: the
// next offset, the segments and their bytes on every volume, then an
// append, a restart with nothing to repair and valid indexes.
func TestTruncateAfter(t *testing.T) {
	for _, policy := range []FsyncPolicy{FsyncInterval, FsyncAlways} {
		for _, c := range cutCases {
			t.Run(policy.String()+"/"+c.name, func(t *testing.T) { testTruncateAfter(t, policy, c) })
		}
	}
}

func testTruncateAfter(t *testing.T, policy FsyncPolicy, c cutCase) {
	s, opts := openTest(t, 2, func(o *Options) { o.Logger = testLogger(t); o.Fsync = policy })
	want := populate(t, s, "c", 0, 61)
	if c.truncate > 0 {
		if err := lg(t, s, "c").Truncate(c.truncate); err != nil {
			t.Fatal(err)
		}
	}
	before := topicFiles(t, opts.Volumes[0], "c")
	fired := make(chan struct{})
	cancel, err := lg(t, s, "c").Watch(70, func() { close(fired) })
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	next, err := lg(t, s, "c").TruncateAfter(c.offset)
	if err != nil || next != c.next {
		t.Fatalf("TruncateAfter(%d): %d %v, want %d", c.offset, next, err, c.next)
	}
	checkCut(t, s, opts, c, want, before)
	select {
	case <-fired:
		t.Fatal("a watcher past the end fired at the cut")
	default:
	}

	// Appends go on at the new end; the state survives a restart.
	more := populate(t, s, "c", c.next, 12)
	want = append(want[:c.next:c.next], more...)
	mustClose(t, s)
	s = mustOpen(t, opts)
	if st := s.Stats(); st.Repairs != 0 || st.UnreadableRanges != 0 {
		t.Fatalf("reopen after the cut repaired: %+v", st)
	}
	info, _ := lg(t, s, "c").Info()
	if info.Oldest != c.oldest || info.Next != c.next+int64(len(more)) {
		t.Fatalf("after a restart: %+v, want oldest %d next %d", info, c.oldest, c.next+int64(len(more)))
	}
	if got := readAll(t, s, "c", c.oldest); !slices.EqualFunc(got, want[c.oldest:], bytes.Equal) {
		t.Fatal("messages differ after the restart")
	}
	files := sameVolumes(t, opts, "c")
	for name, b := range files {
		if base, ok := parseSegmentName(name); ok {
			var es []entry
			for _, l := range batchLocs(t, filepath.Join(opts.Volumes[0], topicsDir, "c", name)) {
				es = append(es, entry{off: l.base, pos: uint32(l.pos)})
			}
			if idx := files[segmentName(base, idxSuffix)]; !bytes.Equal(idx, appendIndex(nil, base, es)) {
				t.Fatalf("segment %d: index %x does not match its log (%d bytes)", base, idx, len(b))
			}
		}
	}
}

// checkCut checks the topic and its files right after a cut: what reads
// back, the segments left on every volume, each a prefix of what it was
// (before: the first volume's files before the cut), the last one ending
// at the new next offset, and no marker.
func checkCut(t *testing.T, s *Store, opts Options, c cutCase, want [][]byte, before map[string][]byte) {
	t.Helper()
	info, err := lg(t, s, "c").Info()
	if err != nil || info.Next != c.next || info.Oldest != c.oldest || info.Segments != len(c.segs) {
		t.Fatalf("info %+v %v, want oldest %d next %d, %d segments", info, err, c.oldest, c.next, len(c.segs))
	}
	if got := readAll(t, s, "c", c.oldest); !slices.EqualFunc(got, want[c.oldest:c.next], bytes.Equal) {
		t.Fatalf("read back %d messages, want %d", len(got), c.next-c.oldest)
	}
	if r, err := lg(t, s, "c").Read(c.next, 0, 0); err != nil || r.Batches != 0 {
		t.Fatalf("read at the new end: %+v %v", r, err)
	} else {
		r.Release()
	}
	for _, v := range opts.Volumes {
		if got := segBases(t, v, "c"); !slices.Equal(got, c.segs) {
			t.Fatalf("volume %s holds segments %v, want %v", v, got, c.segs)
		}
		for i, base := range c.segs {
			path := segPath(v, "c", base, logSuffix)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if old := before[segmentName(base, logSuffix)]; !bytes.HasPrefix(old, b) {
				t.Fatalf("volume %s segment %d is not a prefix of what it was", v, base)
			}
			if i == len(c.segs)-1 {
				locs := batchLocs(t, path)
				if l := locs[len(locs)-1]; l.base+l.count != c.next {
					t.Fatalf("volume %s: the last segment ends at %d, want %d", v, l.base+l.count, c.next)
				}
			}
		}
		if _, err := os.Stat(filepath.Join(v, topicsDir, "c", cutName)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("cut marker left on %s: %v", v, err)
		}
	}
}

// TestTruncateAfterProducers: the producers' table is rolled back to the
// log kept: a cut batch sent again is stored anew, a kept one is still a
// duplicate, and the owner binding stays; also after a restart.
func TestTruncateAfterProducers(t *testing.T) {
	s, opts := openTest(t, 2)
	if err := s.CreateTopic("p"); err != nil {
		t.Fatal(err)
	}
	var bases []int64
	for seq := range uint64(6) {
		base, err := appendOwned(s, "p", "alice", idemBatch(9, seq, msgs(int(seq)*2, 2)...))
		if err != nil {
			t.Fatal(err)
		}
		bases = append(bases, base)
		mustAppend(t, s, "p", protocol.AppendBatch(nil, msgs(100, 1)...)) // plain batches between
	}
	next, err := lg(t, s, "p").TruncateAfter(bases[3])
	if err != nil || next != bases[3] {
		t.Fatalf("TruncateAfter: %d %v, want %d", next, err, bases[3])
	}
	plain := mustAppend(t, s, "p", protocol.AppendBatch(nil, msgs(200, 1)...))
	if plain != bases[3] {
		t.Fatalf("append after the cut: %d, want %d", plain, bases[3])
	}
	for seq := uint64(3); seq < 6; seq++ {
		base, err := appendOwned(s, "p", "alice", idemBatch(9, seq, msgs(int(seq)*2, 2)...))
		if err != nil {
			t.Fatalf("cut seq %d sent again: %v", seq, err)
		}
		if want := plain + 1 + int64(seq-3)*2; base != want {
			t.Fatalf("cut seq %d sent again: base %d, want %d (stored anew)", seq, base, want)
		}
	}
	check := func(when string) {
		t.Helper()
		for seq := range uint64(3) {
			if base, err := appendOwned(s, "p", "alice", idemBatch(9, seq, msgs(int(seq)*2, 2)...)); err != nil || base != bases[seq] {
				t.Fatalf("%s: kept seq %d sent again: %d %v, want %d", when, seq, base, err, bases[seq])
			}
		}
		if _, err := appendOwned(s, "p", "mallory", idemBatch(9, 7, msgs(0, 1)...)); !errors.Is(err, ErrProducerFenced) {
			t.Fatalf("%s: another owner under the producer: %v, want ErrProducerFenced", when, err)
		}
		if info, _ := lg(t, s, "p").Info(); info.Next != plain+7 {
			t.Fatalf("%s: next %d, want %d", when, info.Next, plain+7)
		}
	}
	check("cut")
	mustClose(t, s)
	s = mustOpen(t, opts)
	check("reopened")
}

// TestTruncateAfterReaders: a read whose spans cover bytes the cut
// removes comes up short (io.ErrUnexpectedEOF) or reads them from the
// deleted file, never panics; reads, cuts, replicates and follows racing
// each other stay consistent.
func TestTruncateAfterReaders(t *testing.T) {
	s, _ := openTest(t, 2)
	populate(t, s, "c", 0, 61)
	r, err := lg(t, s, "c").Read(0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lg(t, s, "c").TruncateAfter(20); err != nil {
		t.Fatal(err)
	}
	if _, err := r.AppendTo(nil); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("read across the cut: %v", err)
	}
	if _, err := r.WriteTo(io.Discard); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("copy across the cut: %v", err)
	}
	r.Release()

	_, _, batches := leaderLog(t, 61)
	if _, err := lg(t, s, "c").TruncateAfter(-1); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := lg(t, s, "c").Read(0, 0, 0)
				if err != nil {
					continue // ErrOffsetOutOfRange is not expected, but a cut to 0 keeps the start
				}
				if b, err := r.AppendTo(nil); err == nil {
					for len(b) > 0 {
						bt, n, err := protocol.ParseBatch(b)
						if err != nil || bt.Verify() != nil {
							t.Errorf("served a bad batch: %v", err)
							break
						}
						b = b[n:]
					}
				}
				r.Release()
			}
		})
	}
	deadline := time.Now().Add(testDeadline)
	for i := 0; i < 20 && time.Now().Before(deadline); i++ {
		info, _ := lg(t, s, "c").Info()
		k := 0
		for k < len(batches) && baseOf(t, batches[k]) < info.Next {
			k++
		}
		var chunk [][]byte
		for _, b := range batches[k:min(k+4, len(batches))] {
			chunk = append(chunk, slices.Clone(b))
		}
		if len(chunk) > 0 {
			if _, err := lg(t, s, "c").Replicate(chunk); err != nil {
				t.Fatalf("replicate: %v", err)
			}
		}
		if i%3 == 2 {
			if _, err := lg(t, s, "c").TruncateAfter(info.Next / 2); err != nil {
				t.Fatalf("cut: %v", err)
			}
		}
	}
	close(stop)
	wg.Wait()
}

// errCrashed is what crashFS answers once it has crashed.
var errCrashed = errors.New("crashed")

// crashFS simulates a kill -9: after limit changes to the file system,
// every further change fails without doing anything, so the files stay as
// the crash left them (the page cache keeps every change made before).
// Reads and fsyncs go on.
type crashFS struct {
	FS
	limit atomic.Int64 // changes allowed; < 0: no limit
	count atomic.Int64 // changes made or refused since the limit was set
}

func newCrashFS() *crashFS {
	c := &crashFS{FS: OSFS{}}
	c.limit.Store(-1)
	return c
}

// arm lets n more changes through, then crashes.
func (c *crashFS) arm(n int64) {
	c.count.Store(0)
	c.limit.Store(n)
}

func (c *crashFS) change() error {
	n := c.count.Add(1)
	if lim := c.limit.Load(); lim >= 0 && n > lim {
		return errCrashed
	}
	return nil
}

func (c *crashFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	if flag&(os.O_CREATE|os.O_TRUNC) != 0 {
		if err := c.change(); err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
	}
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return crashFile{File: f, fs: c}, nil
}

func (c *crashFS) MkdirAll(path string, perm fs.FileMode) error {
	if err := c.change(); err != nil {
		return err
	}
	return c.FS.MkdirAll(path, perm)
}

func (c *crashFS) Rename(oldpath, newpath string) error {
	if err := c.change(); err != nil {
		return err
	}
	return c.FS.Rename(oldpath, newpath)
}

func (c *crashFS) RenameNoReplace(oldpath, newpath string) error {
	if err := c.change(); err != nil {
		return err
	}
	return c.FS.RenameNoReplace(oldpath, newpath)
}

func (c *crashFS) Remove(name string) error {
	if err := c.change(); err != nil {
		return err
	}
	return c.FS.Remove(name)
}

func (c *crashFS) RemoveAll(path string) error {
	if err := c.change(); err != nil {
		return err
	}
	return c.FS.RemoveAll(path)
}

type crashFile struct {
	File
	fs *crashFS
}

func (f crashFile) WriteAt(b []byte, off int64) (int, error) {
	if err := f.fs.change(); err != nil {
		return 0, err
	}
	return f.File.WriteAt(b, off)
}

func (f crashFile) Writev(bufs [][]byte, off int64) (int, error) {
	if err := f.fs.change(); err != nil {
		return 0, err
	}
	return f.File.Writev(bufs, off)
}

func (f crashFile) Truncate(size int64) error {
	if err := f.fs.change(); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

// TestTruncateAfterCrash kills the store at every change a cut makes to
// the files (crashFS) and reopens: the topic is either as before the cut
// or as after it, log and epochs alike, the same on every volume, with
// nothing left to repair at the next open, and takes appends.
func TestTruncateAfterCrash(t *testing.T) {
	scenarios := []struct {
		name               string
		truncate, offset   int64
		oldest, next       int64
		epochs, epochsLeft []EpochStart
	}{
		{name: "across-segments", offset: 30, next: 29,
			epochs:     []EpochStart{{1, 0}, {2, 29}, {3, 41}},
			epochsLeft: []EpochStart{{1, 0}}},
		{name: "to-empty", truncate: 14, offset: 5, oldest: 14, next: 14,
			epochs:     []EpochStart{{1, 0}, {4, 20}},
			epochsLeft: []EpochStart{{1, 0}}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			seen := map[crashOutcome]int{}
			for k := int64(0); ; k++ {
				if k > 500 {
					t.Fatal("the cut never completes")
				}
				out := crashCut(t, k, sc.truncate, sc.offset, sc.oldest, sc.next, sc.epochs, sc.epochsLeft)
				seen[out]++
				if out == cutDone {
					break
				}
			}
			if seen[cutBefore] == 0 || seen[cutFinished] == 0 {
				t.Fatalf("outcomes %v: want crashes both before the marker and after it", seen)
			}
			t.Logf("crashes before the marker: %d; cuts finished at open: %d", seen[cutBefore], seen[cutFinished])
		})
	}
}

// crashOutcome is what a crash during a cut left.
type crashOutcome int

const (
	cutBefore   crashOutcome = iota // opened as before the cut
	cutFinished                     // the cut, finished at open
	cutDone                         // the cut completed before the crash
)

// crashCut runs one crash of TestTruncateAfterCrash after k changes and
// tells what it found.
func crashCut(t *testing.T, k, truncate, offset, oldest, next int64, epochs, epochsLeft []EpochStart) crashOutcome {
	t.Helper()
	cfs := newCrashFS()
	opts := recOpts(t, 2)
	opts.Logger = discardLogger()
	opts.FS = cfs
	s := mustOpen(t, opts)
	want := populate(t, s, "c", 0, 61)
	if truncate > 0 {
		if err := lg(t, s, "c").Truncate(truncate); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range epochs {
		if err := lg(t, s, "c").SetEpoch(e.Epoch, e.Start); err != nil {
			t.Fatal(err)
		}
	}
	cfs.arm(k)
	_, cutErr := lg(t, s, "c").TruncateAfter(offset)
	done := cutErr == nil && cfs.count.Load() <= k
	cfs.arm(0) // the crash: nothing more reaches the files
	_ = s.Close()

	opts.FS = OSFS{}
	s = mustOpen(t, opts)
	info, err := lg(t, s, "c").Info()
	if err != nil {
		t.Fatal(err)
	}
	es, _ := lg(t, s, "c").Epochs()
	out := cutDone
	switch {
	case info.Next == int64(len(want)):
		if done || info.Oldest != max(oldest, truncate) || !slices.Equal(es, epochs) {
			t.Fatalf("crash after %d changes: the state before the cut expected, got %+v epochs %v (cut done %v)", k, info, es, done)
		}
		out = cutBefore
	case info.Next == next:
		if info.Oldest != oldest || !slices.Equal(es, epochsLeft) {
			t.Fatalf("crash after %d changes: the state after the cut expected, got %+v epochs %v", k, info, es)
		}
		if !done {
			out = cutFinished
		}
	default:
		t.Fatalf("crash after %d changes: next %d, neither %d nor %d", k, info.Next, len(want), next)
	}
	if st := s.Stats(); st.UnreadableRanges != 0 {
		t.Fatalf("crash after %d changes: unreadable ranges %+v", k, st)
	}
	if got := readAll(t, s, "c", info.Oldest); !slices.EqualFunc(got, want[info.Oldest:info.Next], bytes.Equal) {
		t.Fatalf("crash after %d changes: messages differ", k)
	}
	mustClose(t, s)
	sameVolumes(t, opts, "c")
	for _, v := range opts.Volumes {
		if _, err := os.Stat(filepath.Join(v, topicsDir, "c", cutName)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("crash after %d changes: cut marker left on %s", k, v)
		}
	}
	s = mustOpen(t, opts)
	if st := s.Stats(); st.Repairs != 0 {
		t.Fatalf("crash after %d changes: the second open repaired %+v", k, st)
	}
	more := populate(t, s, "c", info.Next, 5)
	if got := readAll(t, s, "c", info.Next); !slices.EqualFunc(got, more, bytes.Equal) {
		t.Fatalf("crash after %d changes: appends after differ", k)
	}
	mustClose(t, s)
	return out
}

// TestCutMarkerLayout pins the cut marker's bytes: the meta file's
// layout with its own magic.
func TestCutMarkerLayout(t *testing.T) {
	got := encodeStamp(cutMagic, 0x0102030405)
	want := []byte{'H', 'R', 'Q', 'T', 0x05, 0x04, 0x03, 0x02, 0x01, 0, 0, 0}
	if !bytes.Equal(got[:12], want) || len(got) != metaSize {
		t.Fatalf("marker %x, want %x and a CRC", got, want)
	}
	if n, ok := decodeStamp(cutMagic, got); !ok || n != 0x0102030405 {
		t.Fatalf("decode: %d %v", n, ok)
	}
	if _, ok := decodeStamp(metaMagic, got); ok {
		t.Fatal("a cut marker decodes as a meta file")
	}
	got[6] ^= 1
	if _, ok := decodeStamp(cutMagic, got); ok {
		t.Fatal("a damaged marker decodes")
	}
}

// TestReplicateProducerOwners: a follower's copy holds its producers
// bound to none until it binds them to its leader's owners; then
// another owner is fenced there as on the leader, after a restart too,
// and a producer already bound or unknown is left as it is.
func TestReplicateProducerOwners(t *testing.T) {
	leader, _ := openTest(t, 1)
	if err := leader.CreateTopic("p"); err != nil {
		t.Fatal(err)
	}
	for seq := range uint64(3) {
		if _, err := appendOwned(leader, "p", "alice", idemBatch(7, seq, msgs(int(seq), 1)...)); err != nil {
			t.Fatal(err)
		}
	}
	mustAppend(t, leader, "p", idemBatch(8, 0, msgs(3, 1)...)) // no owner
	f, fopts := openTest(t, 2)
	if err := f.CreateTopic("p"); err != nil {
		t.Fatal(err)
	}
	batches := rawBatches(t, leader, "p", 0)
	if _, err := lg(t, f, "p").Replicate(batches); err != nil {
		t.Fatal(err)
	}
	ids, err := lg(t, f, "p").UnboundProducers(batches)
	slices.Sort(ids)
	if err != nil || !slices.Equal(ids, []uint64{7, 8}) {
		t.Fatalf("unbound on the follower: %v %v, want [7 8]", ids, err)
	}
	owners, err := lg(t, leader, "p").ProducerOwners(append(ids, 99))
	if err != nil || len(owners) != 1 || owners[7] != "alice" {
		t.Fatalf("the leader's owners: %v %v, want 7: alice only", owners, err)
	}
	if err := lg(t, f, "p").BindProducers(map[uint64]string{7: "alice", 99: "nobody"}); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		if _, err := appendOwned(f, "p", "mallory", idemBatch(7, 3, msgs(9, 1)...)); !errors.Is(err, ErrProducerFenced) {
			t.Fatalf("%s: another owner under alice's producer: %v, want ErrProducerFenced", when, err)
		}
		if base, err := appendOwned(f, "p", "alice", idemBatch(7, 2, msgs(2, 1)...)); err != nil || base != 2 {
			t.Fatalf("%s: alice's retry: %d %v, want 2", when, base, err)
		}
		if ids, _ := lg(t, f, "p").UnboundProducers(batches); !slices.Equal(ids, []uint64{8}) {
			t.Fatalf("%s: unbound: %v, want [8]", when, ids)
		}
	}
	check("bound")
	if err := lg(t, f, "p").BindProducers(map[uint64]string{7: "mallory"}); err != nil {
		t.Fatal(err)
	}
	check("bound again to another")
	mustClose(t, f)
	f = mustOpen(t, fopts)
	check("reopened")
	if _, err := lg(t, leader, "p").ProducerOwners(make([]uint64, protocol.MaxOwnerQuery+1)); err == nil {
		t.Fatal("an owners query past the bound was answered")
	}
}

// TestReplicateAfterWholeTruncation: a follower's copy truncated whole
// (Truncate at its end keeps its last segment, start = next) and cut at
// its start (TruncateAfter) loses its segments, so Replicate starts it
// again past its end, where its leader's log now begins, across a
// restart; the segment files below are gone from every volume.
func TestReplicateAfterWholeTruncation(t *testing.T) {
	_, _, batches := leaderLog(t, 60, func(o *Options) { o.Entries = 8 })
	f, opts := openTest(t, 2, func(o *Options) { o.Entries = 8 })
	if err := f.CreateTopic("r"); err != nil {
		t.Fatal(err)
	}
	half := len(batches) / 2
	next, err := lg(t, f, "r").Replicate(slices.Clone(batches[:half]))
	if err != nil {
		t.Fatal(err)
	}
	if err := lg(t, f, "r").Truncate(baseOf(t, batches[half+3])); err != nil { // clamped to next
		t.Fatal(err)
	}
	info, _ := lg(t, f, "r").Info()
	if info.Oldest != next || info.Next != next || info.Segments == 0 {
		t.Fatalf("truncated whole: %+v, want [%d, %d) in a kept segment", info, next, next)
	}
	if _, err := lg(t, f, "r").Replicate([][]byte{slices.Clone(batches[half+3])}); !errors.Is(err, ErrOffsetMismatch) {
		t.Fatalf("past the end with a segment kept: %v, want ErrOffsetMismatch", err)
	}
	if n, err := lg(t, f, "r").TruncateAfter(info.Oldest); err != nil || n != next {
		t.Fatalf("cut at the start: %d %v, want %d", n, err, next)
	}
	if info, _ = lg(t, f, "r").Info(); info.Segments != 0 || info.Oldest != next || info.Next != next {
		t.Fatalf("cut at the start: %+v, want no segments at %d", info, next)
	}
	for _, vol := range opts.Volumes {
		if files := logAndIndexFiles(t, vol, "r"); len(files) != 0 {
			t.Fatalf("%s keeps %d segment files", vol, len(files))
		}
	}
	from := baseOf(t, batches[half+3])
	if _, err := lg(t, f, "r").Replicate(slices.Clone(batches[half+3:])); err != nil {
		t.Fatalf("replicate past the old end: %v", err)
	}
	end := baseOf(t, batches[len(batches)-1]) + int64(countOf(t, batches[len(batches)-1]))
	mustClose(t, f)
	f = mustOpen(t, opts)
	if info, _ = lg(t, f, "r").Info(); info.Oldest != from || info.Next != end {
		t.Fatalf("after a restart: %+v, want [%d, %d)", info, from, end)
	}
	if got := rawBatches(t, f, "r", from); !slices.EqualFunc(got, batches[half+3:], bytes.Equal) {
		t.Fatal("the copy from the leader's start differs from the leader's batches")
	}
}
