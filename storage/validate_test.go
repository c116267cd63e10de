package storage

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// TestAppendValidatesCompressed: a compressed batch whose body does not
// hold what its header claims is refused before it is stored, so that it
// cannot fail every consumer of its offsets later.
func TestAppendValidatesCompressed(t *testing.T) {
	opts := DefaultOptions(t.TempDir())
	opts.MaxBatchBytes = 1 << 20
	s := mustOpen(t, opts)
	defer s.Close()
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	raw := protocol.AppendMessage(protocol.AppendMessage(nil, []byte("a")), []byte("b"))
	good := protocol.AppendBatchRaw(nil, protocol.CodecZstd, 2, raw)
	if _, err := lg(t, s, "t").Append(good, AppendOptions{}); err != nil {
		t.Fatalf("a true zstd batch: %v", err)
	}
	zeros := protocol.AppendBatchRaw(nil, protocol.CodecZstd, 1, protocol.AppendMessage(nil, bytes.Repeat([]byte{0}, 2<<20)))
	for name, b := range map[string][]byte{
		"16 bytes of garbage labelled zstd, 5000 messages": protocol.AppendBatchBody(nil, protocol.CodecZstd, 5000, 5000, []byte("0123456789abcdef")),
		"a true body with a wrong count":                   protocol.AppendBatchRaw(nil, protocol.CodecS2, 3, raw),
		"decoding past MaxBatchBytes":                      zeros,
	} {
		if _, err := lg(t, s, "t").Append(b, AppendOptions{}); !errors.Is(err, ErrInvalidBatch) {
			t.Errorf("%s: %v, want ErrInvalidBatch", name, err)
		}
	}
	if info, err := lg(t, s, "t").Info(); err != nil || info.Next != 2 {
		t.Fatalf("after refused batches: %+v %v, want next 2", info, err)
	}
}

// TestTruncateTimeOutOfRange: a time before any int64 of nanoseconds
// truncates nothing, one after all of them truncates everything; neither
// wraps around.
func TestTruncateTimeOutOfRange(t *testing.T) {
	s := mustOpen(t, DefaultOptions(t.TempDir()))
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := lg(t, s, "t").Append(protocol.AppendBatch(nil, []byte("m")), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := lg(t, s, "t").TruncateTime(time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	if info, _ := lg(t, s, "t").Info(); info.Oldest != 0 {
		t.Fatalf("truncate before 1600 moved the start to %d", info.Oldest)
	}
	if err := lg(t, s, "t").TruncateTime(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	if info, _ := lg(t, s, "t").Info(); info.Oldest != 3 {
		t.Fatalf("truncate before 9999: oldest %d, want 3", info.Oldest)
	}
}

// TestOpenWithoutSpaceForIndexes: index files are derived data. A store
// whose index files were left empty (a shutdown on a full disk) and that
// cannot write new ones still opens and serves every message; a later open
// with space writes them.
func TestOpenWithoutSpaceForIndexes(t *testing.T) {
	s, opts := openTest(t, 1)
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	for range 35 { // 4 segments of 10
		if _, err := lg(t, s, "t").Append(protocol.AppendBatch(nil, []byte("m")), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mustClose(t, s)
	idx, _ := filepath.Glob(filepath.Join(opts.Volumes[0], "topics", "t", "*"+idxSuffix))
	if len(idx) == 0 {
		t.Fatal("no index files written at close")
	}
	for _, p := range idx {
		if err := os.Truncate(p, 0); err != nil {
			t.Fatal(err)
		}
	}
	ffs := newFaultFS()
	ffs.setFailOpen(func(name string) bool { return strings.HasSuffix(name, idxSuffix+tmpSuffix) })
	opts.FS = ffs
	s2, err := Open(opts)
	if err != nil {
		t.Fatalf("open with no space for indexes: %v", err)
	}
	if info, err := lg(t, s2, "t").Info(); err != nil || info.Next != 35 {
		t.Fatalf("after open: %+v %v", info, err)
	}
	res, err := lg(t, s2, "t").Read(0, 35, 1<<20)
	if err != nil || res.End != 35 {
		t.Fatalf("read all: %+v %v", res, err)
	}
	res.Release()
	mustClose(t, s2)
	opts.FS = OSFS{}
	mustClose(t, mustOpen(t, opts))
	for _, p := range idx {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Fatalf("%s not rebuilt once there is space: %v", filepath.Base(p), err)
		}
	}
}

// TestFreeSpaceFloor: under its free-space floor a volume refuses appends
// with ErrNoSpace, writing nothing and leaving the topic writable; once
// space returns (here: the floor lowered, as freeing space would) appends
// resume without a reopen.
func TestFreeSpaceFloor(t *testing.T) {
	s, _ := openTest(t, 2, func(o *Options) { o.MinFreeBytes = 1 << 62 })
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	_, err := lg(t, s, "t").Append(protocol.AppendBatch(nil, []byte("m")), AppendOptions{})
	if !errors.Is(err, ErrNoSpace) || errors.Is(err, ErrReadOnly) {
		t.Fatalf("append under the floor: %v, want ErrNoSpace and not read-only", err)
	}
	if strings.Contains(err.Error(), s.opts.Volumes[0]) {
		t.Fatalf("the error names a server path: %v", err)
	}
	if free := s.VolumeFree(); len(free) != 2 || free[0] <= 0 {
		t.Fatalf("VolumeFree %v", free)
	}
	for v := range s.space.floor {
		s.space.floor[v].Store(0)
	}
	s.measureSpace()
	if base, err := lg(t, s, "t").Append(protocol.AppendBatch(nil, []byte("m")), AppendOptions{}); err != nil || base != 0 {
		t.Fatalf("append once space returned: %d %v", base, err)
	}
}

// TestWriteErrorNamesSegment: a failed write names the segment it was
// for, not the name its file was created under ahead of time (next.tmp).
func TestWriteErrorNamesSegment(t *testing.T) {
	ffs := newFaultFS()
	s, opts := openTest(t, 1, func(o *Options) { o.FS = ffs; o.Entries = 1 })
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := lg(t, s, "t").Append(protocol.AppendBatch(nil, []byte("m")), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ffs.failWrite(filepath.Join(opts.Volumes[0], "topics", "t"))
	_, err := lg(t, s, "t").Append(protocol.AppendBatch(nil, []byte("m")), AppendOptions{})
	if err == nil {
		t.Fatal("append with failing writes succeeded")
	}
	if msg := err.Error(); !strings.Contains(msg, segmentName(3, logSuffix)) || strings.Contains(msg, nextName) {
		t.Fatalf("error %q: want segment %s named, not %s", msg, segmentName(3, logSuffix), nextName)
	}
}

// TestDecodeBudget: appends of compressed batches decode into at most
// MaxDecodeBytes together. While the budget is taken, an append of a
// compressed batch waits (and is counted) until it frees, then succeeds;
// an uncompressed one, checked in place, does not wait.
func TestDecodeBudget(t *testing.T) {
	raw := protocol.AppendMessage(nil, bytes.Repeat([]byte{'z'}, 64<<10))
	s, opts := openTest(t, 1, func(o *Options) { o.MaxDecodeBytes = int64(len(raw)) })
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	held := mustAcquire(t, s.decode, "", opts.MaxDecodeBytes) // as an append decoding meanwhile would
	done := make(chan error, 1)
	go func() {
		_, err := lg(t, s, "t").Append(protocol.AppendBatchRaw(nil, protocol.CodecZstd, 1, raw), AppendOptions{})
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().DecodeWaits == 0 {
		select {
		case err := <-done:
			t.Fatalf("a compressed append went through while the decode budget was taken: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the compressed append neither waited nor finished")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := lg(t, s, "t").Append(protocol.AppendBatch(nil, []byte("plain")), AppendOptions{}); err != nil {
		t.Fatalf("an uncompressed append while the budget is taken: %v", err)
	}
	s.decode.release(held)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the compressed append once the budget freed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the compressed append still waits once the budget freed")
	}
	if info, err := lg(t, s, "t").Info(); err != nil || info.Next != 2 {
		t.Fatalf("after both appends: %+v %v, want next offset 2", info, err)
	}
}
