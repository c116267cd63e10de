package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/haraqa/haraqa/protocol"
)

// Recovery tests: write acknowledged messages, close, damage the real files,
// reopen, and check that every acknowledged message that some volume still
// holds reads back byte-identical, that nothing invalid is served, and that
// the volumes are byte-identical again (the helpers: recover_helpers_test.go).

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
					if _, err := lg(t, s, recTopic).Read(o, 0, 0); !errors.Is(err, ErrUnreadable) {
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
					r, err := lg(t, s, recTopic).Read(hit.base-1, 0, 0)
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
			if _, err := lg(t, s, "exact").Append(protocol.AppendBatch(nil, m...), AppendOptions{}); err != nil {
				t.Fatal(err)
			}
			exact = append(exact, m...)
		}
		populate(t, s, "cut", 0, 30)
		if err := lg(t, s, "cut").Truncate(15); err != nil {
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
			if info, err := lg(t, s, "empty").Info(); err != nil || info != (TopicInfo{}) {
				t.Fatalf("empty topic: %+v %v", info, err)
			}
			if info, err := lg(t, s, "cut").Info(); err != nil || info.Oldest != 15 {
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
				if err := lg(t, s, recTopic).Truncate(before); err != nil {
					t.Fatal(err)
				}
				check := func(s *Store) {
					t.Helper()
					rb := scan(t, s, recTopic)
					if rb.oldest != oldest || rb.next != int64(len(want)) {
						t.Fatalf("oldest %d next %d, want %d %d", rb.oldest, rb.next, oldest, len(want))
					}
					rb.wantMsgs(t, oldest, want[oldest:])
					if _, err := lg(t, s, recTopic).Read(oldest-1, 0, 0); !errors.Is(err, ErrOffsetOutOfRange) {
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
	info, err := lg(t, s, recTopic).Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.Oldest < 0 || info.Next < info.Oldest {
		t.Fatalf("info %+v: offsets overflowed", info)
	}
	rb := scan(t, s, recTopic)
	rb.wantMsgs(t, 0, msgs(0, 1))
	base, err := lg(t, s, recTopic).Append(protocol.AppendBatch(nil, []byte("m")), AppendOptions{})
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
