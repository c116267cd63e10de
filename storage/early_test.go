package storage

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// holdWrites makes every write of topic's segment logs wait, once it has
// begun, until release is closed; started gets one value per write.
func holdWrites(ffs *faultFS, topic string) (started chan string, release chan struct{}) {
	started, release = make(chan string, 16), make(chan struct{})
	dir := string(filepath.Separator) + topic + string(filepath.Separator)
	ffs.setWriteHook(func(name string) {
		if strings.Contains(name, dir) && (strings.HasSuffix(name, logSuffix) || strings.HasSuffix(name, nextName)) {
			started <- name
			<-release
		}
	})
	return started, release
}

func recv[T any](t *testing.T, ch chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testDeadline):
		t.Fatalf("not within %v: %s", testDeadline, what)
		var zero T
		return zero
	}
}

// A topic that hands its batches out early (SetHandEarly) gives a
// follower's read the part being written, and wakes a follower's watch
// for it, before the write ends; consumers see it only once it is
// published, and the follower's next read, once the write is done,
// comes from the files.
func TestHandEarlyRead(t *testing.T) {
	ffs := newFaultFS()
	s, _ := openTest(t, 2, func(o *Options) { o.FS = ffs })
	for _, name := range []string{"e", "off"} {
		if err := s.CreateTopic(name); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetHandEarly("e", true); err != nil {
		t.Fatal(err)
	}
	first := msgs(0, 3)
	if base, err := s.Append("e", protocol.AppendBatch(nil, first...)); err != nil || base != 0 {
		t.Fatalf("first append: %d %v", base, err)
	}
	woken := make(chan struct{}, 1)
	consumerWoken := make(chan struct{}, 1)
	if _, err := s.WatchReplica("e", 3, func() { woken <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Watch("e", 3, func() { consumerWoken <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	started, release := holdWrites(ffs, "e")
	second := msgs(3, 4)
	done := appendGo(s, "e", second...)
	recv(t, started, "the second append's write")
	recv(t, woken, "the follower's watch, during the write")
	select {
	case <-consumerWoken:
		t.Fatal("a consumer's watch woke before the batch was published")
	default:
	}
	if end, err := s.EarlyEnd("e"); err != nil || end != 7 {
		t.Fatalf("EarlyEnd during the write: %d %v, want 7", end, err)
	}
	if r, err := s.Read("e", 3, 0, 0); err != nil || r.Batches != 0 {
		t.Fatalf("a consumer's read during the write: %+v %v, want nothing", r, err)
	}
	r, err := s.ReadReplica("e", 3, 0, 0)
	if err != nil || r.Mem == nil || r.Next != 7 || r.Batches != 1 {
		t.Fatalf("a follower's read during the write: %+v %v, want the part in memory", r, err)
	}
	want := protocol.AppendBatch(nil, second...)
	protocol.StampBatch(want, 3, protocol.BatchAppendTime(r.Mem[0]))
	if !bytes.Equal(r.Mem[0], want) {
		t.Fatal("the part handed out is not the batch stamped with its offset")
	}
	if r2, err := s.ReadReplica("e", 0, 0, 0); err != nil || r2.Mem != nil || r2.Next != 3 {
		t.Fatalf("a read behind the part: %+v %v, want the files' batch", r2, err)
	}
	r.Release()
	close(release)
	if a := wait(t, done); a.err != nil || a.base != 3 {
		t.Fatalf("the second append: %+v", a)
	}
	recv(t, consumerWoken, "the consumer's watch, once published")
	r, err = s.ReadReplica("e", 3, 0, 0)
	if err != nil || r.Mem != nil || len(r.Spans) == 0 || r.Next != 7 {
		t.Fatalf("a follower's read after the write: %+v %v, want spans", r, err)
	}
	got, err := r.AppendTo(nil)
	r.Release()
	if err != nil || !bytes.Equal(got[len(got)-len(want):], want) {
		t.Fatalf("the files' batch differs from the part handed out: %v", err)
	}

	// A topic that does not hand out early wakes its followers once the
	// batch is published, as before.
	ffs.setWriteHook(nil)
	started, release = holdWrites(ffs, "off")
	woken = make(chan struct{}, 1)
	if _, err := s.WatchReplica("off", 0, func() { woken <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	done = appendGo(s, "off", first...)
	recv(t, started, "the write")
	if r, err := s.ReadReplica("off", 0, 0, 0); err != nil || r.Mem != nil || r.Batches != 0 {
		t.Fatalf("a follower's read of a topic not handing out early: %+v %v, want nothing", r, err)
	}
	select {
	case <-woken:
		t.Fatal("the follower's watch woke before the batch was published")
	default:
	}
	close(release)
	wait(t, done)
	recv(t, woken, "the follower's watch, once published")
}

// A write that fails for space is cut back, and the topic stays writable,
// unless a follower read the part: then the topic turns read-only, since
// batches appended at the same offsets would contradict the follower's.
func TestHandEarlyNoSpace(t *testing.T) {
	for _, taken := range []bool{false, true} {
		name := map[bool]string{false: "not read", true: "read"}[taken]
		t.Run(name, func(t *testing.T) {
			ffs := newFaultFS()
			ffs.err = syscall.ENOSPC
			s, opts := openTest(t, 2, func(o *Options) {
				o.FS = ffs
				o.MinFreeBytes = 0
				o.Logger = testLogger(t)
			})
			if err := s.CreateTopic("e"); err != nil {
				t.Fatal(err)
			}
			if err := s.SetHandEarly("e", true); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Append("e", protocol.AppendBatch(nil, msgs(0, 3)...)); err != nil {
				t.Fatal(err)
			}
			started, release := holdWrites(ffs, "e")
			ffs.failWrite(opts.Volumes[1])
			done := appendGo(s, "e", msgs(3, 2)...)
			recv(t, started, "the write")
			if taken {
				r, err := s.ReadReplica("e", 3, 0, 0)
				if err != nil || r.Mem == nil {
					t.Fatalf("a follower's read during the write: %+v %v", r, err)
				}
				r.Release()
			}
			close(release)
			a := wait(t, done)
			ffs.setWriteHook(nil)
			ffs.heal()
			if !errors.Is(a.err, ErrNoSpace) && !errors.Is(a.err, syscall.ENOSPC) {
				t.Fatalf("the append on a full volume: %+v, want no space", a)
			}
			_, err := s.Append("e", protocol.AppendBatch(nil, msgs(3, 2)...))
			if taken != errors.Is(err, ErrReadOnly) || taken != errors.Is(s.ReadOnly("e"), ErrReadOnly) {
				t.Fatalf("the next append: %v, read-only %v; want read-only %v", err, s.ReadOnly("e"), taken)
			}
			if end, err := s.EarlyEnd("e"); err != nil || end != 3+map[bool]int64{false: 2, true: 0}[taken] {
				t.Fatalf("EarlyEnd: %d %v", end, err)
			}
		})
	}
}
