package main

import (
	"encoding/binary"
	"hash/maphash"
	"os"
	"path/filepath"
	"testing"

	"github.com/haraqa/haraqa/protocol"
)

// cfLogOf is a copy holding the messages (producer, sequence) at offsets
// 0, 1, ...
func cfLogOf(name string, msgs ...[2]int) cfLog {
	l := cfLog{server: name}
	for off, m := range msgs {
		l.msgs = append(l.msgs, newCfMsg(int64(off), payload(m[0], m[1])))
	}
	return l
}

// TestCfCheckTopic gives the cluster-faults check a clean topic, then one
// each of the breaches it counts, and checks that it tells them apart.
func TestCfCheckTopic(t *testing.T) {
	// Producer 0 (idempotent) had S0-S2 acknowledged at 0, 2, 3; producer
	// 1 (not idempotent) S0 at 1 and S1 unacknowledged.
	ledgers := []cfLedger{{id: 0, idem: true, acks: map[int]int64{0: 0, 1: 2, 2: 3}}, {id: 1, acks: map[int]int64{0: 1}}}
	clean := [][2]int{{0, 0}, {1, 0}, {0, 1}, {0, 2}}
	read := func(msgs ...[2]int) map[int64]uint64 {
		m := map[int64]uint64{}
		for off, x := range msgs {
			m[int64(off)] = maphash.Bytes(cfSeed, payload(x[0], x[1]))
		}
		return m
	}
	cases := []struct {
		name   string
		leader [][2]int
		copies [][][2]int
		reads  map[int64]uint64
		want   cfCounts
	}{
		{"clean", clean, [][][2]int{clean, clean}, read(clean...), cfCounts{}},
		{"unacknowledged stored once", append(clean, [2]int{1, 1}), nil, nil, cfCounts{}},
		{"idempotent stored twice", append(clean, [2]int{0, 2}), nil, nil, cfCounts{dups: 1}},
		{"not idempotent stored twice", append(clean, [2]int{1, 1}, [2]int{1, 1}), nil, nil, cfCounts{nonidemDups: 1}},
		{"lost", clean[:3], nil, nil, cfCounts{lost: 1}},
		{"reordered", [][2]int{{0, 0}, {1, 0}, {0, 2}, {0, 1}}, nil, nil, cfCounts{lost: 2, misplaced: 2, reordered: 1}},
		{"a copy shorter", clean, [][][2]int{clean, clean[:3]}, nil, cfCounts{divergent: 1}},
		{"a copy other", clean, [][][2]int{{{0, 0}, {1, 0}, {1, 1}, {0, 2}}}, nil, cfCounts{divergent: 1}},
		{"a read replaced", clean, nil, read(clean[0], clean[1], [2]int{1, 1}), cfCounts{replaced: 1}},
		{"a read past the end", clean, nil, read(append(clean, [2]int{0, 3})...), cfCounts{replaced: 1}},
		{"foreign", append(clean, [2]int{2, 0}), nil, nil, cfCounts{foreign: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var copies []cfLog
			for _, m := range c.copies {
				copies = append(copies, cfLogOf("copy", m...))
			}
			var reads []map[int64]uint64
			if c.reads != nil {
				reads = append(reads, c.reads)
			}
			got, notes := cfCheckTopic("t", cfLogOf("leader", c.leader...), copies, ledgers, reads)
			if got != c.want {
				t.Errorf("counted %+v, want %+v; %q", got, c.want, notes)
			}
			if (got == cfCounts{}) != (len(notes) == 0) {
				t.Errorf("notes %q for %+v", notes, got)
			}
		})
	}
	// A copy that could not be read whole diverges even if what was read
	// matches.
	broken := cfLogOf("copy", clean...)
	broken.broken = []string{"batch at byte 100: crc mismatch"}
	if got, _ := cfCheckTopic("t", cfLogOf("leader", clean...), []cfLog{broken}, ledgers, nil); got.divergent != 1 {
		t.Errorf("a broken copy: counted %+v, want divergent 1", got)
	}
}

// TestCfLogFiles writes two segments of stamped batches, reads them back,
// then flips a byte in the first: its reading stops there, the second's
// goes on.
func TestCfLogFiles(t *testing.T) {
	vol := t.TempDir()
	dir := filepath.Join(vol, "topics", "t")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var seg []byte
	off := int64(0)
	write := func(name string, batches ...int) {
		seg = seg[:0]
		for _, n := range batches {
			msgs := make([][]byte, n)
			for i := range msgs {
				msgs[i] = payload(0, int(off)+i)
			}
			b := protocol.AppendBatch(nil, msgs...)
			protocol.StampBatch(b, off, 1)
			seg = append(seg, b...)
			off += int64(n)
		}
		if err := os.WriteFile(filepath.Join(dir, name), seg, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("00000000000000000000.log", 3, 2)
	first := len(seg)
	write("00000000000000000005.log", 4)
	l := cfLogFiles(vol, "t")
	if len(l.msgs) != 9 || len(l.broken) > 0 {
		t.Fatalf("read %d messages, broken %q; want 9, none", len(l.msgs), l.broken)
	}
	for i, m := range l.msgs {
		if m.off != int64(i) || !m.ok || m.prod != 0 || m.seq != i {
			t.Fatalf("message %d: %+v", i, m)
		}
	}
	// The last byte of the first segment's second batch, whose CRC then
	// fails: the first batch and the second segment are still read.
	b, _ := os.ReadFile(filepath.Join(dir, "00000000000000000000.log"))
	if len(b) != first || binary.LittleEndian.Uint32(b) == 0 {
		t.Fatalf("first segment: %d bytes, want %d", len(b), first)
	}
	b[len(b)-1] ^= 0xff
	if err := os.WriteFile(filepath.Join(dir, "00000000000000000000.log"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	l = cfLogFiles(vol, "t")
	if len(l.msgs) != 7 || len(l.broken) != 1 {
		t.Fatalf("damaged: read %d messages, broken %q; want 7, one", len(l.msgs), l.broken)
	}
}
