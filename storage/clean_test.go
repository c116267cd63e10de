package storage

import (
	"os"
	"path/filepath"
	"testing"
)

// A store knows whether its last stop was a clean Close: a new volume, a
// kill (the store dropped without Close) or a mark missing from one volume
// is not; the mark is taken at Open, so the next stop must write it again.
func TestCleanStart(t *testing.T) {
	opts := recOpts(t, 2)
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if s.CleanStart() {
		t.Fatal("new volumes: CleanStart true")
	}
	populate(t, s, recTopic, 0, 20)
	mustClose(t, s)
	for _, v := range opts.Volumes {
		if _, err := os.Stat(filepath.Join(v, cleanName)); err != nil {
			t.Fatalf("after Close: %v", err)
		}
	}

	s, err = Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if !s.CleanStart() {
		t.Fatal("after Close: CleanStart false")
	}
	for _, v := range opts.Volumes {
		if _, err := os.Stat(filepath.Join(v, cleanName)); !os.IsNotExist(err) {
			t.Fatalf("the mark is still there while the store is open: %v", err)
		}
	}
	// A kill: the volumes' locks go with the process, the mark is not
	// written. Dropping the locks by hand stands for it.
	s.closeTopics()
	s.unlockVolumes()
	t.Cleanup(func() { close(s.stop); s.wg.Wait() })
	s2 := mustOpen(t, opts)
	if s2.CleanStart() {
		t.Fatal("after a stop without Close: CleanStart true")
	}
	mustClose(t, s2)

	if err := os.Remove(filepath.Join(opts.Volumes[1], cleanName)); err != nil {
		t.Fatal(err)
	}
	s3 := mustOpen(t, opts)
	if s3.CleanStart() {
		t.Fatal("the mark on one volume of two: CleanStart true")
	}
}

// FirstUnreadable names the first offset recovery found corrupted on every
// volume, and none once TruncateAfter cut the log before it.
func TestFirstUnreadable(t *testing.T) {
	fx := newFixture(t, 1, 45)
	path := fx.seg(-1, fx.middle())
	locs := batchLocs(t, path)
	hit := locs[len(locs)/2]
	flipByte(t, path, hit.bodyPos())
	s := fx.reopen(t)
	from, ok, err := lg(t, s, recTopic).FirstUnreadable()
	if err != nil || !ok || from != hit.base {
		t.Fatalf("FirstUnreadable = %d, %v, %v; want %d, true", from, ok, err, hit.base)
	}
	if _, err := lg(t, s, recTopic).TruncateAfter(from); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := lg(t, s, recTopic).FirstUnreadable(); ok || err != nil {
		t.Fatalf("after the cut: FirstUnreadable %v, %v", ok, err)
	}
	info, _ := lg(t, s, recTopic).Info()
	if info.Next != hit.base {
		t.Fatalf("next %d after the cut, want %d", info.Next, hit.base)
	}
	if _, err := s.Log("nope"); err == nil {
		t.Fatal("a missing topic: no error")
	}
}
