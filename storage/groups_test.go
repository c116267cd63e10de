package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// Consumer group tests: commits on real files, reopened after damage to
// one volume's copy, leases taken over after expiry, and the limits.

// groupStore opens a store on vols fresh volumes with topic "g" holding n
// messages.
func groupStore(t *testing.T, vols, n int) (*Store, Options) {
	t.Helper()
	opts := recOpts(t, vols)
	s := mustOpen(t, opts)
	if err := s.CreateTopic("g"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := lg(t, s, "g").Append(protocol.AppendBatch(nil, []byte(fmt.Sprint(i))), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return s, opts
}

func mustFetch(t *testing.T, s *Store, group string) GroupOffset {
	t.Helper()
	o, err := lg(t, s, "g").FetchOffset(group)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestGroupCommitFetch(t *testing.T) {
	s, _ := groupStore(t, 2, 10)
	if o := mustFetch(t, s, "a"); o.Committed != NoOffset || o.Start != 0 || o.Next != 10 {
		t.Fatalf("new group: %+v", o)
	}
	if err := lg(t, s, "g").CommitOffset("a", Commit{Offset: 4}); err != nil {
		t.Fatal(err)
	}
	if o := mustFetch(t, s, "a"); o.Committed != 4 || o.Start != 4 {
		t.Fatalf("after commit: %+v", o)
	}
	// Compare-and-set: a stale expectation is refused and changes nothing.
	err := lg(t, s, "g").CommitOffset("a", Commit{Offset: 6, Compare: true, Expect: 2})
	if !errors.Is(err, ErrCommitConflict) {
		t.Fatalf("stale compare: %v", err)
	}
	if err := lg(t, s, "g").CommitOffset("a", Commit{Offset: 6, Compare: true, Expect: 4}); err != nil {
		t.Fatal(err)
	}
	if err := lg(t, s, "g").CommitOffset("b", Commit{Offset: 1, Compare: true, Expect: 4}); !errors.Is(err, ErrCommitConflict) {
		t.Fatalf("compare on a group without a commit: %v", err)
	}
	if err := lg(t, s, "g").CommitOffset("b", Commit{Offset: 1, Compare: true, Expect: NoOffset}); err != nil {
		t.Fatal(err)
	}
	if err := lg(t, s, "g").CommitOffset("a", Commit{Offset: 11}); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("commit past the end: %v", err)
	}
	for _, bad := range []string{"", ".", "..", "a/b", "../x", string(make([]byte, 256))} {
		if err := lg(t, s, "g").CommitOffset(bad, Commit{Offset: 1}); !errors.Is(err, ErrInvalidGroup) {
			t.Errorf("group %q: %v", bad, err)
		}
	}
	gs, err := lg(t, s, "g").ListGroups()
	if err != nil || len(gs) != 2 || gs[0].Group != "a" || gs[0].Committed != 6 || gs[1].Group != "b" || gs[1].Committed != 1 {
		t.Fatalf("list: %+v, %v", gs, err)
	}
	if err := lg(t, s, "g").DeleteGroup("a"); err != nil {
		t.Fatal(err)
	}
	if o := mustFetch(t, s, "a"); o.Committed != NoOffset {
		t.Fatalf("after delete: %+v", o)
	}
}

// TestGroupCommitAfterTruncate: a truncation past a committed offset moves
// the group's start to the oldest offset; the commit itself is kept.
func TestGroupCommitAfterTruncate(t *testing.T) {
	s, _ := groupStore(t, 1, 30)
	if err := lg(t, s, "g").CommitOffset("a", Commit{Offset: 5}); err != nil {
		t.Fatal(err)
	}
	if err := lg(t, s, "g").Truncate(25); err != nil {
		t.Fatal(err)
	}
	o := mustFetch(t, s, "a")
	if o.Committed != 5 || o.Start != o.Oldest || o.Oldest != 25 {
		t.Fatalf("after truncate: %+v", o)
	}
	if res, err := lg(t, s, "g").Read(o.Start, 1, 0); err != nil {
		t.Fatalf("read from the start: %v", err)
	} else {
		res.Release()
	}
	// Committing after the truncation works from where the group is.
	if err := lg(t, s, "g").CommitOffset("a", Commit{Offset: 27, Compare: true, Expect: 5}); err != nil {
		t.Fatal(err)
	}
}

// TestGroupLease: one member at a time; a second gets ErrGroupBusy for
// leases and commits; after expiry another takes over from the last commit.
func TestGroupLease(t *testing.T) {
	s, _ := groupStore(t, 1, 10)
	o, err := lg(t, s, "g").Lease("a", "m1", MinLease)
	if err != nil || o.Member != "m1" || o.LeaseLeft <= 0 || o.Start != 0 {
		t.Fatalf("take: %+v, %v", o, err)
	}
	if err := lg(t, s, "g").CommitOffset("a", Commit{Offset: 3, Member: "m1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := lg(t, s, "g").Lease("a", "m2", time.Second); !errors.Is(err, ErrGroupBusy) {
		t.Fatalf("second member: %v", err)
	}
	if err := lg(t, s, "g").CommitOffset("a", Commit{Offset: 4, Member: "m2"}); !errors.Is(err, ErrGroupBusy) {
		t.Fatalf("second member's commit: %v", err)
	}
	if err := lg(t, s, "g").CommitOffset("a", Commit{Offset: 4}); !errors.Is(err, ErrGroupBusy) {
		t.Fatalf("commit without a member: %v", err)
	}
	if err := lg(t, s, "g").DeleteGroup("a"); !errors.Is(err, ErrGroupBusy) {
		t.Fatalf("delete of a leased group: %v", err)
	}
	// m1 stops renewing: m2 takes over once the lease ends.
	deadline := time.Now().Add(5 * time.Second)
	for {
		o, err = lg(t, s, "g").Lease("a", "m2", time.Second)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrGroupBusy) || time.Now().After(deadline) {
			t.Fatalf("takeover: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if o.Start != 3 || o.Committed != 3 || o.Member != "m2" {
		t.Fatalf("takeover state: %+v", o)
	}
	if err := lg(t, s, "g").CommitOffset("a", Commit{Offset: 5, Member: "m1"}); !errors.Is(err, ErrGroupBusy) {
		t.Fatalf("the old member's late commit: %v", err)
	}
	if o, err := lg(t, s, "g").ReleaseLease("a", "m2"); err != nil || o.Member != "" {
		t.Fatalf("release: %+v, %v", o, err)
	}
	if _, err := lg(t, s, "g").Lease("a", "m1", time.Second); err != nil {
		t.Fatalf("take after release: %v", err)
	}
	if _, err := lg(t, s, "g").Lease("a", "", time.Second); !errors.Is(err, ErrInvalidGroup) {
		t.Fatalf("empty member: %v", err)
	}
}

// TestGroupsSurviveReopen: commits are on every volume; a missing,
// truncated or corrupted copy on one volume is repaired from another.
func TestGroupsSurviveReopen(t *testing.T) {
	for _, damage := range []struct {
		name string
		fn   func(path string) error
	}{
		{"removed", os.Remove},
		{"truncated", func(p string) error { return os.Truncate(p, 9) }},
		{"corrupted", func(p string) error {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[len(b)/2] ^= 0x40
			return os.WriteFile(p, b, 0o644)
		}},
		{"zeroed", func(p string) error {
			fi, err := os.Stat(p)
			if err != nil {
				return err
			}
			return os.WriteFile(p, make([]byte, fi.Size()), 0o644)
		}},
		{"volume removed", func(p string) error { return os.RemoveAll(filepath.Dir(filepath.Dir(p))) }},
	} {
		for _, vol := range []int{0, 2} {
			t.Run(fmt.Sprintf("%s on volume %d", damage.name, vol), func(t *testing.T) {
				s, opts := groupStore(t, 3, 10)
				for i, g := range []string{"a", "b", "c"} {
					if err := lg(t, s, "g").CommitOffset(g, Commit{Offset: int64(i + 2)}); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				path := filepath.Join(opts.Volumes[vol], topicsDir, "g", groupsName)
				if err := damage.fn(path); err != nil {
					t.Fatal(err)
				}
				s = mustOpen(t, opts)
				for i, g := range []string{"a", "b", "c"} {
					if o := mustFetch(t, s, g); o.Committed != int64(i+2) {
						t.Fatalf("group %s after repair: %+v", g, o)
					}
				}
				if st := s.Stats(); st.Repairs == 0 {
					t.Errorf("no repair counted: %+v", st)
				}
				want, err := os.ReadFile(filepath.Join(opts.Volumes[1], topicsDir, "g", groupsName))
				if err != nil {
					t.Fatal(err)
				}
				for _, v := range opts.Volumes {
					got, err := os.ReadFile(filepath.Join(v, topicsDir, "g", groupsName))
					if err != nil || string(got) != string(want) {
						t.Errorf("volume %s: groups file differs after repair (%v)", v, err)
					}
				}
			})
		}
	}
}

// TestGroupsLastVolumeWins: when the volumes hold different valid copies
// (a commit cut short by a crash after the first volume), the last
// volume's, never acknowledged past, is the reference.
func TestGroupsLastVolumeWins(t *testing.T) {
	s, opts := groupStore(t, 2, 10)
	if err := lg(t, s, "g").CommitOffset("a", Commit{Offset: 3}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	newer := encodeGroups(map[string]*groupEntry{"a": {committed: 7}})
	if err := os.WriteFile(filepath.Join(opts.Volumes[0], topicsDir, "g", groupsName), newer, 0o644); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, opts)
	if o := mustFetch(t, s, "a"); o.Committed != 3 {
		t.Fatalf("got %+v, want the last volume's 3", o)
	}
}

// TestGroupsUnreadableEverywhere: no valid copy anywhere opens with no
// groups (logged and counted), never a wrong offset.
func TestGroupsUnreadableEverywhere(t *testing.T) {
	s, opts := groupStore(t, 2, 10)
	if err := lg(t, s, "g").CommitOffset("a", Commit{Offset: 3}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, v := range opts.Volumes {
		if err := os.WriteFile(filepath.Join(v, topicsDir, "g", groupsName), []byte("HRQGjunk"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s = mustOpen(t, opts)
	if o := mustFetch(t, s, "a"); o.Committed != NoOffset {
		t.Fatalf("got %+v", o)
	}
	if s.Stats().UnreadableRanges == 0 {
		t.Error("not counted")
	}
}

// TestGroupsDeletedWithTopic: deleting a topic deletes its groups; a topic
// created again under the name starts without any.
func TestGroupsDeletedWithTopic(t *testing.T) {
	s, opts := groupStore(t, 2, 10)
	l := lg(t, s, "g")
	if err := l.CommitOffset("a", Commit{Offset: 3}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTopic("g"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.FetchOffset("a"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("fetch on a deleted topic: %v", err)
	}
	if err := s.CreateTopic("g"); err != nil {
		t.Fatal(err)
	}
	if o := mustFetch(t, s, "a"); o.Committed != NoOffset {
		t.Fatalf("recreated topic: %+v", o)
	}
	if n := s.groupCount.Load(); n != 0 {
		t.Fatalf("group count %d after the delete", n)
	}
	s.Close()
	s = mustOpen(t, opts)
	if o := mustFetch(t, s, "a"); o.Committed != NoOffset {
		t.Fatalf("reopened: %+v", o)
	}
}

// TestGroupsPerTopicLimit: the group after MaxGroupsPerTopic is refused
// with an error naming the limit; expired leases make room.
func TestGroupsPerTopicLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("1024 commits")
	}
	s, _ := groupStore(t, 1, 1)
	for i := 0; i < MaxGroupsPerTopic; i++ {
		if err := lg(t, s, "g").CommitOffset(fmt.Sprintf("g%04d", i), Commit{Offset: 1}); err != nil {
			t.Fatal(err)
		}
	}
	err := lg(t, s, "g").CommitOffset("extra", Commit{Offset: 1})
	if !errors.Is(err, ErrTooManyGroups) || !contains(err.Error(), "MaxGroupsPerTopic") {
		t.Fatalf("over the limit: %v", err)
	}
	if _, err := lg(t, s, "g").Lease("extra", "m", time.Second); !errors.Is(err, ErrTooManyGroups) {
		t.Fatalf("lease over the limit: %v", err)
	}
	if err := lg(t, s, "g").DeleteGroup("g0000"); err != nil {
		t.Fatal(err)
	}
	if err := lg(t, s, "g").CommitOffset("extra", Commit{Offset: 1}); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// encodeGroups returns a groups file of the old format (the whole table,
// one CRC) holding the committed groups of m, by name, as the server
// before the log wrote it.
func encodeGroups(m map[string]*groupEntry) []byte {
	names := make([]string, 0, len(m))
	for n, e := range m {
		if e.committed != NoOffset {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	b := []byte(groupsMagic)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(names)))
	for _, n := range names {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(n)))
		b = append(b, n...)
		b = binary.LittleEndian.AppendUint64(b, uint64(m[n].committed))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func TestGroupsFileRoundTrip(t *testing.T) {
	m := map[string]*groupEntry{"b": {committed: 2}, "a": {committed: 1}, "lease-only": {committed: NoOffset}}
	b := encodeGroups(m)
	got, ok := decodeGroups(b)
	if !ok || len(got) != 2 || got["a"] != 1 || got["b"] != 2 {
		t.Fatalf("round trip: %v, %v", got, ok)
	}
	for i := range b {
		if _, ok := decodeGroups(b[:i]); ok {
			t.Fatalf("a file cut to %d bytes decodes", i)
		}
	}
}

// FuzzDecodeGroups: the groups file decoder never panics, and what it
// accepts encodes back to the same bytes.
func FuzzDecodeGroups(f *testing.F) {
	f.Add(encodeGroups(nil))
	f.Add(encodeGroups(map[string]*groupEntry{"a": {committed: 1}, "billing": {committed: 1 << 40}}))
	f.Add([]byte("HRQG\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, ok := decodeGroups(b)
		if !ok {
			return
		}
		entries := make(map[string]*groupEntry, len(m))
		for n, off := range m {
			entries[n] = &groupEntry{committed: off}
		}
		if again := encodeGroups(entries); string(again) != string(b) {
			t.Fatalf("accepted %x, encodes back to %x", b, again)
		}
	})
}

// TestGroupCommitIOError: a commit whose groups file cannot be written or
// fsynced on a volume is not acknowledged, leaves the committed offset as
// it was, says so without a server path, and the next commit succeeds.
func TestGroupCommitIOError(t *testing.T) {
	for _, fsync := range []FsyncPolicy{FsyncAlways, FsyncNever} {
		t.Run(fsync.String(), func(t *testing.T) {
			ffs := newFaultFS()
			opts := recOpts(t, 2)
			opts.FS, opts.Fsync = ffs, fsync
			s := mustOpen(t, opts)
			if err := s.CreateTopic("g"); err != nil {
				t.Fatal(err)
			}
			if _, err := lg(t, s, "g").Append(protocol.AppendBatch(nil, []byte("a"), []byte("b")), AppendOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := lg(t, s, "g").CommitOffset("a", Commit{Offset: 1}); err != nil {
				t.Fatal(err)
			}
			// The second volume's file (appended) and temporary file
			// (rewritten) fail: after the first volume has the record.
			ffs.setFailOpen(func(name string) bool {
				return strings.HasPrefix(name, opts.Volumes[1]) && strings.Contains(filepath.Base(name), groupsName)
			})
			err := lg(t, s, "g").CommitOffset("a", Commit{Offset: 2})
			if err == nil || strings.Contains(err.Error(), opts.Volumes[1]) {
				t.Fatalf("failed commit: %v", err)
			}
			if err := lg(t, s, "g").CommitOffset("new", Commit{Offset: 2}); err == nil {
				t.Fatal("a new group's failed commit succeeded")
			}
			if o := mustFetch(t, s, "a"); o.Committed != 1 {
				t.Fatalf("after the failure: %+v", o)
			}
			if gs, _ := lg(t, s, "g").ListGroups(); len(gs) != 1 {
				t.Fatalf("the failed new group is listed: %+v", gs)
			}
			ffs.setFailOpen(nil)
			if err := lg(t, s, "g").CommitOffset("a", Commit{Offset: 2, Compare: true, Expect: 1}); err != nil {
				t.Fatal(err)
			}
			s.Close()
			s = mustOpen(t, opts)
			if o := mustFetch(t, s, "a"); o.Committed != 2 {
				t.Fatalf("reopened: %+v", o)
			}
		})
	}
}
