package storage

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// rawBatches reads the whole stored batches of topic from offset on, as a
// consumer receives them: one []byte per batch, stamped.
func rawBatches(t testing.TB, s *Store, topic string, offset int64) [][]byte {
	t.Helper()
	var out [][]byte
	for {
		r, err := lg(t, s, topic).Read(offset, 0, 1<<20)
		if err != nil {
			t.Fatalf("read %s@%d: %v", topic, offset, err)
		}
		if r.Batches == 0 {
			r.Release()
			return out
		}
		b, err := r.AppendTo(nil)
		r.Release()
		if err != nil {
			t.Fatal(err)
		}
		for len(b) > 0 {
			_, n, err := protocol.ParseBatch(b)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b[:n:n])
			b = b[n:]
		}
		offset = r.Next
	}
}

// TestImport copies a topic truncated in the middle of a segment into
// another store: the copy keeps the oldest and next offsets, the messages
// and the append times (OffsetAt agrees), across a restart of the copy;
// the first ordinary append ends the import, and later imports are
// refused.
func TestImport(t *testing.T) {
	clk := newFakeClock()
	start := clk.Now()
	src, _ := openTest(t, 1, func(o *Options) { o.Now = clk.Now; o.Logger = testLogger(t) })
	for i := range 35 {
		populate(t, src, "tt", int64(i), 1)
		clk.Add(time.Second)
	}
	if err := lg(t, src, "tt").Truncate(13); err != nil {
		t.Fatal(err)
	}
	srcInfo, _ := lg(t, src, "tt").Info()
	batches := rawBatches(t, src, "tt", srcInfo.Oldest)

	dst, dstOpts := openTest(t, 2, func(o *Options) { o.Logger = testLogger(t) })
	if err := dst.CreateTopic("tt"); err != nil {
		t.Fatal(err)
	}
	// In two parts: the first sets the oldest offset, the second goes on.
	half := len(batches) / 2
	oldest, next, err := lg(t, dst, "tt").Import(srcInfo.Oldest, slices.Clone(batches[:half]))
	if err != nil || oldest != 13 {
		t.Fatalf("first import: %d %d %v", oldest, next, err)
	}
	if _, _, err := lg(t, dst, "tt").Import(next+1, batches[half+1:]); !errors.Is(err, ErrOffsetMismatch) {
		t.Fatalf("import past the next offset: %v, want ErrOffsetMismatch", err)
	}
	if _, _, err := lg(t, dst, "tt").Import(next, batches[half+1:]); !errors.Is(err, ErrInvalidImport) {
		t.Fatalf("import with a gap: %v, want ErrInvalidImport", err)
	}
	mustClose(t, dst)
	dst = mustOpen(t, dstOpts) // the import goes on after a restart
	if oldest, next, err = lg(t, dst, "tt").Import(next, batches[half:]); err != nil || oldest != 13 || next != 35 {
		t.Fatalf("second import: %d %d %v", oldest, next, err)
	}
	check := func(when string) {
		t.Helper()
		info, err := lg(t, dst, "tt").Info()
		if err != nil || info.Oldest != srcInfo.Oldest || info.Next != srcInfo.Next {
			t.Fatalf("%s: info %+v %v, want %+v", when, info, err, srcInfo)
		}
		if got, want := readAll(t, dst, "tt", 13), readAll(t, src, "tt", 13); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("%s: messages differ", when)
		}
		for _, d := range []time.Duration{-time.Hour, 0, 13 * time.Second, 20500 * time.Millisecond, 34 * time.Second, time.Hour} {
			g, err1 := lg(t, dst, "tt").OffsetAt(start.Add(d))
			w, err2 := lg(t, src, "tt").OffsetAt(start.Add(d))
			if err1 != nil || err2 != nil || g != w {
				t.Fatalf("%s: offset at +%s: %d %v, source %d %v", when, d, g, err1, w, err2)
			}
		}
	}
	check("imported")
	mustClose(t, dst)
	dst = mustOpen(t, dstOpts)
	check("reopened")

	// An ordinary append ends the import, on every volume.
	if base, err := lg(t, dst, "tt").Append(protocol.AppendBatch(nil, []byte("new")), AppendOptions{}); err != nil || base != 35 {
		t.Fatalf("append after the import: %d %v", base, err)
	}
	for _, v := range dstOpts.Volumes {
		if _, err := os.Stat(filepath.Join(v, topicsDir, "tt", importName)); !os.IsNotExist(err) {
			t.Fatalf("import marker on %s after an append: %v", v, err)
		}
	}
	more := rawBatches(t, src, "tt", 34)
	if _, _, err := lg(t, dst, "tt").Import(34, more); !errors.Is(err, ErrImportRefused) {
		t.Fatalf("import after an append: %v, want ErrImportRefused", err)
	}
}

// TestImportRefused: an import into a topic with ordinary appends, one
// whose first batch does not hold its offset, one whose times go back, a
// negative offset and a missing topic are refused; an import of no
// batches sets the offsets of an empty topic.
func TestImportRefused(t *testing.T) {
	clk := newFakeClock()
	src, _ := openTest(t, 1, func(o *Options) { o.Now = clk.Now })
	populate(t, src, "a", 0, 10)
	batches := rawBatches(t, src, "a", 0)
	if len(batches) < 2 {
		t.Fatalf("%d batches", len(batches))
	}
	dst, dstOpts := openTest(t, 1)
	populate(t, dst, "full", 0, 1)
	if _, _, err := lg(t, dst, "full").Import(1, nil); !errors.Is(err, ErrImportRefused) {
		t.Fatalf("import into a produced topic: %v", err)
	}
	if _, err := dst.Log("missing"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("import into a missing topic: %v", err)
	}
	if err := dst.CreateTopic("e"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := lg(t, dst, "e").Import(-1, nil); !errors.Is(err, ErrInvalidImport) {
		t.Fatalf("negative offset: %v", err)
	}
	if _, _, err := lg(t, dst, "e").Import(100, batches); !errors.Is(err, ErrInvalidImport) {
		t.Fatalf("first batch not holding the offset: %v", err)
	}
	swapped := [][]byte{slices.Clone(batches[1]), slices.Clone(batches[0])}
	if _, _, err := lg(t, dst, "e").Import(baseOf(t, swapped[0]), swapped); !errors.Is(err, ErrInvalidImport) {
		t.Fatalf("batches out of order: %v", err)
	}
	early := [][]byte{slices.Clone(batches[0]), slices.Clone(batches[1])}
	protocol.StampBatch(early[1], baseOf(t, early[1]), protocol.BatchAppendTime(early[0])-1)
	if _, _, err := lg(t, dst, "e").Import(0, early); !errors.Is(err, ErrInvalidImport) {
		t.Fatalf("append times going back: %v", err)
	}
	bad := slices.Clone(batches[0])
	bad[len(bad)-1] ^= 1
	if _, _, err := lg(t, dst, "e").Import(0, [][]byte{bad}); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("corrupt batch: %v", err)
	}
	if info, _ := lg(t, dst, "e").Info(); info.Next != 0 || info.Segments != 0 {
		t.Fatalf("refused imports wrote: %+v", info)
	}
	// No batches: the offsets of a fully truncated topic, kept by a restart.
	if oldest, next, err := lg(t, dst, "e").Import(500, nil); err != nil || oldest != 500 || next != 500 {
		t.Fatalf("empty import: %d %d %v", oldest, next, err)
	}
	mustClose(t, dst)
	dst = mustOpen(t, dstOpts)
	if info, err := lg(t, dst, "e").Info(); err != nil || info.Oldest != 500 || info.Next != 500 {
		t.Fatalf("after a restart: %+v %v", info, err)
	}
	if base, err := lg(t, dst, "e").Append(protocol.AppendBatch(nil, []byte("x")), AppendOptions{}); err != nil || base != 500 {
		t.Fatalf("append after an empty import: %d %v", base, err)
	}
}

func baseOf(t testing.TB, b []byte) int64 {
	t.Helper()
	bt, _, err := protocol.ParseBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	return bt.BaseOffset
}
