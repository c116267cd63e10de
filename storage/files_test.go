package storage

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/haraqa/haraqa/protocol"
)

// openFDs counts the process's open descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count descriptors: %v", err)
	}
	return len(ents)
}

// checkTopics reads every topic back and compares it with want.
func checkTopics(t *testing.T, s *Store, want map[string][][]byte) {
	t.Helper()
	for name, w := range want {
		got := readAll(t, s, name, 0)
		if len(got) != len(w) {
			t.Fatalf("%s: read %d messages, want %d", name, len(got), len(w))
		}
		for i := range w {
			if !bytes.Equal(got[i], w[i]) {
				t.Fatalf("%s: message %d differs", name, i)
			}
		}
	}
}

// Many more topics than the file budget holds: appends and reads to all of
// them work, the store never holds more than the budget (write handles in
// the stats, every descriptor of the process), and it opens again within
// the same budget. Before the budget, each topic kept its active segment
// open on every volume for good: 40 topics on 2 volumes held 80 files.
func TestFileBudgetManyTopics(t *testing.T) {
	const vols, budget, topics = 2, 8, 40
	base := openFDs(t)
	s, opts := openTest(t, vols, func(o *Options) {
		o.Entries = 3
		o.MaxOpenFiles = budget
		o.Logger = testLogger(t)
	})
	want := make(map[string][][]byte)
	for round := range 7 {
		for i := range topics {
			name := fmt.Sprintf("t%02d", i)
			if round == 0 {
				if err := s.CreateTopic(name); err != nil {
					t.Fatal(err)
				}
			}
			m := msgs(len(want[name]), 1+round%2)
			if _, err := lg(t, s, name).Append(protocol.AppendBatch(nil, m...), AppendOptions{}); err != nil {
				t.Fatalf("round %d, %s: %v", round, name, err)
			}
			want[name] = append(want[name], m...)
			if st := s.Stats(); st.WriteFiles > budget || st.WriteFiles+st.OpenFiles > budget+vols {
				t.Fatalf("round %d: %d write and %d read handles, budget %d", round, st.WriteFiles, st.OpenFiles, budget)
			}
			// The locks (one per volume) and up to one segment's files
			// being sealed in the background are the slack.
			if n := openFDs(t) - base; n > budget+2*vols {
				t.Fatalf("round %d: %d descriptors open over the %d before, budget %d", round, n, base, budget)
			}
		}
	}
	checkTopics(t, s, want)
	mustClose(t, s)
	s = mustOpen(t, opts)
	defer s.Close()
	if n := openFDs(t) - base; n > budget+vols {
		t.Fatalf("after open: %d descriptors over the %d before, budget %d", n, base, budget)
	}
	checkTopics(t, s, want)
	for name := range want {
		m := msgs(len(want[name]), 1)
		if _, err := lg(t, s, name).Append(protocol.AppendBatch(nil, m...), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		want[name] = append(want[name], m...)
	}
	checkTopics(t, s, want)
}

// Writers busy on more topics at once than the budget holds get
// ErrTooManyFiles, never a read-only topic: each retries until its append
// goes through, and every acknowledged message is there.
func TestFileBudgetContention(t *testing.T) {
	s, _ := openTest(t, 2, func(o *Options) {
		o.Entries = 2
		o.MaxOpenFiles = 8
		o.Fsync = FsyncAlways
		o.Logger = testLogger(t)
	})
	const writers, per = 6, 30
	for w := range writers {
		if err := s.CreateTopic(fmt.Sprintf("w%d", w)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	refused := make([]int, writers)
	errs := make([]error, writers)
	for w := range writers {
		wg.Go(func() {
			name := fmt.Sprintf("w%d", w)
			for i := 0; i < per; {
				_, err := lg(t, s, name).Append(protocol.AppendBatch(nil, fmt.Appendf(nil, "%d", i)), AppendOptions{})
				switch {
				case err == nil:
					i++
				case errors.Is(err, ErrTooManyFiles) && refused[w] < 100000:
					refused[w]++
				default:
					errs[w] = fmt.Errorf("%s message %d (after %d refusals): %w", name, i, refused[w], err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for w := range writers {
		got := readAll(t, s, fmt.Sprintf("w%d", w), 0)
		if len(got) != per {
			t.Fatalf("w%d: %d messages, want %d", w, len(got), per)
		}
		for i, m := range got {
			if string(m) != fmt.Sprint(i) {
				t.Fatalf("w%d: message %d is %q", w, i, m)
			}
		}
	}
	t.Logf("refusals per writer: %v", refused)
}

// A segment file that cannot be created or reopened for want of
// descriptors fails that append only: nothing was written, the topic stays
// writable, and the next append once descriptors are back goes through.
// Before, the topic turned read-only until a restart.
func TestOpenFailureNotSticky(t *testing.T) {
	ffs := newFaultFS()
	ffs.err = syscall.EMFILE
	s, opts := openTest(t, 2, func(o *Options) {
		o.FS = ffs
		o.Logger = testLogger(t)
	})
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	appendOK := func() {
		t.Helper()
		m := msgs(len(want), 2)
		base, err := lg(t, s, "t").Append(protocol.AppendBatch(nil, m...), AppendOptions{})
		if err != nil || base != int64(len(want)) {
			t.Fatalf("append: base %d, %v; want %d", base, err, len(want))
		}
		want = append(want, m...)
	}
	appendRefused := func(what string) {
		t.Helper()
		_, err := lg(t, s, "t").Append(protocol.AppendBatch(nil, []byte("lost")), AppendOptions{})
		if !errors.Is(err, ErrTooManyFiles) || errors.Is(err, ErrReadOnly) || lg(t, s, "t").ReadOnly() != nil {
			t.Fatalf("%s: %v (ReadOnly %v), want ErrTooManyFiles and not read-only", what, err, lg(t, s, "t").ReadOnly())
		}
		if strings.Contains(err.Error(), opts.Volumes[0]) {
			t.Fatalf("%s: the error names a server path: %v", what, err)
		}
	}
	fail := func(suffix string) {
		ffs.setFailOpen(func(name string) bool { return strings.HasSuffix(name, suffix) })
	}
	heal := func() { ffs.setFailOpen(nil) }

	fail(nextName) // the first segment cannot be created
	appendRefused("creating the first segment")
	heal()
	appendOK()

	tp, _ := s.lookup("t")
	tp.wmu.Lock()
	tp.park() // as the budget does for another topic
	tp.wmu.Unlock()
	fail(logSuffix) // nor reopened
	appendRefused("reopening the parked segment")
	heal()
	appendOK()
	for range 6 { // rolls: Entries is 10
		appendOK()
	}
	checkTopics(t, s, map[string][][]byte{"t": want})
	mustClose(t, s)
	s = mustOpen(t, opts)
	defer s.Close()
	if st := s.Stats(); st.Repairs != 0 {
		t.Fatalf("%d repairs after reopening", st.Repairs)
	}
	checkTopics(t, s, map[string][][]byte{"t": want})
}

// A write that fails for space on a later volume (after the earlier ones
// took it) is cut back on every volume to what was acknowledged: the
// append fails with ErrNoSpace, the topic stays writable, the next append
// gets the offset the failed one would have, and the volumes are identical
// (a reopen repairs nothing). Before, the topic turned read-only until a
// restart.
func TestNoSpaceWriteRolledBack(t *testing.T) {
	for _, fsync := range []FsyncPolicy{FsyncNever, FsyncAlways} {
		t.Run(fsync.String(), func(t *testing.T) {
			ffs := newFaultFS()
			ffs.err = syscall.ENOSPC
			s, opts := openTest(t, 2, func(o *Options) {
				o.FS = ffs
				o.Fsync = fsync
				o.MinFreeBytes = 0
				o.Logger = testLogger(t)
			})
			if err := s.CreateTopic("t"); err != nil {
				t.Fatal(err)
			}
			want := msgs(0, 3)
			if _, err := lg(t, s, "t").Append(protocol.AppendBatch(nil, want...), AppendOptions{}); err != nil {
				t.Fatal(err)
			}
			ffs.failWrite(opts.Volumes[1]) // a torn write on the second volume
			_, err := lg(t, s, "t").Append(protocol.AppendBatch(nil, msgs(3, 4)...), AppendOptions{})
			if !errors.Is(err, ErrNoSpace) || errors.Is(err, ErrReadOnly) || !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("append on a full volume: %v, want ErrNoSpace and not read-only", err)
			}
			if strings.Contains(err.Error(), opts.Volumes[1]) {
				t.Fatalf("the error names a server path: %v", err)
			}
			size := int64(len(protocol.AppendBatch(nil, want...)))
			for _, v := range opts.Volumes {
				fi, err := os.Stat(filepath.Join(v, topicsDir, "t", segmentName(0, logSuffix)))
				if err != nil || fi.Size() != size {
					t.Fatalf("volume %s: segment %v, size %d, want %d (cut back)", v, err, fi.Size(), size)
				}
			}
			ffs.heal()
			m := msgs(3, 2)
			base, err := lg(t, s, "t").Append(protocol.AppendBatch(nil, m...), AppendOptions{})
			if err != nil || base != 3 {
				t.Fatalf("append once space is back: base %d, %v; want 3", base, err)
			}
			want = append(want, m...)
			checkTopics(t, s, map[string][][]byte{"t": want})
			mustClose(t, s)
			s = mustOpen(t, opts)
			defer s.Close()
			if st := s.Stats(); st.Repairs != 0 || st.TruncatedBytes != 0 {
				t.Fatalf("reopen repaired %d, cut %d bytes: the volumes differed", st.Repairs, st.TruncatedBytes)
			}
			checkTopics(t, s, map[string][][]byte{"t": want})
		})
	}
}
