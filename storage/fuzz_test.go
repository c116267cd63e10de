package storage

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/haraqa/haraqa/protocol"
)

// fuzzSegment builds a valid segment log starting at base: one batch per
// count, stamped with its base offset.
func fuzzSegment(base int64, counts ...int) []byte {
	var seg []byte
	off := base
	for _, c := range counts {
		start := len(seg)
		seg = protocol.AppendBatch(seg, msgs(int(off%1000), c)...)
		protocol.StampBatch(seg[start:], off, 1e18+off)
		off += int64(c)
	}
	return seg
}

// fuzzSealedBase is the base of the segment that follows the fuzzed one when
// mode&fuzzSealed is set, making the fuzzed one a sealed segment.
const fuzzSealedBase = 1000

const (
	fuzzTwoVolumes = 1 << iota // b is the same segment on a second, last volume
	fuzzSealed                 // a valid segment follows at fuzzSealedBase
)

// FuzzRecover writes arbitrary bytes as the first segment of a topic on one
// volume, or two different ones on two volumes, and opens the store. Open
// must not panic or hang, and may fail only with ErrCorruptLayout; every
// batch Read serves must be valid with dense increasing offsets; an append
// must land at the next offset; and a second open must find nothing more to
// repair and serve the same messages.
func FuzzRecover(f *testing.F) {
	valid := fuzzSegment(0, 1, 3, 2, 1)
	flip := func(b []byte, i int) []byte {
		b = bytes.Clone(b)
		b[i] ^= 0x10
		return b
	}
	second := len(fuzzSegment(0, 1)) // position of the second batch
	third := len(fuzzSegment(0, 1, 3))
	// A corrupted batch followed by a valid one whose base offset (which
	// the CRC does not cover) is near the largest int64.
	huge := fuzzSegment(0, 1, 3)
	huge = flip(huge, second+protocol.MinBatchHeaderSize+2)
	tail := fuzzSegment(math.MaxInt64-2, 5)
	huge = append(huge, tail...)

	ones := make([][]byte, fuzzSealedBase+1)
	for i := range ones {
		ones[i] = []byte{'1'}
	}
	overlap := protocol.AppendBatch(nil, ones...)

	for _, seed := range []struct {
		a, b []byte
		mode uint8
	}{
		{valid, nil, 0},
		{nil, nil, 0},
		{valid[:len(valid)-5], nil, 0},
		{valid[:third+3], valid, fuzzTwoVolumes},
		{valid, valid[:second+10], fuzzTwoVolumes},
		{flip(valid, second+protocol.MinBatchHeaderSize+1), nil, 0},
		{flip(valid, third+1), nil, 0},                  // a length field
		{flip(valid, third+5), valid, fuzzTwoVolumes},   // a base offset
		{valid, flip(valid, second+40), fuzzTwoVolumes}, // the last volume's copy
		{flip(valid, second+40), flip(valid, third+40), fuzzTwoVolumes},
		{flip(valid, second+40), nil, fuzzSealed},
		{valid[:len(valid)-1], nil, fuzzSealed},
		{overlap, nil, fuzzSealed}, // runs past the next segment's base
		{append(bytes.Clone(valid), "garbage after the last batch"...), nil, 0},
		{huge, nil, 0},
		{huge, valid, fuzzTwoVolumes},
		{bytes.Repeat([]byte{0xff}, 100), valid, fuzzTwoVolumes},
	} {
		f.Add(seed.a, seed.b, seed.mode)
	}
	f.Fuzz(func(t *testing.T, a, b []byte, mode uint8) {
		if len(a) > 4<<10 || len(b) > 4<<10 {
			t.Skip("inputs are kept small so each run is fast")
		}
		vols := 1
		if mode&fuzzTwoVolumes != 0 {
			vols = 2
		}
		opts := DefaultOptions()
		for v := range vols {
			opts.Volumes = append(opts.Volumes, t.TempDir())
			dir := filepath.Join(opts.Volumes[v], topicsDir, "f")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			data := a
			if v == 1 {
				data = b
			}
			if err := os.WriteFile(filepath.Join(dir, segmentName(0, logSuffix)), data, 0o644); err != nil {
				t.Fatal(err)
			}
			if mode&fuzzSealed != 0 {
				next := fuzzSegment(fuzzSealedBase, 2)
				if err := os.WriteFile(filepath.Join(dir, segmentName(fuzzSealedBase, logSuffix)), next, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		opts.FS = noSyncFS{OSFS{}}
		opts.Entries = 3
		opts.MaxBatchBytes = 4 << 10
		opts.MaxOpenFiles = 4 * len(opts.Volumes)
		opts.Logger = slog.New(slog.DiscardHandler)

		s, err := Open(opts)
		if err != nil {
			if !errors.Is(err, ErrCorruptLayout) {
				t.Fatalf("open: %v", err)
			}
			return
		}
		defer s.Close()
		first := scan(t, s, "f")
		if first.next > math.MaxInt64/2 {
			t.Fatalf("next offset %d: recovery trusted an absurd base offset", first.next)
		}
		m := []byte("appended after recovery")
		base, err := lg(t, s, "f").Append(protocol.AppendBatch(nil, m), AppendOptions{})
		if err != nil {
			t.Fatalf("append after recovery: %v", err)
		}
		if base != first.next {
			t.Fatalf("append after recovery at %d, want the next offset %d", base, first.next)
		}
		first.msgs[base] = m
		if err := s.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}

		s, err = Open(opts)
		if err != nil {
			t.Fatalf("second open: %v", err)
		}
		defer s.Close()
		if st := s.Stats(); st.Repairs != 0 || st.TruncatedBytes != 0 {
			t.Fatalf("second open repaired again: %+v", st)
		}
		again := scan(t, s, "f")
		if again.oldest != first.oldest || again.next != base+1 || len(again.msgs) != len(first.msgs) {
			t.Fatalf("second open: oldest %d next %d, %d messages; want %d, %d, %d",
				again.oldest, again.next, len(again.msgs), first.oldest, base+1, len(first.msgs))
		}
		for o, m := range first.msgs {
			if !bytes.Equal(again.msgs[o], m) {
				t.Fatalf("second open: offset %d reads %q, was %q", o, again.msgs[o], m)
			}
		}
	})
}

// noSyncFS skips fsync: recovery's logic, not durability, is fuzzed, and
// an fsync costs milliseconds on a real disk.
type noSyncFS struct{ FS }

func (f noSyncFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return noSyncFile{file}, nil
}

func (noSyncFS) SyncDir(string) error { return nil }

type noSyncFile struct{ File }

func (noSyncFile) Sync() error { return nil }
