package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// futureFailed marks, in a producer's record, a message whose Future
// failed: it may be stored, at most once.
const futureFailed = -1

// onceCheck checks topics written by idempotent Producers: every message
// whose Future gave an offset is read exactly once, at that offset; none
// is read twice; each producer's messages are read in the order it sent
// them; and nothing is read that was not handed to Send. It counts every
// breach instead of stopping at the first, so a failed run says how much
// went wrong.
type onceCheck struct {
	topic map[int]string  // producer -> the topic it writes
	sent  map[int][]int64 // producer -> sequence -> its Future's offset, or futureFailed
	at    map[int][]int64 // producer -> sequence -> offset it was first read at, or -1
	last  map[int]int     // producer -> highest sequence read so far

	res      onceResult
	problems []string // the first few breaches, for the error
}

// onceResult is what a onceCheck counted.
type onceResult struct {
	present      int // messages read
	acked        int // Futures that gave an offset
	failed       int // Futures that failed
	failedStored int // messages whose Future failed, read once
	duplicates   int // reads of a message after its first
	lost         int // messages whose Future gave an offset, never read
	misplaced    int // messages first read at an offset other than their Future's
	disorder     int // messages read after a later one of the same producer
	foreign      int // messages read that no producer handed to Send
}

// maxProblems bounds the breaches an error lists one by one.
const maxProblems = 8

// newOnceCheck starts a check of what the producers sent: sent[p] is
// producer p's record, indexed by sequence, and topic[p] its topic.
func newOnceCheck(topic map[int]string, sent map[int][]int64) *onceCheck {
	c := &onceCheck{topic: topic, sent: sent, at: make(map[int][]int64), last: make(map[int]int)}
	for p, offs := range sent {
		at := make([]int64, len(offs))
		for i := range at {
			at[i] = -1
		}
		c.at[p] = at
		for _, off := range offs {
			if off == futureFailed {
				c.res.failed++
			} else {
				c.res.acked++
			}
		}
	}
	return c
}

// problem notes one breach.
func (c *onceCheck) problem(format string, args ...any) {
	if len(c.problems) < maxProblems {
		c.problems = append(c.problems, fmt.Sprintf(format, args...))
	}
}

// message takes the message read at offset off of topic.
func (c *onceCheck) message(topic string, off int64, value []byte) {
	c.res.present++
	prod, seq, ok := parsePayload(value)
	if !ok {
		c.res.foreign++
		c.problem("%s offset %d: %d bytes that are no message sent: %.40q", topic, off, len(value), value)
		return
	}
	at := c.at[prod]
	if c.topic[prod] != topic || seq >= len(at) {
		c.res.foreign++
		c.problem("%s offset %d: P%d S%d was never handed to Send on this topic", topic, off, prod, seq)
		return
	}
	if first := at[seq]; first >= 0 {
		c.res.duplicates++
		c.problem("%s offset %d: P%d S%d again, first read at %d", topic, off, prod, seq, first)
		return
	}
	at[seq] = off
	if want := c.sent[prod][seq]; want != futureFailed && want != off {
		c.res.misplaced++
		c.problem("%s offset %d: P%d S%d, whose Future gave offset %d", topic, off, prod, seq, want)
	}
	if prev, seen := c.last[prod]; seen && seq < prev {
		c.res.disorder++
		c.problem("%s offset %d: P%d S%d after S%d", topic, off, prod, seq, prev)
		return
	}
	c.last[prod] = seq
}

// finish looks for what was never read and returns the counts, with an
// error naming the breaches if there were any.
func (c *onceCheck) finish() (onceResult, error) {
	for _, p := range slices.Sorted(maps.Keys(c.sent)) {
		offs, at := c.sent[p], c.at[p]
		for seq, off := range offs {
			switch {
			case off == futureFailed && at[seq] >= 0:
				c.res.failedStored++
			case off != futureFailed && at[seq] < 0:
				c.res.lost++
				c.problem("%s: P%d S%d acknowledged at offset %d is lost", c.topic[p], p, seq, off)
			}
		}
	}
	r := c.res
	if r.duplicates+r.lost+r.misplaced+r.disorder+r.foreign == 0 {
		return r, nil
	}
	return r, fmt.Errorf("%d duplicates, %d lost, %d at another offset than their Future's, %d out of order, %d never sent: %s",
		r.duplicates, r.lost, r.misplaced, r.disorder, r.foreign, strings.Join(c.problems, "; "))
}
