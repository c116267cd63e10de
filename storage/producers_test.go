package storage

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

func idemBatch(pid, seq uint64, msgs ...[]byte) []byte {
	return protocol.AppendBatchMeta(nil, protocol.BatchMeta{ProducerID: pid, Sequence: seq}, msgs...)
}

func mustAppend(t *testing.T, s *Store, topic string, b []byte) int64 {
	t.Helper()
	base, err := lg(t, s, topic).Append(b, AppendOptions{})
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return base
}

// A batch sent again by its producer is answered with its first offset and
// stored once, before and after a restart (the table is rebuilt from the
// log), and across segment boundaries.
func TestIdempotentAppend(t *testing.T) {
	s, opts := openTest(t, 2)
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	var bases []int64
	for seq := range uint64(8) {
		bases = append(bases, mustAppend(t, s, "t", idemBatch(7, seq, msgs(int(seq)*3, 3)...)))
	}
	for seq := range uint64(8) {
		if got := mustAppend(t, s, "t", idemBatch(7, seq, msgs(int(seq)*3, 3)...)); got != bases[seq] {
			t.Fatalf("resent seq %d: base %d, want %d", seq, got, bases[seq])
		}
	}
	// Another producer's same sequence is its own batch.
	other := mustAppend(t, s, "t", idemBatch(8, 0, msgs(0, 3)...))
	if other != 24 {
		t.Fatalf("other producer: base %d, want 24", other)
	}
	// A batch without a producer is never deduplicated.
	plain := protocol.AppendBatch(nil, msgs(0, 3)...)
	mustAppend(t, s, "t", plain)
	mustAppend(t, s, "t", protocol.AppendBatch(nil, msgs(0, 3)...))
	if info, _ := lg(t, s, "t").Info(); info.Next != 33 {
		t.Fatalf("next %d, want 33", info.Next)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for seq := range uint64(8) {
		if got := mustAppend(t, s2, "t", idemBatch(7, seq, msgs(int(seq)*3, 3)...)); got != bases[seq] {
			t.Fatalf("after restart, resent seq %d: base %d, want %d", seq, got, bases[seq])
		}
	}
	if got := mustAppend(t, s2, "t", idemBatch(7, 8, msgs(0, 1)...)); got != 33 {
		t.Fatalf("new seq after restart: base %d, want 33", got)
	}
	if n := len(readAll(t, s2, "t", 0)); n != 34 {
		t.Fatalf("%d messages stored, want 34", n)
	}
}

// Sequences need not arrive in order (concurrent producers on one
// client); one below every remembered sequence cannot be told and is
// refused, and a sequence sent again with another count is refused.
func TestIdempotentWindow(t *testing.T) {
	s, _ := openTest(t, 1)
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "t", idemBatch(1, 5, msgs(0, 1)...))
	mustAppend(t, s, "t", idemBatch(1, 3, msgs(0, 1)...)) // out of order, window not full: new
	for seq := uint64(100); seq < 100+dedupWindow; seq++ {
		mustAppend(t, s, "t", idemBatch(1, seq, msgs(0, 1)...))
	}
	if _, err := lg(t, s, "t").Append(idemBatch(1, 50, msgs(0, 1)...), AppendOptions{}); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("sequence below the window: %v", err)
	}
	if _, err := lg(t, s, "t").Append(idemBatch(1, 101, msgs(0, 2)...), AppendOptions{}); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("sequence resent with another count: %v", err)
	}
	if got := mustAppend(t, s, "t", idemBatch(1, 100, msgs(0, 1)...)); got != 2 {
		t.Fatalf("oldest remembered: base %d, want 2", got)
	}
	if info, _ := lg(t, s, "t").Info(); info.Next != 2+dedupWindow {
		t.Fatalf("next %d, want %d", info.Next, 2+dedupWindow)
	}
}

// The table is bounded: past MaxProducers the producer idle longest is
// forgotten, and one idle past ProducerIdle is forgotten too.
func TestIdempotentBounds(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s, opts := openTest(t, 1, func(o *Options) { o.MaxProducers = 3; o.ProducerIdle = time.Minute; o.Now = clock })
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	for pid := uint64(1); pid <= 4; pid++ {
		mustAppend(t, s, "t", idemBatch(pid, 0, msgs(0, 1)...))
		advance(time.Second)
	}
	tp, _ := s.lookup("t")
	tp.wmu.Lock()
	n, has1 := len(tp.producers.m), tp.producers.m[1] != nil
	tp.wmu.Unlock()
	if n != 3 || has1 {
		t.Fatalf("%d producers remembered (producer 1: %v), want 3 without producer 1", n, has1)
	}
	if got := mustAppend(t, s, "t", idemBatch(4, 0, msgs(0, 1)...)); got != 3 {
		t.Fatalf("producer 4 resent: base %d, want 3", got)
	}
	advance(2 * time.Minute)
	if got := mustAppend(t, s, "t", idemBatch(4, 0, msgs(0, 1)...)); got != 4 {
		t.Fatalf("producer 4 resent after its idle time: base %d, want 4 (stored again)", got)
	}
	// A restart forgets producers idle past ProducerIdle as well.
	s.Close()
	advance(2 * time.Minute)
	s2, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	tp, _ = s2.lookup("t")
	if n := len(tp.producers.m); n != 0 {
		t.Fatalf("%d producers remembered after their idle time, want 0", n)
	}
}

// A duplicate in the same commit as its original gets the original's
// offset, and a failed write forgets what it recorded.
func TestIdempotentSameCommit(t *testing.T) {
	s, _ := openTest(t, 1)
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	a := idemBatch(9, 0, msgs(0, 2)...)
	b := idemBatch(9, 0, msgs(0, 2)...)
	bases, errs := lg(t, s, "t").AppendMany([][]byte{a, b, idemBatch(9, 1, msgs(0, 1)...)}, nil)
	if errs[0] != nil || errs[1] != nil || errs[2] != nil {
		t.Fatal(errs)
	}
	if bases[0] != 0 || bases[1] != 0 || bases[2] != 2 {
		t.Fatalf("bases %v, want [0 0 2]", bases)
	}
	var pt producerTable
	u := pt.record(1, 0, 0, 1, "", 0, time.Hour, 10)
	u2 := pt.record(1, 1, 1, 1, "", 0, time.Hour, 10)
	pt.undo(u2)
	if _, dup, _ := pt.lookup(1, 1, 1, "", false, 0, time.Hour); dup {
		t.Fatal("undone sequence still remembered")
	}
	pt.undo(u)
	if len(pt.m) != 0 {
		t.Fatal("undone producer still remembered")
	}
	// Undo restores an entry the window evicted.
	for seq := range uint64(dedupWindow) {
		pt.record(2, seq, int64(seq), 1, "", 0, time.Hour, 10)
	}
	pt.undo(pt.record(2, dedupWindow, dedupWindow, 1, "", 0, time.Hour, 10))
	if base, dup, _ := pt.lookup(2, 0, 1, "", false, 0, time.Hour); !dup || base != 0 {
		t.Fatalf("evicted entry not restored: dup %v base %d", dup, base)
	}
}

// An append conditional on the next offset is written only when the
// offset matches; a conditional batch its producer sends again after it
// was stored is answered with its offset, not refused.
func TestAppendExpect(t *testing.T) {
	s, _ := openTest(t, 2)
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	if base, err := lg(t, s, "t").Append(protocol.AppendBatch(nil, msgs(0, 3)...), AppendOptions{Expect: true, Next: 0}); err != nil || base != 0 {
		t.Fatalf("expect 0 on an empty topic: %d, %v", base, err)
	}
	if _, err := lg(t, s, "t").Append(protocol.AppendBatch(nil, msgs(0, 1)...), AppendOptions{Expect: true, Next: 0}); !errors.Is(err, ErrOffsetMismatch) {
		t.Fatalf("expect 0 at 3: %v", err)
	}
	b := idemBatch(5, 0, msgs(0, 2)...)
	if base, err := lg(t, s, "t").Append(b, AppendOptions{Expect: true, Next: 3}); err != nil || base != 3 {
		t.Fatalf("expect 3 at 3: %d, %v", base, err)
	}
	if base, err := lg(t, s, "t").Append(idemBatch(5, 0, msgs(0, 2)...), AppendOptions{Expect: true, Next: 3}); err != nil || base != 3 {
		t.Fatalf("resent after it was stored: %d, %v", base, err)
	}
	// In one commit: the first of two batches expecting the same offset
	// wins, the second is refused, the third expects what the first leaves.
	bases, errs := lg(t, s, "t").AppendMany([][]byte{
		protocol.AppendBatch(nil, msgs(0, 1)...), protocol.AppendBatch(nil, msgs(0, 1)...), protocol.AppendBatch(nil, msgs(0, 1)...),
	}, []AppendOptions{{Expect: true, Next: 5}, {Expect: true, Next: 5}, {Expect: true, Next: 6}})
	if errs[0] != nil || bases[0] != 5 || !errors.Is(errs[1], ErrOffsetMismatch) || errs[2] != nil || bases[2] != 6 {
		t.Fatalf("bases %v errs %v", bases, errs)
	}
	if info, _ := lg(t, s, "t").Info(); info.Next != 7 {
		t.Fatalf("next %d, want 7", info.Next)
	}
}
