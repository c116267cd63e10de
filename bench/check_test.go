package bench

import (
	"testing"
)

// msgs returns stamped messages of producer p with the given sequence
// numbers.
func seqMsgs(pay payload, p uint32, seqs ...uint64) [][]byte {
	out := make([][]byte, len(seqs))
	for i, s := range seqs {
		m := pay.newMessage()
		pay.stamp(m, p, s, 1)
		out[i] = m
	}
	return out
}

func feed(c *checker, ms ...[][]byte) {
	for _, batch := range ms {
		for _, m := range batch {
			c.add(m)
		}
	}
}

func TestTallyIntact(t *testing.T) {
	pay := newPayload(64, false)
	c := newChecker(64, true)
	// Two producers interleaved, as on one topic.
	feed(c, seqMsgs(pay, 1, 0, 1), seqMsgs(pay, 2, 0), seqMsgs(pay, 1, 2), seqMsgs(pay, 2, 1, 2, 3))
	got := tally(map[uint32]uint64{1: 3, 2: 4}, c)
	if want := (Tally{Received: 7}); got != want {
		t.Fatalf("tally = %+v, want %+v", got, want)
	}
	if !got.OK() {
		t.Fatal("intact reading not OK")
	}
}

func TestTallyGapsAndDuplicates(t *testing.T) {
	pay := newPayload(64, false)
	cases := []struct {
		name string
		seqs []uint64
		sent uint64
		want Tally
	}{
		{"gap in the middle", []uint64{0, 1, 4, 5}, 6, Tally{Received: 4, Gaps: 2}},
		{"missing tail", []uint64{0, 1, 2}, 5, Tally{Received: 3, Gaps: 2}},
		{"missing head", []uint64{2, 3}, 4, Tally{Received: 2, Gaps: 2}},
		{"duplicate", []uint64{0, 1, 1, 2}, 3, Tally{Received: 4, Duplicates: 1}},
		{"replayed range", []uint64{0, 1, 2, 3, 1, 2, 3, 4}, 5, Tally{Received: 8, Duplicates: 3}},
		{"reordered", []uint64{1, 0, 2}, 3, Tally{Received: 3}},
		{"never sent", []uint64{0, 1, 2, 7}, 3, Tally{Received: 4, Corrupt: 1}},
		{"nothing read", nil, 3, Tally{Gaps: 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newChecker(64, true)
			feed(c, seqMsgs(pay, 9, tc.seqs...))
			if got := tally(map[uint32]uint64{9: tc.sent}, c); got != tc.want {
				t.Fatalf("tally = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Consumers that split a topic's offsets together make one reading.
func TestTallySplitReading(t *testing.T) {
	pay := newPayload(64, false)
	a, b := newChecker(64, false), newChecker(64, false)
	feed(a, seqMsgs(pay, 1, 0, 1, 2), seqMsgs(pay, 2, 0, 1))
	feed(b, seqMsgs(pay, 1, 3, 4), seqMsgs(pay, 2, 2))
	sent := map[uint32]uint64{1: 5, 2: 3}
	if got := tally(sent, a, b); !got.OK() || got.Received != 8 {
		t.Fatalf("split reading: %+v", got)
	}
	// Either half alone misses the other's messages.
	if got := tally(sent, a); got.Gaps != 3 {
		t.Fatalf("first half alone: %+v, want 3 gaps", got)
	}
	// Overlapping halves read the overlap twice.
	c := newChecker(64, false)
	feed(c, seqMsgs(pay, 1, 2, 3, 4), seqMsgs(pay, 2, 2))
	if got := tally(sent, a, c); got.Duplicates != 1 || got.Gaps != 0 {
		t.Fatalf("overlap: %+v, want 1 duplicate", got)
	}
}

func TestTallyProducerNeverRead(t *testing.T) {
	pay := newPayload(64, false)
	c := newChecker(64, true)
	feed(c, seqMsgs(pay, 1, 0, 1))
	got := tally(map[uint32]uint64{1: 2, 2: 5}, c)
	if got.Gaps != 5 {
		t.Fatalf("tally = %+v, want the 5 messages of producer 2 as gaps", got)
	}
	// A producer nobody sent as is corrupt, not a gap.
	got = tally(map[uint32]uint64{2: 0}, c)
	if got.Corrupt != 2 || got.Gaps != 0 {
		t.Fatalf("tally = %+v, want 2 corrupt", got)
	}
}

func TestCheckerCorrupt(t *testing.T) {
	pay := newPayload(64, false)
	ms := seqMsgs(pay, 1, 0, 1, 2)
	flipped := append([]byte(nil), ms[1]...)
	flipped[40] ^= 0x01 // in the filler
	header := append([]byte(nil), ms[2]...)
	header[5] ^= 0x80 // in the sequence number
	short := ms[0][:63]

	full := newChecker(64, true)
	feed(full, [][]byte{ms[0], flipped, header, short})
	got := tally(map[uint32]uint64{1: 3}, full)
	if got.Corrupt != 3 {
		t.Fatalf("full check: %+v, want 3 corrupt", got)
	}
	// The corrupt ones do not count as read: 1 and 2 are missing.
	if got.Gaps != 2 {
		t.Fatalf("full check: %+v, want 2 gaps", got)
	}
	// The size-only check catches the short message, not the flipped bits.
	quick := newChecker(64, false)
	feed(quick, [][]byte{ms[0], flipped, short})
	if got := tally(map[uint32]uint64{1: 2}, quick); got.Corrupt != 1 || got.Gaps != 0 {
		t.Fatalf("quick check: %+v, want 1 corrupt", got)
	}
}
