package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// Tests of the pipelined group commit (commit.go): with FsyncAlways a group
// is written while the one before is being fsynced, and each is published
// and acknowledged only once an fsync that began after its write ended.

// durableFS records, for every file opened through it, how far Writev has
// written and how much of that an fsync covered: the bytes written before
// a Sync began, once that Sync returned without error. Files are keyed by
// the handle, since segment files are renamed after they are created.
type durableFS struct {
	FS
	mu    sync.Mutex
	files []*durableFile
}

type durableFile struct {
	File
	fs      *durableFS
	vol     string
	written int64 // high-water mark of Writev; fs.mu
	durable int64 // written when the last successful Sync began; fs.mu
}

func (d *durableFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := d.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	df := &durableFile{File: f, fs: d, vol: name}
	d.mu.Lock()
	d.files = append(d.files, df)
	d.mu.Unlock()
	return df, nil
}

func (f *durableFile) Writev(bufs [][]byte, off int64) (int, error) {
	n, err := f.File.Writev(bufs, off)
	f.fs.mu.Lock()
	f.written = max(f.written, off+int64(n))
	f.fs.mu.Unlock()
	return n, err
}

func (f *durableFile) Sync() error {
	f.fs.mu.Lock()
	covered := f.written
	f.fs.mu.Unlock()
	if err := f.File.Sync(); err != nil {
		return err
	}
	f.fs.mu.Lock()
	f.durable = max(f.durable, covered)
	f.fs.mu.Unlock()
	return nil
}

// durableBytes returns the log bytes of files under vol that an fsync
// covered, summed over the topic's segments.
func (d *durableFS) durableBytes(vol string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var n int64
	for _, f := range d.files {
		if strings.HasPrefix(f.vol, vol) {
			n += f.durable
		}
	}
	return n
}

// Every append, synchronous or not, is acknowledged only once every byte up
// to its own end is fsynced on every volume, through segment rolls; offsets
// are dense and everything acknowledged reads back, before and after a
// reopen.
func TestPipelinedAckAfterOwnFsync(t *testing.T) {
	dfs := &durableFS{FS: OSFS{}}
	s, opts := openTest(t, 2, func(o *Options) {
		o.FS = dfs
		o.Fsync = FsyncAlways
		o.Entries = 7 // rolls while groups are in flight
	})
	if err := s.CreateTopic("p"); err != nil {
		t.Fatal(err)
	}
	// Equal-sized one-message batches: offset o ends at byte (o+1)*size of
	// the topic's log, summed over its segments.
	msg := func(w, i int) []byte { return fmt.Appendf(nil, "w%02d-i%03d", w, i) }
	size := int64(len(protocol.AppendBatch(nil, msg(0, 0))))
	check := func(base int64) error {
		for _, v := range opts.Volumes {
			if got, want := dfs.durableBytes(v), (base+1)*size; got < want {
				return fmt.Errorf("offset %d acknowledged with %d bytes fsynced on volume %s, want at least %d", base, got, v, want)
			}
		}
		return nil
	}
	const writers, each, async = 12, 30, 120
	var wg sync.WaitGroup
	errs := make(chan error, writers+async)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				base, err := lg(t, s, "p").Append(protocol.AppendBatch(nil, msg(w, i)), AppendOptions{})
				if err == nil {
					err = check(base)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	cb := &checkingCallback{check: check, errs: errs}
	cb.wg.Add(async)
	for i := range async {
		if err := lg(t, s, "p").AppendAsync(protocol.AppendBatch(nil, msg(writers, i)), AppendOptions{}, cb, i); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	cb.wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := writers*each + async
	got := readAll(t, s, "p", 0)
	if len(got) != total {
		t.Fatalf("read %d messages, want %d", len(got), total)
	}
	mustClose(t, s)
	opts.FS = OSFS{}
	s = mustOpen(t, opts)
	if again := readAll(t, s, "p", 0); len(again) != total {
		t.Fatalf("read %d messages after a reopen, want %d", len(again), total)
	}
}

// checkingCallback checks each asynchronous append's outcome as it is told.
type checkingCallback struct {
	check func(base int64) error
	errs  chan error
	wg    sync.WaitGroup
}

func (c *checkingCallback) Appended(_ any, base int64, err error) {
	if err == nil {
		err = c.check(base)
	}
	if err != nil {
		c.errs <- err
	}
	c.wg.Done()
}

func (c *checkingCallback) Flush() {}

// gate holds the next fsync of a faultFS of a file under a prefix until
// opened, and tells when it is being held; the fsyncs after it pass.
type gate struct {
	taken atomic.Bool
	held  chan string   // the name of the fsync being held
	open  chan struct{} // closed to let it through
}

func holdSyncs(ffs *faultFS, prefix string) *gate {
	g := &gate{held: make(chan string, 1), open: make(chan struct{})}
	ffs.setSyncHook(func(name string) {
		if strings.HasPrefix(name, prefix) && g.taken.CompareAndSwap(false, true) {
			g.held <- name
			<-g.open
		}
	})
	return g
}

func (g *gate) waitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-g.held:
	case <-time.After(testDeadline):
		t.Fatal("no fsync began")
	}
}

// written returns how many commits the topic has written.
func written(t *testing.T, s *Store, name string) uint64 {
	t.Helper()
	tp, err := s.lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return tp.committer.wgen.Load()
}

type appended struct {
	base int64
	err  error
}

func appendGo(s *Store, name string, m ...[]byte) chan appended {
	done := make(chan appended, 1)
	go func() {
		l, err := s.Log(name)
		if err != nil {
			done <- appended{0, err}
			return
		}
		base, err := l.Append(protocol.AppendBatch(nil, m...), AppendOptions{})
		done <- appended{base, err}
	}()
	return done
}

func wait(t *testing.T, done chan appended) appended {
	t.Helper()
	select {
	case a := <-done:
		return a
	case <-time.After(testDeadline):
		t.Fatal("append not acknowledged")
		return appended{}
	}
}

// While one group's fsync is under way the next group is written, and
// neither is visible to readers nor acknowledged until its fsync ends; then
// both are, in order.
func TestPipelinedWriteDuringFsync(t *testing.T) {
	ffs := newFaultFS()
	s, _ := openTest(t, 1, func(o *Options) { o.FS = ffs; o.Fsync = FsyncAlways })
	if err := s.CreateTopic("p"); err != nil {
		t.Fatal(err)
	}
	g := holdSyncs(ffs, "")
	w0 := written(t, s, "p")
	a := appendGo(s, "p", msgs(0, 2)...)
	g.waitHeld(t)
	b := appendGo(s, "p", msgs(2, 3)...)
	eventually(t, "the second group written during the first one's fsync", func() bool {
		return written(t, s, "p") >= w0+2
	})
	if info, err := lg(t, s, "p").Info(); err != nil || info.Next != 0 {
		t.Fatalf("during the fsync: info %+v, %v; want nothing visible", info, err)
	}
	select {
	case r := <-a:
		t.Fatalf("acknowledged before its fsync ended: %+v", r)
	case r := <-b:
		t.Fatalf("acknowledged before its fsync ended: %+v", r)
	default:
	}
	close(g.open)
	if r := wait(t, a); r.err != nil || r.base != 0 {
		t.Fatalf("first group: %+v, want base 0", r)
	}
	if r := wait(t, b); r.err != nil || r.base != 2 {
		t.Fatalf("second group: %+v, want base 2", r)
	}
	checkTopics(t, s, map[string][][]byte{"p": msgs(0, 5)})
}

// A failed fsync fails its group and the group written behind it during
// that fsync: neither is acknowledged nor becomes visible, the topic turns
// read-only, and a reopen keeps every acknowledged message.
func TestPipelinedFsyncFailure(t *testing.T) {
	forVolumes(t, []int{1, 2}, func(t *testing.T, vols int) {
		stickyCheck(t, FsyncAlways, vols,
			func(ffs *faultFS, dir string) {},
			func(s *Store) ([][]byte, error) {
				ffs := s.opts.FS.(*faultFS)
				dir := s.topicDir(vols-1, "a")
				g := holdSyncs(ffs, dir)
				defer ffs.setSyncHook(nil)
				w0 := written(t, s, "a")
				first := appendGo(s, "a", msgs(50, 2)...)
				g.waitHeld(t)
				second := appendGo(s, "a", msgs(52, 3)...)
				eventually(t, "the second group written", func() bool { return written(t, s, "a") >= w0+2 })
				ffs.failSync(dir)
				close(g.open)
				r1, r2 := wait(t, first), wait(t, second)
				if r2.err == nil || !errors.Is(r2.err, ErrReadOnly) {
					return nil, fmt.Errorf("the group behind the failed fsync: %+v, want ErrReadOnly", r2)
				}
				return nil, r1.err
			})
	})
}

// A write that fails for space while the group before it is being fsynced
// is cut back to the end of that group, not to what readers see: the group
// in flight is acknowledged, the failed one gets ErrNoSpace, and the next
// append follows the first group.
func TestPipelinedNoSpaceBehindFlight(t *testing.T) {
	ffs := newFaultFS()
	ffs.err = syscall.ENOSPC
	s, opts := openTest(t, 2, func(o *Options) {
		o.FS = ffs
		o.Fsync = FsyncAlways
		o.MinFreeBytes = 0
		o.Logger = testLogger(t)
	})
	if err := s.CreateTopic("p"); err != nil {
		t.Fatal(err)
	}
	g := holdSyncs(ffs, "")
	first := appendGo(s, "p", msgs(0, 3)...)
	g.waitHeld(t)
	ffs.failWrite(opts.Volumes[1])
	w0 := written(t, s, "p")
	second := appendGo(s, "p", msgs(3, 4)...)
	eventually(t, "the second group's write", func() bool { return written(t, s, "p") > w0 })
	size := int64(len(protocol.AppendBatch(nil, msgs(0, 3)...)))
	for _, v := range opts.Volumes {
		fi, err := os.Stat(filepath.Join(v, topicsDir, "p", segmentName(0, logSuffix)))
		if err != nil || fi.Size() != size {
			t.Fatalf("volume %s: segment %v, %d bytes, want %d (cut back to the group in flight)", v, err, fi.Size(), size)
		}
	}
	ffs.heal()
	close(g.open)
	ffs.setSyncHook(nil)
	if r := wait(t, first); r.err != nil || r.base != 0 {
		t.Fatalf("the group in flight: %+v, want base 0", r)
	}
	if r := wait(t, second); !errors.Is(r.err, ErrNoSpace) || errors.Is(r.err, ErrReadOnly) {
		t.Fatalf("append on a full volume: %+v, want ErrNoSpace and not read-only", r)
	}
	m := msgs(3, 2)
	if r := wait(t, appendGo(s, "p", m...)); r.err != nil || r.base != 3 {
		t.Fatalf("append once space is back: %+v, want base 3", r)
	}
	want := append(msgs(0, 3), m...)
	checkTopics(t, s, map[string][][]byte{"p": want})
	mustClose(t, s)
	s = mustOpen(t, opts)
	if st := s.Stats(); st.Repairs != 0 || st.TruncatedBytes != 0 {
		t.Fatalf("reopen repaired %d, cut %d bytes: the volumes differed", st.Repairs, st.TruncatedBytes)
	}
	checkTopics(t, s, map[string][][]byte{"p": want})
}

// The wait for appenders before a commit or an fsync is half the last
// one's duration, but never long after a stall.
func TestGatherWaitBounded(t *testing.T) {
	for _, c := range []struct{ last, want time.Duration }{
		{0, 0},
		{400 * time.Microsecond, 200 * time.Microsecond},
		{10 * time.Millisecond, 5 * time.Millisecond},
		{3 * time.Second, maxGatherWait},
	} {
		if got := gatherWait(int64(c.last)); got != c.want {
			t.Errorf("after %v: wait %v, want %v", c.last, got, c.want)
		}
	}
}

// queued returns one-message requests for topic p, as appendReqs queues
// them, for tests that drive commit, settle and acknowledge by hand.
func queued(t *testing.T, s *Store, from, n int) []*appendReq {
	t.Helper()
	var out []*appendReq
	for _, m := range msgs(from, n) {
		b := protocol.AppendBatch(nil, m)
		bi, err := s.validate("p", b, "")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &appendReq{batch: b, count: bi.count, head: true, ready: make(chan bool, 1)})
	}
	return out
}

// commitByHand writes reqs as one pipelined flight, as a leader does.
func commitByHand(tp *topic, reqs []*appendReq) *flight {
	tp.wmu.Lock()
	defer tp.wmu.Unlock()
	return tp.committer.commit(reqs, true)
}

// settleByHand fsyncs, publishes and acknowledges fl, as its leader does.
func settleByHand(tp *topic, fl *flight) {
	tp.committer.settle(fl)
	tp.committer.acknowledge(fl, nil)
}

// A group fills the active segment, and the next segment cannot be
// created (descriptors ran out): the group's part in the full segment is
// acknowledged, the rest refused, and the next group, committed before the
// first is acknowledged, continues from the end of the full segment: no
// offset is given twice.
func TestPipelinedRollFailureKeepsOffsets(t *testing.T) {
	ffs := newFaultFS()
	ffs.err = syscall.EMFILE
	var opens atomic.Int32
	ffs.setFailOpen(func(name string) bool {
		if !strings.HasSuffix(name, nextName) {
			return false
		}
		n := opens.Add(1)
		return n == 2 || n == 3 // the roll's new segment, both ways it is tried
	})
	s, _ := openTest(t, 1, func(o *Options) { o.FS = ffs; o.Fsync = FsyncAlways; o.Logger = testLogger(t) })
	if err := s.CreateTopic("p"); err != nil {
		t.Fatal(err)
	}
	want := msgs(0, 5)
	for _, m := range want {
		if _, err := lg(t, s, "p").Append(protocol.AppendBatch(nil, m), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tp, err := s.lookup("p")
	if err != nil {
		t.Fatal(err)
	}
	r1 := queued(t, s, 5, 10) // 5 fill the segment (Entries 10), 5 need the next
	fl1 := commitByHand(tp, r1)
	r2 := queued(t, s, 100, 1)
	fl2 := commitByHand(tp, r2)
	settleByHand(tp, fl1)
	settleByHand(tp, fl2)
	for i, r := range r1 {
		switch {
		case i < 5 && (r.err != nil || r.base != int64(5+i)):
			t.Fatalf("append %d, in the full segment: base %d, %v; want %d", i, r.base, r.err, 5+i)
		case i >= 5 && !errors.Is(r.err, ErrTooManyFiles):
			t.Fatalf("append %d, past the failed roll: base %d, %v; want ErrTooManyFiles", i, r.base, r.err)
		}
	}
	if r := r2[0]; r.err != nil || r.base != 10 {
		t.Fatalf("the next group: base %d, %v; want 10", r.base, r.err)
	}
	want = append(append(want, msgs(5, 5)...), msgs(100, 1)...)
	checkTopics(t, s, map[string][][]byte{"p": want})
	if info, err := lg(t, s, "p").Info(); err != nil || info.Next != 11 {
		t.Fatalf("info %+v, %v: want next 11", info, err)
	}
}

// The fsync after cutting back a write that failed for space fails: the
// group in flight in the same files is not acknowledged, although its own
// fsync, later, reports nothing (Linux tells a writeback error to one
// fsync per open file).
func TestPipelinedRollbackSyncFailure(t *testing.T) {
	ffs := newFaultFS()
	s, opts := openTest(t, 1, func(o *Options) { o.FS = ffs; o.Fsync = FsyncAlways; o.MinFreeBytes = 0; o.Logger = testLogger(t) })
	if err := s.CreateTopic("p"); err != nil {
		t.Fatal(err)
	}
	tp, err := s.lookup("p")
	if err != nil {
		t.Fatal(err)
	}
	r1 := queued(t, s, 0, 2)
	fl1 := commitByHand(tp, r1)
	ffs.mu.Lock()
	ffs.err = syscall.ENOSPC
	ffs.mu.Unlock()
	ffs.failWrite(opts.Volumes[0])
	ffs.failSync(opts.Volumes[0]) // the cut back's fsync
	r2 := queued(t, s, 2, 1)
	fl2 := commitByHand(tp, r2)
	ffs.heal()
	settleByHand(tp, fl1)
	settleByHand(tp, fl2)
	for i, r := range append(r1, r2...) {
		if !errors.Is(r.err, ErrReadOnly) {
			t.Fatalf("append %d: base %d, %v; want ErrReadOnly", i, r.base, r.err)
		}
	}
	if info, err := lg(t, s, "p").Info(); err != nil || info.Next != 0 {
		t.Fatalf("info %+v, %v: want nothing visible", info, err)
	}
}

// The fsync of a full segment's part of a group, before the segment is
// sealed, fails for space: that is no refusal the next append can get
// past, the topic is read-only, and every append of the group says so.
func TestPipelinedSealSyncNoSpace(t *testing.T) {
	ffs := newFaultFS()
	s, opts := openTest(t, 1, func(o *Options) { o.FS = ffs; o.Fsync = FsyncAlways; o.MinFreeBytes = 0; o.Logger = testLogger(t) })
	populate(t, s, "p", 0, 5)
	tp, err := s.lookup("p")
	if err != nil {
		t.Fatal(err)
	}
	ffs.mu.Lock()
	ffs.err = syscall.ENOSPC
	ffs.mu.Unlock()
	ffs.failSync(opts.Volumes[0])
	r := queued(t, s, 5, 10) // 5 fill the segment, whose part is fsynced before the roll
	settleByHand(tp, commitByHand(tp, r))
	for i, q := range r {
		if !errors.Is(q.err, ErrReadOnly) || errors.Is(q.err, ErrNoSpace) {
			t.Fatalf("append %d: base %d, %v; want ErrReadOnly, not ErrNoSpace", i, q.base, q.err)
		}
	}
}
