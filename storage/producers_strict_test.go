package storage

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// strictAppend appends b asking for strict sequence order.
func strictAppend(s *Store, topic string, b []byte) (int64, error) {
	l, err := s.Log(topic)
	if err != nil {
		return 0, err
	}
	bases, errs := l.AppendMany([][]byte{b}, []AppendOptions{{StrictSequence: true}})
	return bases[0], errs[0]
}

func mustStrict(t *testing.T, s *Store, topic string, b []byte) int64 {
	t.Helper()
	base, err := strictAppend(s, topic, b)
	if err != nil {
		t.Fatalf("strict append: %v", err)
	}
	return base
}

// wantGap checks that err refuses a strict batch for a gap, naming the
// sequence expected, and that nothing was written.
func wantGap(t *testing.T, s *Store, topic string, err error, expected string, next int64) {
	t.Helper()
	if !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("gap: %v, want ErrOutOfOrderSequence", err)
	}
	if !strings.Contains(err.Error(), "expected "+expected) {
		t.Fatalf("gap: %q does not name the expected sequence %s", err, expected)
	}
	if info, _ := lg(t, s, topic).Info(); info.Next != next {
		t.Fatalf("gap: next %d, want %d: the refused batch was written", info.Next, next)
	}
}

// A strict batch is stored only as its producer's next sequence; a
// duplicate is answered with its first offset; a producer the topic does
// not know takes any first sequence; a loose batch keeps the loose rule.
func TestStrictSequence(t *testing.T) {
	s, _ := openTest(t, 2)
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	// Unknown producer: any first sequence.
	if base := mustStrict(t, s, "t", idemBatch(1, 5, msgs(0, 2)...)); base != 0 {
		t.Fatalf("first strict batch: base %d, want 0", base)
	}
	_, err := strictAppend(s, "t", idemBatch(1, 7, msgs(0, 1)...))
	wantGap(t, s, "t", err, "6", 2)
	// Below the highest stored and never stored: out of order too.
	_, err = strictAppend(s, "t", idemBatch(1, 4, msgs(0, 1)...))
	wantGap(t, s, "t", err, "6", 2)
	if base := mustStrict(t, s, "t", idemBatch(1, 6, msgs(2, 3)...)); base != 2 {
		t.Fatalf("next sequence: base %d, want 2", base)
	}
	// Duplicates, the last and an earlier one, get their first offsets.
	if base := mustStrict(t, s, "t", idemBatch(1, 6, msgs(2, 3)...)); base != 2 {
		t.Fatalf("duplicate of the last: base %d, want 2", base)
	}
	if base := mustStrict(t, s, "t", idemBatch(1, 5, msgs(0, 2)...)); base != 0 {
		t.Fatalf("duplicate of an earlier one: base %d, want 0", base)
	}
	// A duplicate with another count is refused as before.
	if _, err := strictAppend(s, "t", idemBatch(1, 5, msgs(0, 1)...)); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("duplicate with another count: %v", err)
	}

	// In one commit the rule holds batch by batch: 9 before 8 is a gap,
	// 8 then 9 follow each other.
	strict := []AppendOptions{{StrictSequence: true}, {StrictSequence: true}}
	bases, errs := lg(t, s, "t").AppendMany([][]byte{idemBatch(1, 8, msgs(0, 1)...), idemBatch(1, 7, msgs(0, 1)...)}, strict)
	if !errors.Is(errs[0], ErrOutOfOrderSequence) || errs[1] != nil || bases[1] != 5 {
		t.Fatalf("8 then 7 in one commit: %v %v", bases, errs)
	}
	bases, errs = lg(t, s, "t").AppendMany([][]byte{idemBatch(1, 8, msgs(0, 1)...), idemBatch(1, 9, msgs(0, 1)...)}, strict)
	if errs[0] != nil || errs[1] != nil || bases[0] != 6 || bases[1] != 7 {
		t.Fatalf("8 then 9 in one commit: %v %v", bases, errs)
	}

	// The same producer's batch without strict order still fills a gap,
	// as a Client's racing goroutines need.
	if base := mustAppend(t, s, "t", idemBatch(1, 12, msgs(0, 1)...)); base != 8 {
		t.Fatalf("loose after a gap: base %d, want 8", base)
	}
	if base := mustAppend(t, s, "t", idemBatch(1, 11, msgs(0, 1)...)); base != 9 {
		t.Fatalf("loose below the highest: base %d, want 9", base)
	}
	// Strict again: the highest is 12.
	_, err = strictAppend(s, "t", idemBatch(1, 10, msgs(0, 1)...))
	wantGap(t, s, "t", err, "13", 10)

	// The asynchronous path takes the same rule.
	r := newRecorder(2)
	for i, seq := range []uint64{14, 13} {
		b := idemBatch(1, seq, msgs(0, 1)...)
		if err := lg(t, s, "t").AppendAsync(b, AppendOptions{StrictSequence: true}, r, i); err != nil {
			t.Fatal(err)
		}
	}
	r.mu.Lock()
	all := r.all
	r.mu.Unlock()
	if all != nil {
		<-all
	}
	r.mu.Lock()
	gap, next := r.outcomes[0], r.outcomes[1]
	r.mu.Unlock()
	if !errors.Is(gap.err, ErrOutOfOrderSequence) {
		t.Fatalf("async gap: %v", gap.err)
	}
	if o := next; o.err != nil || o.base != 10 {
		t.Fatalf("async next: %d, %v", o.base, o.err)
	}
}

// A producer forgotten to make room still fails with ErrUnknownProducer
// (not a gap), and one idle past the idle time takes any sequence again,
// strict or not.
func TestStrictSequenceForgotten(t *testing.T) {
	var pt producerTable
	pt.record(1, 0, 0, 1, "", 0, time.Hour, 10)
	if _, _, err := pt.lookup(1, 2, 1, "", true, 0, time.Hour); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("gap: %v", err)
	}
	if _, dup, err := pt.lookup(1, 2, 1, "", true, int64(2*time.Hour), time.Hour); dup || err != nil {
		t.Fatalf("idle producer: dup %v, %v", dup, err)
	}
	pt.forget(1, 10)
	if _, _, err := pt.lookup(1, 2, 1, "", true, 0, time.Hour); !errors.Is(err, ErrUnknownProducer) {
		t.Fatalf("forgotten producer: %v", err)
	}
	if _, dup, err := pt.lookup(1, 0, 1, "", true, 0, time.Hour); dup || err != nil {
		t.Fatalf("forgotten producer's sequence 0: dup %v, %v", dup, err)
	}
}

// A follower's table, rebuilt from the batches it replicated, holds each
// producer's highest sequence: once it leads, a strict batch after a gap
// is refused there too, before and after a restart.
func TestStrictSequenceAfterReplicate(t *testing.T) {
	leader, _ := openTest(t, 1)
	if err := leader.CreateTopic("p"); err != nil {
		t.Fatal(err)
	}
	for seq := range uint64(5) {
		mustStrict(t, leader, "p", idemBatch(7, seq, msgs(int(seq)*2, 2)...))
	}
	f, fopts := openTest(t, 2)
	if err := f.CreateTopic("p"); err != nil {
		t.Fatal(err)
	}
	if _, err := lg(t, f, "p").Replicate(rawBatches(t, leader, "p", 0)); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		_, err := strictAppend(f, "p", idemBatch(7, 6, msgs(12, 1)...))
		wantGap(t, f, "p", err, "5", 10)
		if base := mustStrict(t, f, "p", idemBatch(7, 4, msgs(8, 2)...)); base != 8 {
			t.Fatalf("%s: duplicate of a replicated batch: base %d, want 8", when, base)
		}
	}
	check("replicated")
	mustClose(t, f)
	f = mustOpen(t, fopts)
	check("reopened")
	if base := mustStrict(t, f, "p", idemBatch(7, 5, msgs(10, 1)...)); base != 10 {
		t.Fatalf("next sequence: base %d, want 10", base)
	}
	if base := mustStrict(t, f, "p", idemBatch(7, 6, msgs(11, 1)...)); base != 11 {
		t.Fatalf("the batch refused before: base %d, want 11", base)
	}
}
