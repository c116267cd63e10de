package storage

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/haraqa/haraqa/protocol"
)

// countFS counts the bytes written to files whose name starts with
// "groups" (the groups file and its temporary file).
type countFS struct {
	FS
	written atomic.Int64
}

func (c *countFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasPrefix(filepath.Base(name), groupsName) {
		return f, err
	}
	return &countFile{File: f, n: &c.written}, nil
}

type countFile struct {
	File
	n *atomic.Int64
}

func (f *countFile) WriteAt(b []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(b, off)
	f.n.Add(int64(n))
	return n, err
}

func (f *countFile) Writev(bufs [][]byte, off int64) (int, error) {
	n, err := f.File.Writev(bufs, off)
	f.n.Add(int64(n))
	return n, err
}

// longGroup is the i-th of the review's group names: 255 bytes.
func longGroup(i int) string {
	s := fmt.Sprintf("g%04d-", i)
	return s + strings.Repeat("x", 255-len(s))
}

// TestCommitWritesRecord: on a topic with 1024 groups of
// 255-byte names and 3 volumes, a commit writes its record, not the
// groups file: over enough commits to compact the file once, at most a
// few records' bytes per commit and volume (the whole table was
// rewritten on every volume before: 795 KiB a commit).
func TestCommitWritesRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("4000 commits")
	}
	cfs := &countFS{FS: OSFS{}}
	opts := recOpts(t, 3)
	opts.FS = cfs
	s := mustOpen(t, opts)
	if err := s.CreateTopic("g"); err != nil {
		t.Fatal(err)
	}
	if _, err := lg(t, s, "g").Append(protocol.AppendBatch(nil, []byte("m")), AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < MaxGroupsPerTopic; i++ {
		if err := lg(t, s, "g").CommitOffset(longGroup(i), Commit{Offset: 1}); err != nil {
			t.Fatal(err)
		}
	}
	const commits = 3000
	before := cfs.written.Load()
	for i := 0; i < commits; i++ {
		if err := lg(t, s, "g").CommitOffset(longGroup(i%MaxGroupsPerTopic), Commit{Offset: int64(i % 2)}); err != nil {
			t.Fatal(err)
		}
	}
	per := float64(cfs.written.Load()-before) / commits
	// A commit record of a 255-byte name without an owner.
	const record = 8 + 1 + 1 + 255 + 8 + 1
	t.Logf("%.0f bytes written per commit over 3 volumes (a record is %d bytes)", per, record)
	if per > 3*3*record {
		t.Fatalf("%.0f bytes written per commit over 3 volumes, want at most 3 records per volume (%d)", per, 3*3*record)
	}
	s.Close()
	s = mustOpen(t, opts)
	for i := 0; i < MaxGroupsPerTopic; i++ {
		want := int64(i % 2) // its last commit was i plus a multiple of 1024
		if o, err := lg(t, s, "g").FetchOffset(longGroup(i)); err != nil || o.Committed != want {
			t.Fatalf("group %d after reopen: %+v, %v; want %d", i, o, err, want)
		}
	}
}

// BenchmarkGroupCommit measures CommitOffset on a topic with 1024 groups
// of 255-byte names on 3 volumes (fsync never), with the bytes written to
// the groups files per commit.
func BenchmarkGroupCommit(b *testing.B) {
	cfs := &countFS{FS: OSFS{}}
	opts := recOpts(b, 3)
	opts.FS = cfs
	s := mustOpen(b, opts)
	if err := s.CreateTopic("g"); err != nil {
		b.Fatal(err)
	}
	if _, err := lg(b, s, "g").Append(protocol.AppendBatch(nil, []byte("m")), AppendOptions{}); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < MaxGroupsPerTopic; i++ {
		if err := lg(b, s, "g").CommitOffset(longGroup(i), Commit{Offset: 1}); err != nil {
			b.Fatal(err)
		}
	}
	before := cfs.written.Load()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := lg(b, s, "g").CommitOffset(longGroup(i%MaxGroupsPerTopic), Commit{Offset: int64(i % 2)}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cfs.written.Load()-before)/float64(b.N), "written-B/op")
}
