package storage

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

var updateGolden = flag.Bool("update-epochs-golden", false, "print the epochs file golden bytes instead of checking them")

// epochsGolden is the epochs file holding (1, 0), (3, 100), (7, 2^40): the
// layout in doc.go, byte for byte.
const epochsGolden = "48525145" + // "HRQE"
	"01000000" + // version 1
	"03000000" + // 3 entries
	"0100000000000000" + "0000000000000000" + // epoch 1 at 0
	"0300000000000000" + "6400000000000000" + // epoch 3 at 100
	"0700000000000000" + "0000000000010000" + // epoch 7 at 2^40
	"cc3f09f6" // CRC32C of the bytes before

func TestEpochsGolden(t *testing.T) {
	es := []EpochStart{{1, 0}, {3, 100}, {7, 1 << 40}}
	got := appendEpochs(nil, es)
	if *updateGolden {
		t.Logf("epochs golden: %x", got)
		return
	}
	want, err := hex.DecodeString(epochsGolden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("epochs file\n got %x\nwant %x", got, want)
	}
	back, err := parseEpochs(want)
	if err != nil || !slices.Equal(back, es) {
		t.Fatalf("parse: %v %v", back, err)
	}
	if back, err := parseEpochs(appendEpochs(nil, nil)); err != nil || len(back) != 0 {
		t.Fatalf("empty list: %v %v", back, err)
	}
}

// TestEpochsParseErrors tells a file cut short (torn) from a damaged one.
func TestEpochsParseErrors(t *testing.T) {
	good := appendEpochs(nil, []EpochStart{{1, 0}, {2, 10}})
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, errEpochsTorn},
		{"header cut", good[:6], errEpochsTorn},
		{"entries cut", good[:len(good)-5], errEpochsTorn},
		{"zeros", make([]byte, len(good)), errEpochsCorrupt},
		{"bad magic short", []byte("XY"), errEpochsCorrupt},
		{"flipped entry", flip(good, 14), errEpochsCorrupt},
		{"flipped CRC", flip(good, len(good)-1), errEpochsCorrupt},
		{"version", withCRC(flip(good, 4)), errEpochsCorrupt},
		{"trailing bytes", append(slices.Clone(good), 0), errEpochsCorrupt},
		{"huge count", withCRC(append(append([]byte(epochsMagic), 1, 0, 0, 0), 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0)), errEpochsCorrupt},
		{"not ascending", appendEpochs(nil, []EpochStart{{2, 0}, {1, 10}}), errEpochsCorrupt},
		{"same start", appendEpochs(nil, []EpochStart{{1, 5}, {2, 5}}), errEpochsCorrupt},
		{"negative", appendEpochs(nil, []EpochStart{{-1, 0}}), errEpochsCorrupt},
	} {
		if _, err := parseEpochs(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func flip(b []byte, i int) []byte {
	b = slices.Clone(b)
	b[i] ^= 0x10
	return b
}

// withCRC recomputes the CRC of an epochs file: a damaged field with a
// valid checksum.
func withCRC(b []byte) []byte {
	body := slices.Clone(b[:len(b)-epochsCRCSize])
	return binary.LittleEndian.AppendUint32(body, crc32.Checksum(body, castagnoli))
}

func FuzzParseEpochs(f *testing.F) {
	f.Add(appendEpochs(nil, nil))
	f.Add(appendEpochs(nil, []EpochStart{{1, 0}, {3, 100}}))
	f.Add([]byte("HRQE"))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := parseEpochs(b)
		if err != nil {
			return
		}
		if got := appendEpochs(nil, es); !bytes.Equal(got, b) {
			t.Fatalf("parsed %v from %x, which encodes as %x", es, b, got)
		}
	})
}

// TestEpochs: SetEpoch's rules, Epochs, and EpochEnd's KIP-279 answers,
// kept by a restart on every volume.
func TestEpochs(t *testing.T) {
	s, opts := openTest(t, 2)
	populate(t, s, "e", 0, 31) // next 31
	if es, err := lg(t, s, "e").Epochs(); err != nil || len(es) != 0 {
		t.Fatalf("no epochs yet: %v %v", es, err)
	}
	if found, end, err := lg(t, s, "e").EpochEnd(5); err != nil || found != -1 || end != 0 {
		t.Fatalf("EpochEnd with no epochs: %d %d %v", found, end, err)
	}
	for _, e := range []EpochStart{{2, 0}, {3, 11}, {5, 25}} {
		if err := lg(t, s, "e").SetEpoch(e.Epoch, e.Start); err != nil {
			t.Fatalf("SetEpoch %v: %v", e, err)
		}
	}
	want := []EpochStart{{2, 0}, {3, 11}, {5, 25}}
	for _, c := range []struct {
		epoch, start int64
		err          error
	}{
		{5, 25, nil},                        // the last again: no-op
		{5, 28, nil},                        // the last epoch began earlier: no-op
		{4, 28, ErrInvalidEpoch},            // below the last
		{6, 20, ErrInvalidEpoch},            // a start before the last one's
		{6, MaxOffset + 1, ErrInvalidEpoch}, // past every offset
		{-1, 30, ErrInvalidEpoch},           // negative
	} {
		if err := lg(t, s, "e").SetEpoch(c.epoch, c.start); !errors.Is(err, c.err) {
			t.Fatalf("SetEpoch(%d, %d): %v, want %v", c.epoch, c.start, err, c.err)
		}
	}
	if _, err := s.Log("missing"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("SetEpoch on a missing topic: %v", err)
	}
	// A new epoch starting where the last began replaces it.
	if err := lg(t, s, "e").SetEpoch(6, 31); err != nil {
		t.Fatal(err)
	}
	if err := lg(t, s, "e").SetEpoch(8, 31); err != nil {
		t.Fatal(err)
	}
	want = append(want, EpochStart{8, 31})
	check := func(when string) {
		t.Helper()
		if es, err := lg(t, s, "e").Epochs(); err != nil || !slices.Equal(es, want) {
			t.Fatalf("%s: epochs %v %v, want %v", when, es, err, want)
		}
		for _, c := range []struct{ ask, found, end int64 }{
			{0, -1, 0}, // below every epoch: KIP-279's undefined epoch, at the start
			{1, -1, 0},
			{2, 2, 11},
			{3, 3, 25},
			{4, 3, 25}, // never recorded: the largest below it
			{5, 5, 31},
			{6, 5, 31}, // replaced: it held no offsets
			{7, 5, 31},
			{8, 8, 31}, // the last: the next offset
			{100, 8, 31},
		} {
			if found, end, err := lg(t, s, "e").EpochEnd(c.ask); err != nil || found != c.found || end != c.end {
				t.Fatalf("%s: EpochEnd(%d) = %d %d %v, want %d %d", when, c.ask, found, end, err, c.found, c.end)
			}
		}
	}
	check("set")
	populate(t, s, "e", 31, 5) // next 37
	if found, end, _ := lg(t, s, "e").EpochEnd(9); found != 8 || end != 37 {
		t.Fatalf("the last epoch ends at the next offset: %d %d", found, end)
	}
	if next, err := lg(t, s, "e").TruncateAfter(31); err != nil || next != 31 {
		t.Fatalf("cut: %d %v", next, err)
	}
	mustClose(t, s)
	s = mustOpen(t, opts)
	if st := s.Stats(); st.Repairs != 0 {
		t.Fatalf("reopen repaired: %+v", st)
	}
	want = want[:3] // (8, 31) started at the cut: dropped
	check2 := func(when string) {
		t.Helper()
		if es, err := lg(t, s, "e").Epochs(); err != nil || !slices.Equal(es, want) {
			t.Fatalf("%s: epochs %v %v, want %v", when, es, err, want)
		}
	}
	check2("cut and reopened")
	sameVolumes(t, opts, "e")

	// A topic deleted and created again starts without epochs.
	if err := s.DeleteTopic("e"); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTopic("e"); err != nil {
		t.Fatal(err)
	}
	if es, _ := lg(t, s, "e").Epochs(); len(es) != 0 {
		t.Fatalf("a topic created again has the old epochs: %v", es)
	}
}

// TestEpochsTruncateAfter: a cut forgets every epoch starting at or after
// the new next offset, the one starting exactly there included, and keeps
// the others; a cut to empty keeps those before the start; a cut at or
// past the next offset forgets those starting at or after it.
func TestEpochsTruncateAfter(t *testing.T) {
	s, opts := openTest(t, 3)
	populate(t, s, "e", 0, 61)
	for _, e := range []EpochStart{{1, 0}, {2, 25}, {3, 29}, {4, 40}} {
		if err := lg(t, s, "e").SetEpoch(e.Epoch, e.Start); err != nil {
			t.Fatal(err)
		}
	}
	if next, err := lg(t, s, "e").TruncateAfter(30); err != nil || next != 29 {
		t.Fatalf("cut: %d %v", next, err)
	}
	want := []EpochStart{{1, 0}, {2, 25}}
	if es, _ := lg(t, s, "e").Epochs(); !slices.Equal(es, want) {
		t.Fatalf("epochs after the cut %v, want %v", es, want)
	}
	if found, end, _ := lg(t, s, "e").EpochEnd(3); found != 2 || end != 29 {
		t.Fatalf("EpochEnd(3) after the cut: %d %d, want 2 29", found, end)
	}
	// The follower copies under epoch 5 from 29.
	if err := lg(t, s, "e").SetEpoch(5, 29); err != nil {
		t.Fatal(err)
	}
	want = append(want, EpochStart{5, 29})
	for _, v := range opts.Volumes {
		b, err := os.ReadFile(filepath.Join(v, topicsDir, "e", epochsName))
		if err != nil || !bytes.Equal(b, appendEpochs(nil, want)) {
			t.Fatalf("volume %s: epochs file %x %v", v, b, err)
		}
	}
	if err := lg(t, s, "e").Truncate(27); err != nil {
		t.Fatal(err)
	}
	if next, err := lg(t, s, "e").TruncateAfter(0); err != nil || next != 27 {
		t.Fatalf("cut to empty: %d %v", next, err)
	}
	want = want[:2] // (5, 29) starts after the start, 27
	if es, _ := lg(t, s, "e").Epochs(); !slices.Equal(es, want) {
		t.Fatalf("epochs after a cut to empty %v, want %v", es, want)
	}
	if found, end, _ := lg(t, s, "e").EpochEnd(9); found != 2 || end != 27 {
		t.Fatalf("EpochEnd after a cut to empty: %d %d, want 2 27", found, end)
	}
	// A cut at the next offset cuts no batch but forgets an epoch begun
	// there (a leader that took nothing); one past it forgets nothing.
	populate(t, s, "e", 27, 3)
	info, _ := lg(t, s, "e").Info()
	if err := lg(t, s, "e").SetEpoch(6, info.Next); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		at   int64
		want []EpochStart
	}{
		{info.Next + 1, append(slices.Clone(want), EpochStart{6, info.Next})},
		{info.Next, want},
	} {
		if next, err := lg(t, s, "e").TruncateAfter(c.at); err != nil || next != info.Next {
			t.Fatalf("cut at %d with next %d: %d %v", c.at, info.Next, next, err)
		}
		if es, _ := lg(t, s, "e").Epochs(); !slices.Equal(es, c.want) {
			t.Fatalf("epochs after a cut at %d with next %d: %v, want %v", c.at, info.Next, es, c.want)
		}
	}
}

// TestEpochsTorn damages the epochs file (zeros, cut short, removed) on
// one volume, which is repaired from another and counted, and on every
// volume, where the topic opens without epochs, counted as unreadable;
// Open never fails for it.
func TestEpochsTorn(t *testing.T) {
	want := []EpochStart{{1, 0}, {4, 10}, {9, 20}}
	damages := map[string]func(t *testing.T, path string){
		"zeros": func(t *testing.T, path string) {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, make([]byte, fi.Size()), 0o644); err != nil {
				t.Fatal(err)
			}
		},
		"cut":     func(t *testing.T, path string) { truncateFile(t, path, epochsHeaderSize+epochEntrySize+3) },
		"empty":   func(t *testing.T, path string) { truncateFile(t, path, 0) },
		"flipped": func(t *testing.T, path string) { flipByte(t, path, epochsHeaderSize+20) },
		"removed": func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, damage := range damages {
		for _, where := range []string{"first", "last", "all"} {
			t.Run(name+"/"+where, func(t *testing.T) {
				opts := recOpts(t, 3)
				s := mustOpen(t, opts)
				populate(t, s, "e", 0, 25)
				for _, e := range want {
					if err := lg(t, s, "e").SetEpoch(e.Epoch, e.Start); err != nil {
						t.Fatal(err)
					}
				}
				mustClose(t, s)
				good, err := os.ReadFile(filepath.Join(opts.Volumes[0], topicsDir, "e", epochsName))
				if err != nil {
					t.Fatal(err)
				}
				vols := map[string][]int{"first": {0}, "last": {2}, "all": {0, 1, 2}}[where]
				for _, v := range vols {
					damage(t, filepath.Join(opts.Volumes[v], topicsDir, "e", epochsName))
				}
				s = mustOpen(t, opts)
				es, err := lg(t, s, "e").Epochs()
				if err != nil {
					t.Fatal(err)
				}
				st := s.Stats()
				if where != "all" {
					if !slices.Equal(es, want) || st.Repairs != 1 || st.UnreadableRanges != 0 {
						t.Fatalf("epochs %v, stats %+v: want %v repaired once", es, st, want)
					}
					for _, v := range opts.Volumes {
						if b, err := os.ReadFile(filepath.Join(v, topicsDir, "e", epochsName)); err != nil || !bytes.Equal(b, good) {
							t.Fatalf("volume %s not repaired: %x %v", v, b, err)
						}
					}
				} else {
					wantUnreadable := int64(1)
					if name == "removed" {
						wantUnreadable = 0 // no file anywhere: no epochs recorded
					}
					if len(es) != 0 || st.UnreadableRanges != wantUnreadable || st.Repairs != 0 {
						t.Fatalf("epochs %v, stats %+v: want none, %d unreadable", es, st, wantUnreadable)
					}
				}
				// The topic works, and a new epoch rewrites every copy.
				if err := lg(t, s, "e").SetEpoch(10, 25); err != nil {
					t.Fatal(err)
				}
				populate(t, s, "e", 25, 3)
				mustClose(t, s)
				s = mustOpen(t, opts)
				if st := s.Stats(); st.Repairs != 0 || st.UnreadableRanges != 0 {
					t.Fatalf("second open: %+v", st)
				}
				if es, _ := lg(t, s, "e").Epochs(); len(es) == 0 || es[len(es)-1] != (EpochStart{10, 25}) {
					t.Fatalf("after a new epoch: %v", es)
				}
			})
		}
	}
}
