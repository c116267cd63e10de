package storage

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// appendSegments appends n single-message batches to topic of a store with
// Entries 10, so every ten start a segment, and returns the bases of the
// sealed segments.
func appendSegments(t *testing.T, s *Store, topic string, n int) []int64 {
	t.Helper()
	if err := s.CreateTopic(topic); err != nil {
		t.Fatal(err)
	}
	for i, m := range msgs(0, n) {
		if _, err := lg(t, s, topic).Append(protocol.AppendBatch(nil, m), AppendOptions{}); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	var sealed []int64
	for b := int64(0); b+10 < int64(n); b += 10 {
		sealed = append(sealed, b)
	}
	return sealed
}

// wantIndex returns seg's index as open would rebuild it from the log.
func wantIndex(t *testing.T, s *Store, topic string, base int64) []byte {
	t.Helper()
	tp, err := s.lookup(topic)
	if err != nil {
		t.Fatal(err)
	}
	tp.mu.RLock()
	defer tp.mu.RUnlock()
	for _, sg := range tp.segs {
		if sg.base == base {
			return appendIndex(nil, sg.base, sg.entries)
		}
	}
	t.Fatalf("no segment %d", base)
	return nil
}

// The index files of sealed segments are written once the topic stops
// rolling, on every volume, without a Close.
func TestIndexWrittenAfterBurst(t *testing.T) {
	s, opts := openTest(t, 2)
	sealed := appendSegments(t, s, "idx", 45)
	deadline := time.Now().Add(10 * indexDelay)
	for _, base := range sealed {
		want := wantIndex(t, s, "idx", base)
		for _, vol := range opts.Volumes {
			path := segPath(vol, "idx", base, idxSuffix)
			for {
				got, err := os.ReadFile(path)
				if err == nil && bytes.Equal(got, want) {
					break
				}
				if err != nil && !errors.Is(err, fs.ErrNotExist) {
					t.Fatal(err)
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: %x (%v), want %x by now", path, got, err, want)
				}
				time.Sleep(indexDelay / 10)
			}
		}
	}
	mustClose(t, s)
	s = mustOpen(t, opts)
	if st := s.Stats(); st.Repairs != 0 {
		t.Fatalf("reopen repaired %+v", st)
	}
	if got := readAll(t, s, "idx", 0); len(got) != 45 {
		t.Fatalf("read %d messages, want 45", len(got))
	}
}

// Close writes the indexes still queued, so a clean reopen has nothing to
// write, and a crash before it (the queue lost) is no repair either.
func TestIndexQueuedAtClose(t *testing.T) {
	s, opts := openTest(t, 1)
	sealed := appendSegments(t, s, "idx", 35)
	tp, err := s.lookup("idx")
	if err != nil {
		t.Fatal(err)
	}
	tp.index.mu.Lock()
	queued := len(tp.index.queued)
	tp.index.mu.Unlock()
	mustClose(t, s)
	for _, base := range sealed {
		if _, err := os.Stat(segPath(opts.Volumes[0], "idx", base, idxSuffix)); err != nil {
			t.Fatalf("after close (%d were queued): %v", queued, err)
		}
	}
	// As after a crash with the queue unwritten: open writes them again
	// from the logs and counts no repair.
	for _, base := range sealed {
		if err := os.Remove(segPath(opts.Volumes[0], "idx", base, idxSuffix)); err != nil {
			t.Fatal(err)
		}
	}
	s = mustOpen(t, opts)
	if st := s.Stats(); st.Repairs != 0 {
		t.Fatalf("missing indexes counted as repairs: %+v", st)
	}
	for _, base := range sealed {
		got, err := os.ReadFile(segPath(opts.Volumes[0], "idx", base, idxSuffix))
		if err != nil {
			t.Fatal(err)
		}
		if want := wantIndex(t, s, "idx", base); !bytes.Equal(got, want) {
			t.Fatalf("segment %d: index %x, want %x", base, got, want)
		}
	}
}

// A truncation or deletion while indexes are queued: no index file of a
// deleted segment (or topic) comes back when the queue is written.
func TestIndexQueueTruncateDelete(t *testing.T) {
	s, opts := openTest(t, 2)
	appendSegments(t, s, "idx", 45)
	tp, err := s.lookup("idx")
	if err != nil {
		t.Fatal(err)
	}
	tp.bg.Wait() // every sealed segment queued
	if err := lg(t, s, "idx").Truncate(25); err != nil {
		t.Fatal(err)
	}
	if err := tp.index.writeQueued(); err != nil {
		t.Fatal(err)
	}
	for _, vol := range opts.Volumes {
		for _, base := range []int64{0, 10} {
			if _, err := os.Stat(segPath(vol, "idx", base, idxSuffix)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("index of truncated segment %d: %v", base, err)
			}
		}
		if _, err := os.Stat(segPath(vol, "idx", 30, idxSuffix)); err != nil {
			t.Fatalf("index of kept segment 30: %v", err)
		}
	}

	appendSegments(t, s, "gone", 45)
	tp, err = s.lookup("gone")
	if err != nil {
		t.Fatal(err)
	}
	tp.bg.Wait()
	if err := s.DeleteTopic("gone"); err != nil {
		t.Fatal(err)
	}
	if err := tp.index.writeQueued(); err != nil {
		t.Fatal(err)
	}
	for _, vol := range opts.Volumes {
		if _, err := os.Stat(filepath.Dir(segPath(vol, "gone", 0, idxSuffix))); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("deleted topic's directory: %v", err)
		}
	}
}

// WaitDeleted returns once a deleted topic's files are gone from every
// volume, and at once when nothing is being removed.
func TestWaitDeleted(t *testing.T) {
	s, opts := openTest(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitDeleted(ctx); err != nil {
		t.Fatalf("nothing deleted: %v", err)
	}
	appendSegments(t, s, "gone", 45)
	if err := s.DeleteTopic("gone"); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitDeleted(ctx); err != nil {
		t.Fatal(err)
	}
	for _, vol := range opts.Volumes {
		ents, err := os.ReadDir(filepath.Join(vol, topicsDir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), deletedPrefix) {
				t.Fatalf("%s still holds %s after WaitDeleted", vol, e.Name())
			}
		}
	}
	// A context that has ended is reported while a removal is pending.
	s.mu.Lock()
	s.pendingRemovals++
	s.removing = make(chan struct{})
	s.mu.Unlock()
	done, stop := context.WithCancel(context.Background())
	stop()
	if err := s.WaitDeleted(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitDeleted with a cancelled context: %v", err)
	}
	s.mu.Lock()
	s.pendingRemovals--
	close(s.removing)
	s.removing = nil
	s.mu.Unlock()
}

// openNext counts this process's descriptors open on a next.tmp under dir.
func openNext(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	n := 0
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(target, dir) && filepath.Base(target) == nextName {
			n++
		}
	}
	return n
}

// A busy topic keeps its next segment's files open; once idle it closes
// them (they stay on disk), and the next roll opens them by name.
func TestIdleClosesPreparedFiles(t *testing.T) {
	s, opts := openTest(t, 2)
	appendSegments(t, s, "idle", 25)
	tp, err := s.lookup("idle")
	if err != nil {
		t.Fatal(err)
	}
	tp.bg.Wait()
	if n := openNext(t, opts.Volumes[0]) + openNext(t, opts.Volumes[1]); n != 2 {
		t.Fatalf("%d prepared files open while busy, want 2 (one per volume)", n)
	}
	for deadline := time.Now().Add(10 * indexDelay); openNext(t, opts.Volumes[0])+openNext(t, opts.Volumes[1]) > 0; {
		if time.Now().After(deadline) {
			t.Fatal("prepared files still open after the topic went idle")
		}
		time.Sleep(indexDelay / 10)
	}
	for _, vol := range opts.Volumes {
		if _, err := os.Stat(filepath.Join(vol, topicsDir, "idle", nextName)); err != nil {
			t.Fatalf("prepared file gone after idle: %v", err)
		}
	}
	// The next roll (at 30) renames and opens them.
	for i, m := range msgs(25, 10) {
		if _, err := lg(t, s, "idle").Append(protocol.AppendBatch(nil, m), AppendOptions{}); err != nil {
			t.Fatalf("append %d after idle: %v", 25+i, err)
		}
	}
	if got := readAll(t, s, "idle", 0); len(got) != 35 {
		t.Fatalf("read %d messages, want 35", len(got))
	}
	mustClose(t, s)
	s = mustOpen(t, opts)
	if st := s.Stats(); st.Repairs != 0 {
		t.Fatalf("reopen repaired %+v", st)
	}
}

// A next segment that failed to be created in the background is created
// again at the roll, and the topic goes on.
func TestPrepareFailureRetried(t *testing.T) {
	ffs := newFaultFS()
	var opens atomic.Int32
	ffs.setFailOpen(func(name string) bool {
		// The first next.tmp is created at the first append, the second
		// in the background after it: fail that one.
		return filepath.Base(name) == nextName && opens.Add(1) == 2
	})
	s, _ := openTest(t, 1, func(o *Options) { o.FS = ffs; o.Logger = testLogger(t) })
	appendSegments(t, s, "retry", 25)
	if opens.Load() < 3 {
		t.Fatalf("%d creations of the next segment, want the failed one retried", opens.Load())
	}
	if got := readAll(t, s, "retry", 0); len(got) != 25 {
		t.Fatalf("read %d messages, want 25", len(got))
	}
}
