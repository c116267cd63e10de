package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// Concurrency tests; they are meant for -race. Waiting is done with Watch
// and channels under a deadline, never by sleeping.

const testDeadline = 15 * time.Second

// cmsg is the message seq of writer w: its bytes say who wrote it, so a
// reader can check it is intact and attribute it.
func cmsg(topic string, w, seq int) []byte {
	return fmt.Appendf(nil, "%s/w%02d/s%05d/%s", topic, w, seq, bytes.Repeat([]byte{byte('a' + (w+seq)%26)}, (w*7+seq)%53))
}

// parseCmsg returns the writer and sequence of a cmsg, checking its bytes.
func parseCmsg(topic string, m []byte) (w, seq int, err error) {
	rest, ok := bytes.CutPrefix(m, []byte(topic+"/"))
	if !ok {
		return 0, 0, fmt.Errorf("message %q is not from topic %q", m, topic)
	}
	if _, err := fmt.Sscanf(string(rest), "w%02d/s%05d/", &w, &seq); err != nil {
		return 0, 0, fmt.Errorf("message %q: %w", m, err)
	}
	if want := cmsg(topic, w, seq); !bytes.Equal(m, want) {
		return 0, 0, fmt.Errorf("message %q is damaged, want %q", m, want)
	}
	return w, seq, nil
}

// waitFor waits until the topic's next offset is past offset, using Watch.
func waitFor(s *Store, topic string, offset int64, deadline <-chan time.Time) error {
	l, err := s.Log(topic)
	if err != nil {
		return err
	}
	ch := make(chan struct{})
	cancel, err := l.Watch(offset, func() { close(ch) })
	if err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-deadline:
		cancel()
		return fmt.Errorf("timed out waiting for offset %d of %q", offset, topic)
	}
}

// follow reads topic from offset 0 until it has n messages, waiting with
// Watch, and returns the messages in offset order. Every served batch must
// be valid and the offsets dense.
func follow(s *Store, topic string, n int, maxBytes int64, deadline <-chan time.Time) ([][]byte, error) {
	l, err := s.Log(topic)
	if err != nil {
		return nil, err
	}
	var got [][]byte
	for len(got) < n {
		off := int64(len(got))
		r, err := l.Read(off, 0, maxBytes)
		if err != nil {
			return got, err
		}
		if r.Batches == 0 {
			r.Release()
			if err := waitFor(s, topic, off, deadline); err != nil {
				return got, err
			}
			continue
		}
		b, err := r.AppendTo(nil)
		r.Release()
		if err != nil {
			return got, err
		}
		cur := r.First
		for len(b) > 0 {
			bt, size, err := protocol.ParseBatch(b)
			if err != nil {
				return got, fmt.Errorf("read %d: %w", off, err)
			}
			if err := bt.Validate(); err != nil {
				return got, fmt.Errorf("read %d: invalid batch at %d: %w", off, bt.BaseOffset, err)
			}
			if bt.BaseOffset != cur {
				return got, fmt.Errorf("read %d: batch at %d, want %d", off, bt.BaseOffset, cur)
			}
			err = protocol.Messages(bt.Body, bt.Count, bt.BaseOffset, func(o int64, m []byte) error {
				if o == int64(len(got)) {
					got = append(got, append([]byte(nil), m...))
				} else if o > int64(len(got)) {
					return fmt.Errorf("offset %d served while expecting %d", o, len(got))
				}
				return nil
			})
			if err != nil {
				return got, err
			}
			cur += int64(bt.Count)
			b = b[size:]
		}
		if cur != r.Next {
			return got, fmt.Errorf("read %d: batches end at %d, result says %d", off, cur, r.Next)
		}
	}
	return got, nil
}

// appendAll runs writers goroutines, each appending perWriter batches of 1
// to 4 messages to topic, and returns, per offset, the message appended.
// It checks that the acknowledged base offsets are dense and unique.
func appendAll(s *Store, topic string, writers, perWriter int) ([][]byte, error) {
	l, err := s.Log(topic)
	if err != nil {
		return nil, err
	}
	type placed struct {
		base int64
		msgs [][]byte
	}
	results := make([][]placed, writers)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			seq := 0
			for i := range perWriter {
				m := make([][]byte, 1+(w+i)%4)
				for j := range m {
					m[j] = cmsg(topic, w, seq)
					seq++
				}
				base, err := l.Append(protocol.AppendBatch(nil, m...), AppendOptions{})
				if err != nil {
					errs[w] = fmt.Errorf("writer %d: %w", w, err)
					return
				}
				results[w] = append(results[w], placed{base, m})
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var all []placed
	for _, r := range results {
		all = append(all, r...)
	}
	slices.SortFunc(all, func(a, b placed) int { return int(a.base - b.base) })
	var byOffset [][]byte
	for _, p := range all {
		if p.base != int64(len(byOffset)) {
			return nil, fmt.Errorf("append acknowledged at base %d, want %d: offsets not dense or not unique", p.base, len(byOffset))
		}
		byOffset = append(byOffset, p.msgs...)
	}
	return byOffset, nil
}

// expectedTotal is the number of messages appendAll appends.
func expectedTotal(writers, perWriter int) int {
	total := 0
	for w := range writers {
		for i := range perWriter {
			total += 1 + (w+i)%4
		}
	}
	return total
}

// checkFollowed checks what a reader saw against what the appenders were
// told: the same message at every offset; and that each writer's messages
// appear exactly once and in the order it appended them.
func checkFollowed(topic string, got, want [][]byte) error {
	if len(got) != len(want) {
		return fmt.Errorf("reader saw %d messages, want %d", len(got), len(want))
	}
	last := map[int]int{}
	for o, m := range got {
		w, seq, err := parseCmsg(topic, m)
		if err != nil {
			return fmt.Errorf("offset %d: %w", o, err)
		}
		if prev, ok := last[w]; ok && seq != prev+1 || !ok && seq != 0 {
			return fmt.Errorf("offset %d: writer %d seq %d after %d", o, w, seq, prev)
		}
		last[w] = seq
		if !bytes.Equal(m, want[o]) {
			return fmt.Errorf("offset %d: reader saw %q, appender was told %q", o, m, want[o])
		}
	}
	return nil
}

// Many appenders on one topic and readers following it concurrently.
func TestConcurrentAppendFollow(t *testing.T) {
	for _, tc := range []struct {
		name      string
		vols      int
		writers   int
		per       int
		readers   int
		fsync     FsyncPolicy
		cache     bool
		openFiles int
	}{
		{"vols=1", 1, 8, 150, 3, FsyncNever, true, 1024},
		{"vols=3/fsync=always", 3, 6, 40, 2, FsyncAlways, true, 1024},
		{"vols=2/small-cache", 2, 6, 100, 3, FsyncNever, true, 8},
		{"vols=1/no-cache", 1, 4, 100, 2, FsyncInterval, false, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := openTest(t, tc.vols, func(o *Options) {
				o.Entries = 25
				o.Fsync = tc.fsync
				o.FsyncInterval = time.Millisecond
				o.Cache = tc.cache
				o.MaxOpenFiles = tc.openFiles
				o.Logger = testLogger(t)
			})
			const topic = "one"
			if err := s.CreateTopic(topic); err != nil {
				t.Fatal(err)
			}
			total := expectedTotal(tc.writers, tc.per)
			deadline := time.After(testDeadline)
			seen := make([][][]byte, tc.readers)
			errs := make([]error, tc.readers)
			var rwg sync.WaitGroup
			for r := range tc.readers {
				rwg.Go(func() {
					// Small reads, so readers hit every segment boundary.
					seen[r], errs[r] = follow(s, topic, total, int64(200*(r+1)), deadline)
				})
			}
			want, err := appendAll(s, topic, tc.writers, tc.per)
			rwg.Wait()
			if err != nil {
				t.Fatal(err)
			}
			for r, err := range errs {
				if err != nil {
					t.Fatalf("reader %d: %v", r, err)
				}
				if err := checkFollowed(topic, seen[r], want); err != nil {
					t.Fatalf("reader %d: %v", r, err)
				}
			}
			info, err := lg(t, s, topic).Info()
			if err != nil || info.Next != int64(total) || info.Segments < total/25/2 {
				t.Fatalf("info %+v %v; want next %d", info, err, total)
			}
		})
	}
}

// Appenders on many topics at once, with a reader per topic.
func TestConcurrentManyTopics(t *testing.T) {
	s, opts := openTest(t, 2, func(o *Options) { o.Logger = testLogger(t) })
	const topics, writers, per = 8, 2, 60
	deadline := time.After(testDeadline)
	var wg sync.WaitGroup
	for i := range topics {
		wg.Go(func() {
			topic := fmt.Sprintf("topic-%d", i)
			if err := s.CreateTopic(topic); err != nil {
				t.Error(err)
				return
			}
			total := expectedTotal(writers, per)
			var got [][]byte
			var rerr error
			done := make(chan struct{})
			go func() {
				defer close(done)
				got, rerr = follow(s, topic, total, 1<<10, deadline)
			}()
			want, err := appendAll(s, topic, writers, per)
			<-done
			if err := errors.Join(err, rerr); err != nil {
				t.Errorf("%s: %v", topic, err)
				return
			}
			if err := checkFollowed(topic, got, want); err != nil {
				t.Errorf("%s: %v", topic, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// Everything is still there, identical on both volumes, after a reopen.
	mustClose(t, s)
	s = mustOpen(t, opts)
	if st := s.Stats(); st.Repairs != 0 {
		t.Fatalf("reopen after concurrent appends repaired: %+v", st)
	}
	for i := range topics {
		topic := fmt.Sprintf("topic-%d", i)
		rb := scan(t, s, topic)
		if len(rb.msgs) != int(rb.next) {
			t.Fatalf("%s: %d messages, next %d", topic, len(rb.msgs), rb.next)
		}
		sameVolumes(t, opts, topic)
	}
}

// CreateTopic, DeleteTopic, Append, Read, Watch, Info and ListTopics on a
// few overlapping names at once: no panic, no race, only the expected
// errors, and whatever Read serves is valid and belongs to the topic.
func TestConcurrentTopicLifecycle(t *testing.T) {
	s, opts := openTest(t, 2, func(o *Options) {
		o.Entries = 5
		o.MaxOpenFiles = 8 // the least there is for 2 volumes
		o.Logger = testLogger(t)
	})
	names := []string{"a", "b", "c"}
	const workers, ops = 6, 600
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			seq := 0
			expected := func(op string, err error) {
				if err != nil && !errors.Is(err, ErrTopicNotFound) && !errors.Is(err, ErrTopicExists) {
					t.Errorf("worker %d %s: %v", w, op, err)
				}
			}
			for range ops {
				name := names[rng.IntN(len(names))]
				op := rng.IntN(10)
				l, lerr := s.Log(name) // the topic may be deleted while l is held
				if op >= 2 && lerr != nil {
					expected("lookup", lerr)
					continue
				}
				switch op {
				case 0:
					expected("create", s.CreateTopic(name))
				case 1:
					expected("delete", s.DeleteTopic(name))
				case 2, 3, 4:
					m := [][]byte{cmsg(name, w, seq), cmsg(name, w, seq+1)}
					seq += 2
					_, err := l.Append(protocol.AppendBatch(nil, m[:1+rng.IntN(2)]...), AppendOptions{})
					expected("append", err)
				case 5, 6, 7:
					r, err := l.Read(int64(rng.IntN(20))-5, 0, int64(rng.IntN(400)))
					expected("read", err)
					if err != nil {
						continue
					}
					b, err := r.AppendTo(nil)
					r.Release()
					if err != nil {
						t.Errorf("worker %d read %s: %v", w, name, err)
						continue
					}
					if err := checkTopicBytes(name, b, r.First); err != nil {
						t.Errorf("worker %d read %s: %v", w, name, err)
					}
				case 8:
					fired := make(chan struct{}, 1)
					cancel, err := l.Watch(int64(rng.IntN(30)), func() { fired <- struct{}{} })
					expected("watch", err)
					if err == nil && !cancel() {
						<-fired // not cancelled: it ran or is running
					}
				case 9:
					if _, err := l.Info(); err != nil {
						expected("info", err)
					}
					for _, n := range s.ListTopics("") {
						if !slices.Contains(names, n) {
							t.Errorf("listed unknown topic %q", n)
						}
					}
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// What is left reopens cleanly and reads back valid.
	left := s.ListTopics("")
	mustClose(t, s)
	s = mustOpen(t, opts)
	if got := s.ListTopics(""); !slices.Equal(got, left) {
		t.Fatalf("topics after reopen %v, want %v", got, left)
	}
	for _, name := range left {
		rb := scan(t, s, name)
		for o, m := range rb.msgs {
			if _, _, err := parseCmsg(name, m); err != nil {
				t.Fatalf("%s@%d: %v", name, o, err)
			}
		}
	}
}

// checkTopicBytes checks served bytes: valid batches with dense offsets
// from first, holding only messages written to topic.
func checkTopicBytes(topic string, b []byte, first int64) error {
	cur := first
	for len(b) > 0 {
		bt, n, err := protocol.ParseBatch(b)
		if err != nil {
			return err
		}
		if err := bt.Validate(); err != nil {
			return err
		}
		if bt.BaseOffset != cur {
			return fmt.Errorf("batch at %d, want %d", bt.BaseOffset, cur)
		}
		err = protocol.Messages(bt.Body, bt.Count, bt.BaseOffset, func(_ int64, m []byte) error {
			_, _, err := parseCmsg(topic, m)
			return err
		})
		if err != nil {
			return err
		}
		cur += int64(bt.Count)
		b = b[n:]
	}
	return nil
}

// Watch fires on append, at once when the offset is already there, on
// delete and on close; cancel stops it.
func TestWatch(t *testing.T) {
	one := protocol.AppendBatch(nil, []byte("x"))
	newStore := func(t *testing.T) *Store {
		s, _ := openTest(t, 1)
		if err := s.CreateTopic("w"); err != nil {
			t.Fatal(err)
		}
		return s
	}
	watch := func(t *testing.T, s *Store, offset int64) (<-chan struct{}, func() bool) {
		ch := make(chan struct{})
		cancel, err := lg(t, s, "w").Watch(offset, func() { close(ch) })
		if err != nil {
			t.Fatal(err)
		}
		return ch, cancel
	}
	fired := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	// Watch's fn runs on the appending goroutine before Append returns, so
	// right after Append it has either run or it never will for that append.
	t.Run("append", func(t *testing.T) {
		s := newStore(t)
		ch0, _ := watch(t, s, 0)
		ch1, _ := watch(t, s, 1)
		if fired(ch0) || fired(ch1) {
			t.Fatal("fired before any append")
		}
		if _, err := lg(t, s, "w").Append(slices.Clone(one), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		if !fired(ch0) {
			t.Fatal("watch of offset 0 did not fire on the append of offset 0")
		}
		if fired(ch1) {
			t.Fatal("watch of offset 1 fired on the append of offset 0")
		}
		if _, err := lg(t, s, "w").Append(protocol.AppendBatch(nil, []byte("y"), []byte("z")), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		if !fired(ch1) {
			t.Fatal("watch of offset 1 did not fire")
		}
	})
	t.Run("already-there", func(t *testing.T) {
		s := newStore(t)
		if _, err := lg(t, s, "w").Append(slices.Clone(one), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		ch, cancel := watch(t, s, 0)
		if !fired(ch) {
			t.Fatal("watch of a readable offset did not fire at once")
		}
		if cancel() {
			t.Fatal("cancel of a fired watch reported it removed it")
		}
	})
	t.Run("cancel", func(t *testing.T) {
		s := newStore(t)
		ch, cancel := watch(t, s, 0)
		if !cancel() {
			t.Fatal("cancel of a pending watch reported nothing removed")
		}
		if cancel() {
			t.Fatal("second cancel reported a removal")
		}
		if _, err := lg(t, s, "w").Append(slices.Clone(one), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		if fired(ch) {
			t.Fatal("cancelled watch fired")
		}
	})
	t.Run("delete", func(t *testing.T) {
		s := newStore(t)
		ch, cancel := watch(t, s, 5)
		l := lg(t, s, "w")
		if err := s.DeleteTopic("w"); err != nil {
			t.Fatal(err)
		}
		if !fired(ch) {
			t.Fatal("watch did not fire on delete")
		}
		if cancel() {
			t.Fatal("cancel after delete reported a removal")
		}
		if _, err := l.Watch(0, func() {}); !errors.Is(err, ErrTopicNotFound) {
			t.Fatalf("watch of a deleted topic: %v", err)
		}
		if _, err := s.Log("w"); !errors.Is(err, ErrTopicNotFound) {
			t.Fatalf("lookup of a deleted topic: %v", err)
		}
	})
	t.Run("close", func(t *testing.T) {
		s := newStore(t)
		ch, _ := watch(t, s, 5)
		mustClose(t, s)
		if !fired(ch) {
			t.Fatal("watch did not fire on close")
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		// Many watchers on offsets appended one by one by another goroutine:
		// each fires exactly once, once its offset is readable.
		s := newStore(t)
		const n = 200
		deadline := time.After(testDeadline)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				off := int64(i % 50)
				if err := waitFor(s, "w", off, deadline); err != nil {
					t.Error(err)
					return
				}
				r, err := lg(t, s, "w").Read(off, 1, 0)
				if err != nil || r.Batches != 1 {
					t.Errorf("offset %d not readable after its watch fired: %v", off, err)
					return
				}
				r.Release()
			})
		}
		for range 50 {
			if _, err := lg(t, s, "w").Append(slices.Clone(one), AppendOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		wg.Wait()
	})
}
