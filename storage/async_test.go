package storage

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// recorder is an AppendCallback that records what it is told.
type recorder struct {
	mu       sync.Mutex
	outcomes map[int]outcome // by the arg given to AppendAsync
	order    []int           // args in the order Appended heard them
	flushes  int
	// unflushed counts Appended calls since the last Flush; each Flush
	// records it, so a test can see that Flush follows a commit's appends.
	unflushed int
	groups    []int
	all       chan struct{} // closed once want outcomes are in
	want      int
}

type outcome struct {
	base int64
	err  error
	n    int // times told
}

func newRecorder(want int) *recorder {
	return &recorder{outcomes: make(map[int]outcome), all: make(chan struct{}), want: want}
}

func (r *recorder) Appended(arg any, base int64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := arg.(int)
	o := r.outcomes[i]
	o.base, o.err, o.n = base, err, o.n+1
	r.outcomes[i] = o
	r.order = append(r.order, i)
	r.unflushed++
}

func (r *recorder) Flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flushes++
	r.groups = append(r.groups, r.unflushed)
	r.unflushed = 0
	if len(r.order) >= r.want && r.all != nil {
		close(r.all)
		r.all = nil
	}
}

// setWant sets how many outcomes wait waits for.
func (r *recorder) setWant(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.want = n
	if len(r.order) >= n && r.all != nil {
		close(r.all)
		r.all = nil
	}
}

func (r *recorder) wait(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	all := r.all
	r.mu.Unlock()
	if all == nil {
		return
	}
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatal("the appends were not all acknowledged")
	}
}

func TestAppendAsync(t *testing.T) {
	for _, policy := range []FsyncPolicy{FsyncNever, FsyncAlways} {
		t.Run(policy.String(), func(t *testing.T) {
			s, _ := openTest(t, 2, func(o *Options) { o.Fsync = policy })
			if err := s.CreateTopic("a"); err != nil {
				t.Fatal(err)
			}
			const n = 200
			rec := newRecorder(n)
			var want [][]byte
			for i := range n {
				m := msgs(i*3, 1+i%3)
				want = append(want, m...)
				if err := lg(t, s, "a").AppendAsync(protocol.AppendBatch(nil, m...), AppendOptions{}, rec, i); err != nil {
					t.Fatal(err)
				}
			}
			rec.wait(t)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			// Each append told once, in the order queued, with dense offsets.
			next := int64(0)
			for i := range n {
				o := rec.outcomes[i]
				if o.n != 1 || o.err != nil || o.base != next {
					t.Fatalf("append %d: told %d times, base %d, err %v; want once at %d", i, o.n, o.base, o.err, next)
				}
				if rec.order[i] != i {
					t.Fatalf("told of append %d in place %d", rec.order[i], i)
				}
				next += int64(1 + i%3)
			}
			if rec.unflushed != 0 || rec.flushes == 0 {
				t.Fatalf("%d appends told after the last Flush (%d flushes)", rec.unflushed, rec.flushes)
			}
			if got := readAll(t, s, "a", 0); len(got) != len(want) || string(got[len(got)-1]) != string(want[len(want)-1]) {
				t.Fatalf("read %d messages, want %d", len(got), len(want))
			}
		})
	}
}

// TestAppendAsyncRefused checks that what AppendAsync refuses at once is
// never told to the callback.
func TestAppendAsyncRefused(t *testing.T) {
	s, _ := openTest(t, 1)
	rec := newRecorder(1)
	if _, err := s.Log("missing"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("missing topic: %v", err)
	}
	if err := s.CreateTopic("a"); err != nil {
		t.Fatal(err)
	}
	bad := protocol.AppendBatch(nil, []byte("x"))
	bad[len(bad)-1] ^= 1
	if err := lg(t, s, "a").AppendAsync(bad, AppendOptions{}, rec, 1); err == nil {
		t.Fatal("a batch with a bad CRC was queued")
	}
	if err := lg(t, s, "a").AppendAsync(protocol.AppendBatch(nil, []byte("ok")), AppendOptions{}, rec, 2); err != nil {
		t.Fatal(err)
	}
	rec.wait(t)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.outcomes) != 1 || rec.outcomes[2].n != 1 || rec.outcomes[2].base != 0 {
		t.Fatalf("outcomes %v: want only append 2, at 0", rec.outcomes)
	}
}

// TestAppendAsyncWithSync mixes asynchronous and synchronous appenders on
// one topic: every append lands once, offsets are dense, and the
// synchronous appenders are not left waiting.
func TestAppendAsyncWithSync(t *testing.T) {
	s, _ := openTest(t, 2, func(o *Options) { o.Fsync = FsyncAlways; o.Entries = 50 })
	if err := s.CreateTopic("a"); err != nil {
		t.Fatal(err)
	}
	const async, syncers, perSyncer = 300, 4, 50
	rec := newRecorder(async)
	var wg sync.WaitGroup
	syncBases := make(chan int64, syncers*perSyncer)
	errs := make(chan error, syncers)
	for w := range syncers {
		wg.Go(func() {
			for i := range perSyncer {
				base, err := lg(t, s, "a").Append(protocol.AppendBatch(nil, fmt.Appendf(nil, "sync-%d-%d", w, i)), AppendOptions{})
				if err != nil {
					errs <- err
					return
				}
				syncBases <- base
			}
		})
	}
	for i := range async {
		if err := lg(t, s, "a").AppendAsync(protocol.AppendBatch(nil, fmt.Appendf(nil, "async-%d", i)), AppendOptions{}, rec, i); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	rec.wait(t)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	close(syncBases)
	seen := make(map[int64]bool)
	for b := range syncBases {
		seen[b] = true
	}
	rec.mu.Lock()
	last := int64(-1)
	for i := range async {
		o := rec.outcomes[i]
		if o.n != 1 || o.err != nil {
			t.Fatalf("async append %d: told %d times, err %v", i, o.n, o.err)
		}
		if o.base <= last {
			t.Fatalf("async append %d at %d, after %d: out of order", i, o.base, last)
		}
		last = o.base
		seen[o.base] = true
	}
	rec.mu.Unlock()
	total := async + syncers*perSyncer
	for off := range int64(total) {
		if !seen[off] {
			t.Fatalf("offset %d acknowledged to nobody", off)
		}
	}
	if got := readAll(t, s, "a", 0); len(got) != total {
		t.Fatalf("read %d messages, want %d", len(got), total)
	}
}

// TestAppendAsyncDeleted checks that appends queued for a topic deleted
// before they are committed fail, each told once, rather than vanish.
func TestAppendAsyncDeleted(t *testing.T) {
	s, _ := openTest(t, 1, func(o *Options) { o.Fsync = FsyncAlways })
	if err := s.CreateTopic("a"); err != nil {
		t.Fatal(err)
	}
	const n = 100
	rec := newRecorder(n)
	queued := 0
	l := lg(t, s, "a") // held across the deletion
	for i := range n {
		if i == n/2 {
			if err := s.DeleteTopic("a"); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.AppendAsync(protocol.AppendBatch(nil, []byte("x")), AppendOptions{}, rec, i); err != nil {
			if !errors.Is(err, ErrTopicNotFound) {
				t.Fatal(err)
			}
			continue
		}
		queued++
	}
	rec.setWant(queued)
	if queued < n/2 {
		t.Fatalf("only %d appends queued before the delete", queued)
	}
	rec.wait(t)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, o := range rec.outcomes {
		if o.n != 1 {
			t.Fatalf("append %d told %d times", i, o.n)
		}
		if o.err != nil && !errors.Is(o.err, ErrTopicNotFound) {
			t.Fatalf("append %d: %v", i, o.err)
		}
	}
}
