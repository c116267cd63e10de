package storage

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// Groups file as a log: torn records after a crash, the old format
// migrated, compaction, and fsyncs under FsyncAlways.

func groupsPath(opts Options, v int) string {
	return filepath.Join(opts.Volumes[v], topicsDir, "g", groupsName)
}

func readGroups(t *testing.T, opts Options, v int) []byte {
	t.Helper()
	b, err := os.ReadFile(groupsPath(opts, v))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameGroupsFiles fails unless every volume holds the same groups file.
func sameGroupsFiles(t *testing.T, opts Options) []byte {
	t.Helper()
	want := readGroups(t, opts, 0)
	for v := range opts.Volumes {
		if got := readGroups(t, opts, v); !bytes.Equal(got, want) {
			t.Fatalf("volume %d: groups file differs", v)
		}
	}
	return want
}

// TestGroupsTornRecord: a record cut short by a crash (half of it
// written) is dropped at open, as a commit never acknowledged, and the
// commits before it stay. Torn on every volume, the group keeps its
// previous offset; torn on the last volume only, the others' whole
// record is the reference. Every volume ends with the same file, and the
// next commits append to it.
func TestGroupsTornRecord(t *testing.T) {
	for _, tc := range []struct {
		name string
		torn []int // volumes whose last record is torn
		want int64 // group a's offset after reopen
	}{
		{"every volume", []int{0, 1, 2}, 3},
		{"last volume", []int{2}, 5},
		{"first volume", []int{0}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, opts := groupStore(t, 3, 10)
			for _, c := range []struct {
				g   string
				off int64
			}{{"a", 2}, {"b", 4}, {"a", 3}} {
				if err := lg(t, s, "g").CommitOffset(c.g, Commit{Offset: c.off}); err != nil {
					t.Fatal(err)
				}
			}
			mustClose(t, s)
			// The crash: a commit of a to 5 whose record reached the
			// torn volumes half-way, the others whole.
			rec := appendGroupRecord(nil, "a", false, 5, "")
			for v := range opts.Volumes {
				part := rec
				for _, tv := range tc.torn {
					if tv == v {
						part = rec[:len(rec)/2]
					}
				}
				f, err := os.OpenFile(groupsPath(opts, v), os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.Write(part); err != nil {
					t.Fatal(err)
				}
				f.Close()
			}
			s = mustOpen(t, opts)
			if o := mustFetch(t, s, "a"); o.Committed != tc.want {
				t.Fatalf("a after reopen: %+v, want %d", o, tc.want)
			}
			if o := mustFetch(t, s, "b"); o.Committed != 4 {
				t.Fatalf("b after reopen: %+v", o)
			}
			if s.Stats().Repairs == 0 {
				t.Error("no repair counted")
			}
			sameGroupsFiles(t, opts)
			if err := lg(t, s, "g").CommitOffset("b", Commit{Offset: 6}); err != nil {
				t.Fatal(err)
			}
			mustClose(t, s)
			s = mustOpen(t, opts)
			if o := mustFetch(t, s, "b"); o.Committed != 6 {
				t.Fatalf("b after the next commit: %+v", o)
			}
			if o := mustFetch(t, s, "a"); o.Committed != tc.want {
				t.Fatalf("a after the next commit: %+v", o)
			}
		})
	}
}

// TestGroupsOldFormatMigrated: a groups file of the old format (the whole
// table) loads; the first commit rewrites it as a log on every volume,
// which a reopen reads with every group.
func TestGroupsOldFormatMigrated(t *testing.T) {
	s, opts := groupStore(t, 2, 10)
	mustClose(t, s)
	old := encodeGroups(map[string]*groupEntry{"a": {committed: 3}, "b": {committed: 9}})
	for v := range opts.Volumes {
		if err := os.WriteFile(groupsPath(opts, v), old, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s = mustOpen(t, opts)
	if o := mustFetch(t, s, "b"); o.Committed != 9 {
		t.Fatalf("old format: %+v", o)
	}
	if !bytes.Equal(readGroups(t, opts, 0), old) {
		t.Fatal("the old file was rewritten before any commit")
	}
	if err := lg(t, s, "g").CommitOffset("a", Commit{Offset: 4}); err != nil {
		t.Fatal(err)
	}
	if b := sameGroupsFiles(t, opts); !strings.HasPrefix(string(b), groupsLogMagic) {
		t.Fatalf("not migrated: %q", b[:4])
	}
	mustClose(t, s)
	s = mustOpen(t, opts)
	if a, b := mustFetch(t, s, "a"), mustFetch(t, s, "b"); a.Committed != 4 || b.Committed != 9 {
		t.Fatalf("after migration: %+v, %+v", a, b)
	}
}

// TestGroupsLogCompacted: commits and deletions keep the log within twice
// its live size plus the slack, and a reopen after compactions has every
// group's last offset and none of the deleted.
func TestGroupsLogCompacted(t *testing.T) {
	s, opts := groupStore(t, 2, 10)
	for i := 0; i < 5000; i++ {
		g := fmt.Sprint("g", i%50)
		if i%7 == 6 {
			if err := lg(t, s, "g").DeleteGroup(g); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := lg(t, s, "g").CommitOffset(g, Commit{Offset: int64(i % 10)}); err != nil {
			t.Fatal(err)
		}
	}
	size := int64(len(sameGroupsFiles(t, opts)))
	if limit := 2*s.mustTopic(t, "g").groups.live + groupsCompactSlack; size > limit {
		t.Fatalf("log of %d bytes, past %d", size, limit)
	}
	want := map[string]int64{}
	for i := 0; i < 5000; i++ {
		g := fmt.Sprint("g", i%50)
		if i%7 == 6 {
			delete(want, g)
		} else {
			want[g] = int64(i % 10)
		}
	}
	mustClose(t, s)
	s = mustOpen(t, opts)
	gs, err := lg(t, s, "g").ListGroups()
	if err != nil || len(gs) != len(want) {
		t.Fatalf("%d groups after reopen, want %d (%v)", len(gs), len(want), err)
	}
	for _, o := range gs {
		if o.Committed != want[o.Group] {
			t.Fatalf("group %s: %d, want %d", o.Group, o.Committed, want[o.Group])
		}
	}
}

func (s *Store) mustTopic(t *testing.T, name string) *topic {
	t.Helper()
	tp, err := s.lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

// TestGroupCommitFsyncAlways: under FsyncAlways an appended commit fsyncs
// the groups file on every volume before it is acknowledged, and a failed
// fsync fails the commit.
func TestGroupCommitFsyncAlways(t *testing.T) {
	ffs := newFaultFS()
	opts := recOpts(t, 2)
	opts.FS, opts.Fsync = ffs, FsyncAlways
	s := mustOpen(t, opts)
	if err := s.CreateTopic("g"); err != nil {
		t.Fatal(err)
	}
	if err := lg(t, s, "g").CommitOffset("a", Commit{Offset: 0}); err != nil {
		t.Fatal(err)
	}
	var syncs atomic.Int64
	ffs.setSyncHook(func(name string) {
		if filepath.Base(name) == groupsName {
			syncs.Add(1)
		}
	})
	if err := lg(t, s, "g").CommitOffset("a", Commit{Offset: 0}); err != nil {
		t.Fatal(err)
	}
	if n := syncs.Load(); n != 2 {
		t.Fatalf("%d fsyncs of the groups file for one commit on 2 volumes", n)
	}
	ffs.failSync(filepath.Join(opts.Volumes[1], topicsDir, "g"))
	if err := lg(t, s, "g").CommitOffset("b", Commit{Offset: 0}); err == nil {
		t.Fatal("a commit whose fsync failed was acknowledged")
	}
}

// FuzzDecodeGroupsLog: the groups file decoder never panics on any input,
// and a valid prefix it reports decodes clean.
func FuzzDecodeGroupsLog(f *testing.F) {
	f.Add(encodeGroupsLog(map[string]*groupEntry{"a": {committed: 1, owner: "o"}, "b": {committed: 2}}))
	f.Add(appendGroupRecord([]byte(groupsLogMagic+"\x01\x00\x00\x00"), "a", true, 0, ""))
	f.Add([]byte("HRQL\x01\x00\x00\x00\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, good, clean, legacy, ok := decodeGroupsFile(b)
		if !ok || legacy {
			return
		}
		again, n, clean2, _, ok2 := decodeGroupsFile(b[:good])
		if !ok2 || !clean2 || n != good || len(again) != len(m) || clean != (good == len(b)) {
			t.Fatalf("prefix %d of %x: %v %d %v", good, b, ok2, n, clean2)
		}
	})
}
