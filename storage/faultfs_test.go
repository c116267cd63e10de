package storage

import (
	"bytes"
	"errors"
	"fmt"
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

// errInjected is the I/O error faultFS injects.
var errInjected = errors.New("injected I/O error")

// faultFS wraps an FS and, for the files whose path starts with a given
// prefix, fails File.Sync or File.Writev (after writing half the bytes, as
// a torn write would). Hooks run around OpenFile.
type faultFS struct {
	FS

	mu          sync.Mutex
	syncPrefix  string // fail Sync of files under it; "" fails nothing
	writePrefix string
	syncFails   int
	writeFails  int

	// beforeOpen and afterOpen, when set, run around every OpenFile.
	beforeOpen, afterOpen func(name string, flag int)
	// failOpen, when set, fails OpenFile of the names it returns true for.
	failOpen func(name string) bool
	// err, when set, is the error injected instead of errInjected.
	err error
	// writeAtPrefix, when set, fails File.WriteAt of files under it after
	// writing half the bytes (recovery's copies between volumes).
	writeAtPrefix string
	// syncHook, when set, runs at the start of every File.Sync, before
	// the failure is decided: it can hold an fsync while a test looks.
	syncHook func(name string)
}

// setSyncHook sets the hook every File.Sync runs first (nil: none).
func (f *faultFS) setSyncHook(hook func(name string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.syncHook = hook
}

// injected is the error to inject.
func (f *faultFS) injected() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	return errInjected
}

var _ FS = (*faultFS)(nil)

func newFaultFS() *faultFS { return &faultFS{FS: OSFS{}} }

func (f *faultFS) failSync(prefix string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.syncPrefix = prefix
}

func (f *faultFS) failWrite(prefix string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writePrefix = prefix
}

func (f *faultFS) heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.syncPrefix, f.writePrefix = "", ""
	f.beforeOpen, f.afterOpen = nil, nil
}

// setFailOpen makes opens of the names fail reports fail (nil: none).
func (f *faultFS) setFailOpen(fail func(name string) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failOpen = fail
}

func (f *faultFS) setHooks(before, after func(name string, flag int)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.beforeOpen, f.afterOpen = before, after
}

func (f *faultFS) hooks() (before, after func(string, int)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.beforeOpen, f.afterOpen
}

// fails reports whether an operation on name fails, counting it.
func (f *faultFS) fails(name string, write bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	prefix, count := f.syncPrefix, &f.syncFails
	if write {
		prefix, count = f.writePrefix, &f.writeFails
	}
	if prefix == "" || !strings.HasPrefix(name, prefix) {
		return false
	}
	*count++
	return true
}

func (f *faultFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	before, after := f.hooks()
	if before != nil {
		before(name, flag)
	}
	f.mu.Lock()
	fail := f.failOpen
	f.mu.Unlock()
	if fail != nil && fail(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: f.injected()}
	}
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	if after != nil {
		after(name, flag)
	}
	return &faultFile{File: file, fs: f, name: name}, nil
}

type faultFile struct {
	File
	fs   *faultFS
	name string
}

func (f *faultFile) Sync() error {
	f.fs.mu.Lock()
	hook := f.fs.syncHook
	f.fs.mu.Unlock()
	if hook != nil {
		hook(f.name)
	}
	if f.fs.fails(f.name, false) {
		return &os.PathError{Op: "fsync", Path: f.name, Err: f.fs.injected()}
	}
	return f.File.Sync()
}

func (f *faultFile) Writev(bufs [][]byte, off int64) (int, error) {
	if !f.fs.fails(f.name, true) {
		return f.File.Writev(bufs, off)
	}
	// A torn write: the first half of the bytes, then the error.
	var all []byte
	for _, b := range bufs {
		all = append(all, b...)
	}
	n, err := f.File.WriteAt(all[:len(all)/2], off)
	if err != nil {
		return n, err
	}
	return n, &os.PathError{Op: "pwritev", Path: f.name, Err: f.fs.injected()}
}

func (f *faultFile) WriteAt(b []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	prefix := f.fs.writeAtPrefix
	f.fs.mu.Unlock()
	if prefix == "" || !strings.HasPrefix(f.name, prefix) {
		return f.File.WriteAt(b, off)
	}
	n, err := f.File.WriteAt(b[:len(b)/2], off)
	if err != nil {
		return n, err
	}
	return n, &os.PathError{Op: "pwrite", Path: f.name, Err: f.fs.injected()}
}

// stickyCheck appends to a topic whose files now fail, and checks that the
// error is sticky: that append and every later one fail with ErrReadOnly,
// even once the file system works again; acknowledged messages still read
// back; other topics are not affected; a reopen makes the topic writable
// and keeps every acknowledged message.
//
// trigger returns the messages it had acknowledged before failing.
func stickyCheck(t *testing.T, fsync FsyncPolicy, vols int, inject func(ffs *faultFS, dir string), trigger func(s *Store) ([][]byte, error)) {
	ffs := newFaultFS()
	s, opts := openTest(t, vols, func(o *Options) {
		o.FS = ffs
		o.Fsync = fsync
		o.FsyncInterval = time.Hour // Sync is called by hand
		o.Logger = testLogger(t)
	})
	want := populate(t, s, "a", 0, 25)
	other := populate(t, s, "b", 0, 5)
	if err := lg(t, s, "a").ReadOnly(); err != nil {
		t.Fatalf("ReadOnly before the failure: %v", err)
	}
	inject(ffs, s.topicDir(vols-1, "a"))
	acked, err := trigger(s)
	want = append(want, acked...)
	if !errors.Is(err, errInjected) || !errors.Is(err, ErrReadOnly) {
		t.Fatalf("failing append: %v, want the injected error and ErrReadOnly", err)
	}
	if ro := lg(t, s, "a").ReadOnly(); !errors.Is(ro, ErrReadOnly) || !errors.Is(ro, errInjected) {
		t.Fatalf("ReadOnly after the failure: %v, want ErrReadOnly and the injected error", ro)
	}
	if ro := lg(t, s, "b").ReadOnly(); ro != nil {
		t.Fatalf("ReadOnly of another topic: %v", ro)
	}
	ffs.heal()
	for i := range 3 {
		_, err := lg(t, s, "a").Append(protocol.AppendBatch(nil, msgs(100+i, 1+i)...), AppendOptions{})
		if !errors.Is(err, ErrReadOnly) {
			t.Fatalf("append %d after the failure: %v, want ErrReadOnly", i, err)
		}
	}
	rb := scan(t, s, "a")
	if rb.next != int64(len(want)) {
		t.Fatalf("next %d after failed appends, want %d: something unacknowledged became visible", rb.next, len(want))
	}
	rb.wantMsgs(t, 0, want)
	more := populate(t, s, "b", int64(len(other)), 5)
	scan(t, s, "b").wantMsgs(t, 0, append(other, more...))
	s.Close()

	opts.FS = OSFS{}
	s = mustOpen(t, opts)
	if ro := lg(t, s, "a").ReadOnly(); ro != nil {
		t.Fatalf("ReadOnly after a reopen: %v", ro)
	}
	rb = scan(t, s, "a")
	rb.wantMsgs(t, 0, want)
	sameVolumes(t, opts, "a")
	appendMore(t, s, "a")
}

// An fsync error with FsyncAlways is sticky.
func TestFaultFsyncSticky(t *testing.T) {
	forVolumes(t, []int{1, 3}, func(t *testing.T, vols int) {
		stickyCheck(t, FsyncAlways, vols,
			func(ffs *faultFS, dir string) { ffs.failSync(dir) },
			func(s *Store) ([][]byte, error) {
				_, err := lg(t, s, "a").Append(protocol.AppendBatch(nil, msgs(50, 2)...), AppendOptions{})
				return nil, err
			})
	})
}

// A write error (a torn write on the last volume) with FsyncNever is sticky.
func TestFaultWriteSticky(t *testing.T) {
	forVolumes(t, []int{1, 3}, func(t *testing.T, vols int) {
		stickyCheck(t, FsyncNever, vols,
			func(ffs *faultFS, dir string) { ffs.failWrite(dir) },
			func(s *Store) ([][]byte, error) {
				_, err := lg(t, s, "a").Append(protocol.AppendBatch(nil, msgs(50, 2)...), AppendOptions{})
				return nil, err
			})
	})
}

// A failed interval fsync (Store.Sync) turns the topic read-only too.
func TestFaultIntervalSyncSticky(t *testing.T) {
	stickyCheck(t, FsyncInterval, 2,
		func(ffs *faultFS, dir string) { ffs.failSync(dir) },
		func(s *Store) ([][]byte, error) {
			m := msgs(25, 2) // acknowledged: fsync comes later
			if _, err := lg(t, s, "a").Append(protocol.AppendBatch(nil, m...), AppendOptions{}); err != nil {
				return nil, fmt.Errorf("append before the sync failed: %w", err)
			}
			return m, s.Sync()
		})
}

// A volume in use by an open store cannot be opened again.
func TestVolumeLocked(t *testing.T) {
	opts := recOpts(t, 2)
	s := mustOpen(t, opts)
	if _, err := Open(opts); !errors.Is(err, ErrVolumeLocked) {
		t.Fatalf("second open: %v, want ErrVolumeLocked", err)
	}
	// Sharing only the last volume is refused too, and the lock taken on
	// the free volume is given back.
	free := t.TempDir()
	mixed := opts
	mixed.Volumes = []string{free, opts.Volumes[1]}
	if _, err := Open(mixed); !errors.Is(err, ErrVolumeLocked) {
		t.Fatalf("open sharing a volume: %v, want ErrVolumeLocked", err)
	}
	alone := opts
	alone.Volumes = []string{free}
	mustClose(t, mustOpen(t, alone))
	mustClose(t, s)
	mustClose(t, mustOpen(t, opts))
}

// Topic names that could escape the volume or are not plain are refused
// everywhere; the longest valid name works end to end.
func TestTopicNames(t *testing.T) {
	s, opts := openTest(t, 1, func(o *Options) { o.Logger = testLogger(t) })
	bad := []string{"../x", "a/b", "x\x00y", ".", "..", "", strings.Repeat("a", 256), "/x", `a\b`, "a b", "~deleted.a", "é"}
	for _, name := range bad {
		for op, err := range map[string]error{
			"create": s.CreateTopic(name),
			"delete": s.DeleteTopic(name),
			"log":    func() error { _, err := s.Log(name); return err }(),
		} {
			if !errors.Is(err, ErrInvalidTopic) {
				t.Errorf("%s %q: %v, want ErrInvalidTopic", op, name, err)
			}
		}
	}
	vol := opts.Volumes[0]
	if ents, err := os.ReadDir(filepath.Join(vol, topicsDir)); err != nil || len(ents) != 0 {
		t.Fatalf("topics dir after invalid names: %v %v", ents, err)
	}
	if _, err := os.Stat(filepath.Join(vol, "x")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a topic escaped the topics directory: %v", err)
	}

	long := strings.Repeat("L", 255)
	mixed := "Az09._-"
	for _, name := range []string{long, mixed} {
		if err := s.CreateTopic(name); err != nil {
			t.Fatalf("create %d-byte name: %v", len(name), err)
		}
		want := populate(t, s, name, 0, 15)
		scan(t, s, name).wantMsgs(t, 0, want)
	}
	mustClose(t, s)
	s = mustOpen(t, opts)
	if got := s.ListTopics(""); !slices.Equal(got, []string{mixed, long}) {
		t.Fatalf("topics after reopen: %q", got)
	}
	for _, name := range []string{long, mixed} {
		if err := s.DeleteTopic(name); err != nil {
			msg := err.Error()
			if len(msg) > 200 {
				msg = msg[:100] + " ... " + msg[len(msg)-60:]
			}
			t.Errorf("delete %d-byte name: %s", len(name), msg)
		}
	}
	mustClose(t, s)
	s = mustOpen(t, opts)
	if got := s.ListTopics(""); len(got) != 0 {
		t.Fatalf("deleted topics came back after reopen: %d of them", len(got))
	}
}

// Negative offsets count from the end; before the oldest is out of range;
// at or past the end is an empty result.
func TestReadOffsets(t *testing.T) {
	s, _ := openTest(t, 2)
	if err := s.CreateTopic("e"); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, -1, 5} {
		r, err := lg(t, s, "e").Read(off, 0, 0)
		if err != nil || r.Batches != 0 || r.Next != max(off, 0) {
			t.Fatalf("read %d of an empty topic: %+v %v", off, r, err)
		}
		r.Release()
	}
	want := populate(t, s, "r", 0, 45)
	end := int64(len(want))
	last := func(off int64, limit int) (*ReadResult, [][]byte) {
		t.Helper()
		r, err := lg(t, s, "r").Read(off, limit, 0)
		if err != nil {
			t.Fatalf("read %d: %v", off, err)
		}
		b, err := r.AppendTo(nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[int64][]byte{}
		checkServed(t, b, r, r.Offset, got)
		r.Release()
		var ms [][]byte
		for o := r.Offset; o < r.Next; o++ {
			ms = append(ms, got[o])
		}
		return r, ms
	}
	for _, tc := range []struct{ off, resolved int64 }{{-1, end - 1}, {-3, end - 3}, {-end, 0}, {-1000, 0}} {
		r, ms := last(tc.off, 0)
		if r.Offset != tc.resolved || r.Next != end || r.End != end {
			t.Fatalf("read %d: offset %d next %d end %d, want %d, %d, %d", tc.off, r.Offset, r.Next, r.End, tc.resolved, end, end)
		}
		if !slices.EqualFunc(ms, want[tc.resolved:], bytes.Equal) {
			t.Fatalf("read %d: wrong messages", tc.off)
		}
	}
	if r, _ := last(-1, 1); r.Batches != 1 || r.First > end-1 || r.Next != end {
		t.Fatalf("read -1 limit 1: %+v", r)
	}
	for _, off := range []int64{end, end + 1, 1 << 50} {
		r, err := lg(t, s, "r").Read(off, 0, 0)
		if err != nil || r.Batches != 0 || len(r.Spans) != 0 || r.Next != off {
			t.Fatalf("read %d past the end %d: %+v %v", off, end, r, err)
		}
		r.Release()
	}
	if err := lg(t, s, "r").Truncate(15); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 14} {
		if _, err := lg(t, s, "r").Read(off, 0, 0); !errors.Is(err, ErrOffsetOutOfRange) {
			t.Fatalf("read %d before the oldest: %v, want ErrOffsetOutOfRange", off, err)
		}
	}
	if r, _ := last(-1000, 0); r.Offset != 15 {
		t.Fatalf("read -1000 after truncate resolved to %d, want the oldest, 15", r.Offset)
	}
	if r, ms := last(15, 0); r.First > 15 || !slices.EqualFunc(ms, want[15:], bytes.Equal) {
		t.Fatalf("read at the oldest: first %d", r.First)
	}
}

// logFiles lists the segment log files of a topic on a volume.
func logFiles(t testing.TB, vol, topic string) []string {
	t.Helper()
	var names []string
	for _, b := range segBases(t, vol, topic) {
		names = append(names, segmentName(b, logSuffix))
	}
	return names
}

// A segment holds Entries messages; the next message starts a new file
// named by its offset; a batch is never split.
func TestRotationBoundary(t *testing.T) {
	s, opts := openTest(t, 2, func(o *Options) { o.Logger = testLogger(t) })
	if err := s.CreateTopic("rot"); err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	add := func(n int) {
		t.Helper()
		m := msgs(len(want), n)
		base, err := lg(t, s, "rot").Append(protocol.AppendBatch(nil, m...), AppendOptions{})
		if err != nil || base != int64(len(want)) {
			t.Fatalf("append: base %d %v, want %d", base, err, len(want))
		}
		want = append(want, m...)
	}
	files := func(want ...string) {
		t.Helper()
		for _, v := range opts.Volumes {
			if got := logFiles(t, v, "rot"); !slices.Equal(got, want) {
				t.Fatalf("volume %s holds %v, want %v", v, got, want)
			}
		}
	}
	for range 10 {
		add(1)
	}
	files("00000000000000000000.log")
	add(1) // offset 10
	files("00000000000000000000.log", "00000000000000000010.log")
	for range 8 { // offsets 11-18: the segment holds 9
		add(1)
	}
	add(5) // offsets 19-23, one batch, in segment 10
	files("00000000000000000000.log", "00000000000000000010.log")
	add(1) // offset 24
	files("00000000000000000000.log", "00000000000000000010.log", "00000000000000000024.log")
	if info, err := lg(t, s, "rot").Info(); err != nil || info.Segments != 3 || info.Next != 25 {
		t.Fatalf("info %+v %v", info, err)
	}

	for _, tc := range []struct {
		name  string
		base  int64
		bases []int64
	}{
		{"segment 0", 0, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
		{"segment 10", 10, []int64{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}},
		{"segment 24", 24, []int64{24}},
	} {
		var got []int64
		for _, l := range batchLocs(t, segPath(opts.Volumes[1], "rot", tc.base, logSuffix)) {
			got = append(got, l.base)
		}
		if !slices.Equal(got, tc.bases) {
			t.Fatalf("%s holds batches %v, want %v", tc.name, got, tc.bases)
		}
	}

	// Reads span segments: one span per file, offsets dense.
	r, err := lg(t, s, "rot").Read(5, 20, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Spans) != 3 || r.First != 5 || r.Next != 25 || r.Batches != 16 {
		t.Fatalf("read 5+20: %d spans first %d next %d batches %d, want 3, 5, 25, 16", len(r.Spans), r.First, r.Next, r.Batches)
	}
	var wb bytes.Buffer
	if _, err := r.WriteTo(&wb); err != nil {
		t.Fatal(err)
	}
	ab, err := r.AppendTo(nil)
	if err != nil || !bytes.Equal(ab, wb.Bytes()) {
		t.Fatalf("WriteTo and AppendTo differ: %v", err)
	}
	got := map[int64][]byte{}
	checkServed(t, ab, r, 5, got)
	r.Release()
	for o := int64(5); o < 25; o++ {
		if !bytes.Equal(got[o], want[o]) {
			t.Fatalf("offset %d: %q, want %q", o, got[o], want[o])
		}
	}
	// A limit ending inside a batch returns the whole batch; maxBytes
	// smaller than a batch still returns one.
	if r, err := lg(t, s, "rot").Read(18, 2, 0); err != nil || r.Next != 24 || r.Batches != 2 {
		t.Fatalf("read 18+2: %+v %v", r, err)
	} else {
		r.Release()
	}
	if r, err := lg(t, s, "rot").Read(8, 0, 1); err != nil || r.Next != 9 || r.Batches != 1 {
		t.Fatalf("read 8 max 1 byte: %+v %v", r, err)
	} else {
		r.Release()
	}
	scan(t, s, "rot").wantMsgs(t, 0, want)
}

// fakeClock is a settable clock for Options.Now.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time               { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Add(d time.Duration)          { c.ns.Add(int64(d)) }
func (c *fakeClock) At(d time.Duration) time.Time { return time.Unix(0, c.ns.Load()).Add(d) }

// eventually polls cond until it holds or a deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(testDeadline)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TruncateTime truncates before the first message appended at or after a
// time.
func TestTruncateTime(t *testing.T) {
	clk := newFakeClock()
	start := clk.Now()
	s, opts := openTest(t, 2, func(o *Options) { o.Now = clk.Now; o.Logger = testLogger(t) })
	var want [][]byte
	for i := range 35 { // message i appended at start + i seconds
		want = append(want, populate(t, s, "tt", int64(i), 1)...)
		clk.Add(time.Second)
	}
	for _, tc := range []struct {
		at     time.Duration
		oldest int64
	}{
		{15 * time.Second, 15},
		{3 * time.Second, 15}, // earlier: nothing to do
		{15500 * time.Millisecond, 16},
		{20 * time.Second, 20},
		{time.Hour, 35}, // after the newest: truncated to the end
	} {
		if err := lg(t, s, "tt").TruncateTime(start.Add(tc.at)); err != nil {
			t.Fatal(err)
		}
		rb := scan(t, s, "tt")
		if rb.oldest != tc.oldest || rb.next != 35 {
			t.Fatalf("truncate at +%s: oldest %d next %d, want %d, 35", tc.at, rb.oldest, rb.next, tc.oldest)
		}
		rb.wantMsgs(t, tc.oldest, want[tc.oldest:])
	}
	if got := logFiles(t, opts.Volumes[0], "tt"); !slices.Equal(got, []string{"00000000000000000030.log"}) {
		t.Fatalf("segments left: %v", got)
	}
	more := populate(t, s, "tt", 35, 3)
	scan(t, s, "tt").wantMsgs(t, 35, more)
}

// The sweeper deletes whole segments older than RetentionAge, keeping the
// newest; the clock is fake, the sweep interval tiny.
func TestRetentionAge(t *testing.T) {
	clk := newFakeClock()
	s, opts := openTest(t, 2, func(o *Options) {
		o.Now = clk.Now
		o.RetentionAge = time.Hour
		o.RetentionCheck = time.Millisecond
		o.Logger = testLogger(t)
	})
	want := populate(t, s, "age", 0, 35) // full segments at t0
	clk.Add(30 * time.Minute)
	more := populate(t, s, "age", int64(len(want)), 1) // a new segment at t0+30m
	want = append(want, more...)
	bases := segBases(t, opts.Volumes[0], "age")
	if len(bases) < 3 {
		t.Fatalf("segments %v", bases)
	}
	if info, _ := lg(t, s, "age").Info(); info.Oldest != 0 {
		t.Fatalf("retention deleted young segments: %+v", info)
	}
	clk.Add(45 * time.Minute) // t0+75m: all but the newest are past the age
	newest := bases[len(bases)-1]
	eventually(t, "old segments to go", func() bool {
		info, err := lg(t, s, "age").Info()
		if err != nil || info.Oldest != newest {
			return false
		}
		// Files are removed just after the topic's state changes.
		for _, v := range opts.Volumes {
			if got := logFiles(t, v, "age"); !slices.Equal(got, []string{segmentName(newest, logSuffix)}) {
				return false
			}
		}
		return true
	})
	if _, err := lg(t, s, "age").Read(newest-1, 0, 0); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read before the oldest: %v", err)
	}
	scan(t, s, "age").wantMsgs(t, newest, want[newest:])
}

// The sweeper deletes a topic's oldest whole segments while it holds more
// than RetentionBytes.
func TestRetentionBytes(t *testing.T) {
	const limit = 1500
	s, opts := openTest(t, 1, func(o *Options) {
		o.RetentionBytes = limit
		o.RetentionCheck = time.Millisecond
		o.Logger = testLogger(t)
	})
	want := populate(t, s, "big", 0, 80)
	var info TopicInfo
	var bases []int64
	eventually(t, "the topic to shrink under the limit", func() bool {
		var err error
		info, err = lg(t, s, "big").Info()
		// Files are removed just after the topic's state changes.
		bases = segBases(t, opts.Volumes[0], "big")
		return err == nil && (info.Bytes <= limit || info.Segments == 1) && len(bases) == info.Segments
	})
	if len(bases) != info.Segments || bases[0] != info.Oldest || info.Oldest == 0 {
		t.Fatalf("info %+v, segments on disk %v: want whole segments deleted", info, bases)
	}
	var onDisk int64
	for _, b := range bases {
		fi, err := os.Stat(segPath(opts.Volumes[0], "big", b, logSuffix))
		if err != nil {
			t.Fatal(err)
		}
		onDisk += fi.Size()
	}
	if onDisk != info.Bytes || onDisk > limit {
		t.Fatalf("%d bytes on disk, info says %d, limit %d", onDisk, info.Bytes, limit)
	}
	scan(t, s, "big").wantMsgs(t, info.Oldest, want[info.Oldest:])
}

// A read that races with the deletion and re-creation of its topic must
// serve the old topic's batches or fail, never bytes at the old positions
// of the new topic's files; and it must not leave a handle of the old files
// in the cache for the new topic's reads. The race is made deterministic
// by starting the delete and re-create from inside the read's OpenFile; the
// read holds the topic's lock while it opens files, so the delete waits for it.
func TestReadRacingDeleteRecreate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after bool // run the race after the real open (else before)
		cache bool
	}{
		{"before-open", false, true},
		{"after-open", true, true},
		{"before-open/no-cache", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ffs := newFaultFS()
			s, _ := openTest(t, 1, func(o *Options) { o.FS = ffs; o.Cache = tc.cache; o.Logger = testLogger(t) })
			old := populate(t, s, "t", 0, 6) // batches of 1, 3, 2 short messages
			fresh := [][]byte{bytes.Repeat([]byte("N"), 300), []byte("new-1"), []byte("new-2")}
			var fired atomic.Bool
			var recreate func(chan struct{})
			raced := make(chan struct{})
			race := func(name string, flag int) {
				if !strings.HasSuffix(name, logSuffix) || flag&(os.O_WRONLY|os.O_RDWR) != 0 || !fired.CompareAndSwap(false, true) {
					return
				}
				go recreate(raced)
			}
			recreate = func(done chan struct{}) {
				defer close(done)
				if err := s.DeleteTopic("t"); err != nil {
					t.Error(err)
				}
				if err := s.CreateTopic("t"); err != nil {
					t.Error(err)
				}
				for _, m := range fresh {
					if _, err := lg(t, s, "t").Append(protocol.AppendBatch(nil, m), AppendOptions{}); err != nil {
						t.Error(err)
					}
				}
			}
			if tc.after {
				ffs.setHooks(nil, race)
			} else {
				ffs.setHooks(race, nil)
			}
			r, err := lg(t, s, "t").Read(0, 0, 0)
			if !fired.Load() {
				t.Fatal("the read opened no segment file")
			}
			<-raced
			ffs.heal()
			if err == nil {
				b, rerr := r.AppendTo(nil)
				r.Release()
				if rerr != nil {
					t.Fatalf("read racing a delete: %v", rerr)
				}
				got := map[int64][]byte{}
				checkServed(t, b, r, 0, got)
				for o, m := range got {
					if !bytes.Equal(m, old[o]) {
						t.Fatalf("read racing a delete served %q at %d, want the old topic's %q or an error", m, o, old[o])
					}
				}
			} else if !errors.Is(err, ErrTopicNotFound) {
				t.Fatalf("read racing a delete: %v, want ErrTopicNotFound or the old messages", err)
			}
			t.Log("reading the re-created topic")
			rb := scan(t, s, "t")
			if rb.next != int64(len(fresh)) {
				t.Fatalf("new topic next %d, want %d", rb.next, len(fresh))
			}
			rb.wantMsgs(t, 0, fresh)
		})
	}
}
