package bench

import (
	"cmp"
	"slices"
)

// seqRun is a range of one producer's sequence numbers read one after the
// other, first to last inclusive.
type seqRun struct{ first, last uint64 }

// checker follows the messages one consumer reads from one topic. A
// producer's messages reach a topic in sequence order, so an intact
// reading of a range of offsets sees each producer's numbers as one
// contiguous run; tally puts the runs of the consumers that shared a topic
// together and finds what is missing or repeated. Not safe for concurrent
// use: each consumer owns its checkers.
type checker struct {
	size     int
	full     bool // verify every message's checksum, not just its size
	runs     map[uint32][]seqRun
	corrupt  int64
	received int64
}

func newChecker(size int, full bool) *checker {
	return &checker{size: size, full: full, runs: make(map[uint32][]seqRun)}
}

// add checks one message and returns its header; ok is false, and the
// message counted as corrupt, when its size or checksum is wrong.
func (c *checker) add(m []byte) (h header, ok bool) {
	c.received++
	if c.full && !verify(m, c.size) || len(m) != c.size {
		c.corrupt++
		return header{}, false
	}
	h, _ = parseHeader(m)
	runs := c.runs[h.producer]
	if n := len(runs); n > 0 && runs[n-1].last+1 == h.seq {
		runs[n-1].last = h.seq
		return h, true
	}
	c.runs[h.producer] = append(runs, seqRun{h.seq, h.seq})
	return h, true
}

// Tally is what the readers of a topic found, summed over topics.
type Tally struct {
	Received   int64 // messages read
	Gaps       int64 // messages sent and never read
	Duplicates int64 // messages read more than once
	// Corrupt counts messages whose size or checksum was wrong, and
	// intact messages of a producer or sequence number never sent.
	Corrupt int64
}

// OK reports whether every message was read exactly once, intact.
func (t Tally) OK() bool { return t.Gaps == 0 && t.Duplicates == 0 && t.Corrupt == 0 }

func (t *Tally) merge(o Tally) {
	t.Received += o.Received
	t.Gaps += o.Gaps
	t.Duplicates += o.Duplicates
	t.Corrupt += o.Corrupt
}

// tally compares what the checkers read, together one reading of a topic,
// with sent: the sequence numbers each producer of the topic used (a
// producer that used n numbers sent 0 to n-1).
func tally(sent map[uint32]uint64, checkers ...*checker) Tally {
	var t Tally
	all := make(map[uint32][]seqRun)
	for _, c := range checkers {
		t.Received += c.received
		t.Corrupt += c.corrupt
		for p, runs := range c.runs {
			all[p] = append(all[p], runs...)
		}
	}
	for p, runs := range all {
		n, known := sent[p]
		if !known {
			for _, r := range runs {
				t.Corrupt += int64(r.last - r.first + 1)
			}
			delete(all, p)
			continue
		}
		slices.SortFunc(runs, func(a, b seqRun) int { return cmp.Compare(a.first, b.first) })
		var next uint64 // the lowest number not yet covered
		for _, r := range runs {
			last := r.last
			if last >= n { // numbers never sent
				if r.first >= n {
					t.Corrupt += int64(last - r.first + 1)
					continue
				}
				t.Corrupt += int64(last - n + 1)
				last = n - 1
			}
			if r.first > next {
				t.Gaps += int64(r.first - next)
			}
			if r.first < next {
				t.Duplicates += int64(min(last+1, next) - r.first)
			}
			next = max(next, last+1)
		}
		t.Gaps += int64(n - next)
	}
	for p, n := range sent {
		if _, seen := all[p]; !seen {
			t.Gaps += int64(n)
		}
	}
	return t
}
