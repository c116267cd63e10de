package storage

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/haraqa/haraqa/protocol"
)

// Owners of the tests below: two tokens' hashes.
const (
	ownerVictim   = "1111111111111111111111111111111111111111111111111111111111111111"
	ownerAttacker = "2222222222222222222222222222222222222222222222222222222222222222"
)

// appendOwned appends one batch as owner.
func appendOwned(s *Store, topic, owner string, b []byte) (int64, error) {
	l, err := s.Log(topic)
	if err != nil {
		return 0, err
	}
	bases, errs := l.AppendMany([][]byte{b}, []AppendOptions{{Owner: owner}})
	return bases[0], errs[0]
}

// countMessages reads the topic whole and returns how many times each
// message was stored.
func countMessages(t *testing.T, s *Store, topic string) map[string]int {
	t.Helper()
	n := make(map[string]int)
	for _, m := range readAll(t, s, topic, 0) {
		n[string(m)]++
	}
	return n
}

// The review's attack: an attacker reads the victim's producer id from
// the batch headers and sends the victim's next sequences first. With
// owners, the attacker's batches are refused (ErrProducerFenced) and
// every batch of the victim is stored, once; the binding survives a
// restart, so the victim can still retry, and the attacker is still
// fenced.
func TestProducerFenced(t *testing.T) {
	s, opts := openTest(t, 2)
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	const pid = 0x5eed
	victim := func(seq uint64) []byte {
		return idemBatch(pid, seq, []byte(fmt.Sprintf("victim-%d", seq)))
	}
	for seq := range uint64(3) {
		if _, err := appendOwned(s, "t", ownerVictim, victim(seq)); err != nil {
			t.Fatal(err)
		}
	}
	for seq := uint64(3); seq < 16; seq++ {
		_, err := appendOwned(s, "t", ownerAttacker, idemBatch(pid, seq, []byte("forged")))
		if !errors.Is(err, ErrProducerFenced) {
			t.Fatalf("attacker's seq %d under the victim's id: %v, want ErrProducerFenced", seq, err)
		}
	}
	for seq := uint64(3); seq < 13; seq++ {
		if _, err := appendOwned(s, "t", ownerVictim, victim(seq)); err != nil {
			t.Fatalf("victim seq %d: %v", seq, err)
		}
	}
	check := func(s *Store) {
		t.Helper()
		n := countMessages(t, s, "t")
		for seq := range 13 {
			if c := n[fmt.Sprintf("victim-%d", seq)]; c != 1 {
				t.Fatalf("victim's seq %d stored %d times, want 1", seq, c)
			}
		}
		if n["forged"] != 0 || len(n) != 13 {
			t.Fatalf("stored %v, want the victim's 13 messages only", n)
		}
	}
	check(s)
	// A restart keeps the binding: the victim's retry is answered with its
	// offset, the attacker is refused, and so is a batch sent without a
	// token... which is trusted: no token means no auth.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if base, err := appendOwned(s2, "t", ownerVictim, victim(12)); err != nil || base != 12 {
		t.Fatalf("victim's retry after a restart: base %d, %v; want 12", base, err)
	}
	if _, err := appendOwned(s2, "t", ownerAttacker, idemBatch(pid, 13, []byte("forged"))); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("attacker after a restart: %v, want ErrProducerFenced", err)
	}
	if _, err := appendOwned(s2, "t", ownerVictim, victim(13)); err != nil {
		t.Fatal(err)
	}
	if n := countMessages(t, s2, "t"); n["forged"] != 0 || len(n) != 14 {
		t.Fatalf("after a restart: stored %v, want the victim's 14 messages", n)
	}
}

// The bindings file is read up to its first torn record, and a producer
// stored without an owner (no auth) is bound by the first owner that
// sends under it, and so fenced for the others.
func TestBindingRecovery(t *testing.T) {
	s, opts := openTest(t, 1)
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	if _, err := appendOwned(s, "t", ownerVictim, idemBatch(1, 0, []byte("a"))); err != nil {
		t.Fatal(err)
	}
	if _, err := appendOwned(s, "t", "", idemBatch(2, 0, []byte("b"))); err != nil {
		t.Fatal(err)
	}
	s.Close()
	path := filepath.Join(s.topicDir(0, "t"), bindingsName)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{9, 9, 9}) // a torn record
	f.Close()
	s2, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := appendOwned(s2, "t", ownerAttacker, idemBatch(1, 1, []byte("x"))); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("bound producer after a torn file: %v, want ErrProducerFenced", err)
	}
	if _, err := appendOwned(s2, "t", ownerVictim, idemBatch(2, 1, []byte("c"))); err != nil {
		t.Fatalf("unbound producer claimed: %v", err)
	}
	if _, err := appendOwned(s2, "t", ownerAttacker, idemBatch(2, 2, []byte("x"))); !errors.Is(err, ErrProducerFenced) {
		t.Fatalf("claimed producer: %v, want ErrProducerFenced", err)
	}
	if _, err := appendOwned(s2, "t", "", idemBatch(2, 2, []byte("d"))); err != nil {
		t.Fatalf("no owner (no auth) is trusted: %v", err)
	}
}

// The attacker's variant: sequences near 2^62 under a producer id, which
// left every later batch of it below the remembered window (code 22),
// even after a restart. A remembered producer's sequence may step forward
// by at most MaxSequenceStep.
func TestSequenceJump(t *testing.T) {
	s, opts := openTest(t, 1)
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	const pid = 77
	for _, owner := range []string{ownerVictim, ""} {
		t.Run("owner="+owner[:min(len(owner), 4)], func(t *testing.T) {
			if _, err := appendOwned(s, "t", owner, idemBatch(pid, 0, []byte("v0"))); err != nil && !errors.Is(err, ErrOutOfOrderSequence) {
				t.Fatal(err)
			}
			for k := range uint64(dedupWindow) {
				_, err := appendOwned(s, "t", owner, idemBatch(pid, 1<<62+k, []byte("jump")))
				if !errors.Is(err, ErrOutOfOrderSequence) {
					t.Fatalf("sequence 2^62+%d after 0: %v, want ErrOutOfOrderSequence", k, err)
				}
			}
			if _, err := appendOwned(s, "t", owner, idemBatch(pid, MaxSequenceStep, []byte("v1"))); err != nil {
				t.Fatalf("a step of MaxSequenceStep: %v", err)
			}
		})
	}
	s.Close()
	s2, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := appendOwned(s2, "t", ownerVictim, idemBatch(pid, MaxSequenceStep+1, []byte("v2"))); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
	if n := countMessages(t, s2, "t"); n["jump"] != 0 {
		t.Fatalf("jumped batches stored: %v", n)
	}
}

// The review's eviction: 1000 fresh producer ids pushed the victim's out
// of the table, so that its retry was stored twice. With owners, one
// owner pushes out only its own producers (its quota, then the largest
// holder's); without them (no auth), a producer pushed out leaves a
// tombstone and its retry is refused (ErrUnknownProducer), never stored
// twice.
func TestEvictionRefused(t *testing.T) {
	for _, tc := range []struct {
		name             string
		victim, attacker string
	}{
		{"tokens", ownerVictim, ownerAttacker},
		{"no auth", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := openTest(t, 1, func(o *Options) { o.Entries = 100000 })
			defer s.Close()
			if err := s.CreateTopic("t"); err != nil {
				t.Fatal(err)
			}
			const pid = 1 << 40
			for seq := range uint64(2) {
				if _, err := appendOwned(s, "t", tc.victim, idemBatch(pid, seq, []byte(fmt.Sprintf("victim-%d", seq)))); err != nil {
					t.Fatal(err)
				}
			}
			flood := make([][]byte, DefaultMaxProducers)
			for i := range flood {
				flood[i] = idemBatch(uint64(i+1), 0, []byte("flood"))
			}
			_, errs := lg(t, s, "t").AppendMany(flood, ownedBy(tc.attacker, len(flood)))
			for i, err := range errs {
				if err != nil {
					t.Fatalf("flood %d: %v", i, err)
				}
			}
			// The victim's retry of seq 1: the same offset, or refused.
			base, err := appendOwned(s, "t", tc.victim, idemBatch(pid, 1, []byte("victim-1")))
			switch {
			case tc.victim != "" && (err != nil || base != 1):
				t.Fatalf("victim's retry: base %d, %v; want 1 (its first offset)", base, err)
			case tc.victim == "" && !errors.Is(err, ErrUnknownProducer):
				t.Fatalf("victim's retry after eviction without auth: base %d, %v; want ErrUnknownProducer", base, err)
			}
			if c := countMessages(t, s, "t")["victim-1"]; c != 1 {
				t.Fatalf("victim's seq 1 stored %d times, want 1", c)
			}
			if tc.victim == "" {
				// A new producer's first batch under that id is taken.
				if _, err := appendOwned(s, "t", "", idemBatch(pid, 0, []byte("again"))); err != nil {
					t.Fatal(err)
				}
				return
			}
			tp, _ := s.lookup("t")
			tp.wmu.Lock()
			held := tp.producers.owned[tc.attacker]
			tp.wmu.Unlock()
			if held > ownerQuota(DefaultMaxProducers) {
				t.Fatalf("attacker holds %d producers, quota %d", held, ownerQuota(DefaultMaxProducers))
			}
			// The attacker's own forgotten producers' retries are refused.
			if _, err := appendOwned(s, "t", tc.attacker, idemBatch(1, 1, []byte("flood"))); !errors.Is(err, ErrUnknownProducer) {
				t.Fatalf("attacker's evicted producer: %v, want ErrUnknownProducer", err)
			}
		})
	}
}

// The review's import: an import with no batches at offset MaxInt64-1,
// then produces, wrapped offsets negative: acknowledged but unreadable,
// then cut at a restart. Offsets are bounded by MaxOffset: the import is
// refused past it, and a produce that would pass it fails with
// ErrOffsetLimit, writing nothing.
func TestImportOverflow(t *testing.T) {
	s, opts := openTest(t, 1)
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{math.MaxInt64 - 1, math.MaxInt64, MaxOffset + 1} {
		if _, _, err := lg(t, s, "t").Import(off, nil); !errors.Is(err, ErrInvalidImport) {
			t.Fatalf("import at %d: %v, want ErrInvalidImport", off, err)
		}
	}
	// A batch stamped past the bound is refused too.
	b := protocol.AppendBatch(nil, []byte("a"), []byte("b"))
	protocol.StampBatch(b, MaxOffset-1, 1)
	if _, _, err := lg(t, s, "t").Import(MaxOffset-1, [][]byte{b}); !errors.Is(err, ErrInvalidImport) {
		t.Fatalf("import of a batch past MaxOffset: %v, want ErrInvalidImport", err)
	}
	if _, next, err := lg(t, s, "t").Import(MaxOffset-2, nil); err != nil || next != MaxOffset-2 {
		t.Fatalf("import at MaxOffset-2: next %d, %v", next, err)
	}
	if base, err := lg(t, s, "t").Append(protocol.AppendBatch(nil, []byte("x"), []byte("y")), AppendOptions{}); err != nil || base != MaxOffset-2 {
		t.Fatalf("produce up to MaxOffset: base %d, %v", base, err)
	}
	for _, n := range []int{1, 3} {
		ms := make([][]byte, n)
		for i := range ms {
			ms[i] = []byte("z")
		}
		if _, err := lg(t, s, "t").Append(protocol.AppendBatch(nil, ms...), AppendOptions{}); !errors.Is(err, ErrOffsetLimit) {
			t.Fatalf("produce of %d past MaxOffset: %v, want ErrOffsetLimit", n, err)
		}
	}
	check := func(s *Store) {
		t.Helper()
		info, err := lg(t, s, "t").Info()
		if err != nil || info.Oldest != MaxOffset-2 || info.Next != MaxOffset {
			t.Fatalf("info %+v, %v; want oldest %d next %d", info, err, int64(MaxOffset-2), int64(MaxOffset))
		}
		if got := readAll(t, s, "t", MaxOffset-2); len(got) != 2 {
			t.Fatalf("read %d messages, want 2", len(got))
		}
	}
	check(s)
	s.Close()
	s2, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	check(s2)
}
