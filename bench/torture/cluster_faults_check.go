package main

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// The checks of the cluster-faults phase: every topic's log as each
// server's segment files hold it (the whole log, past the high-water
// mark too) and as each server serves it, against the producers' ledgers
// and the readers' records.

// cfMsg is one stored message: its offset, a hash of its value, and the
// producer and sequence its value names (ok when it is exactly what
// payload builds for them).
type cfMsg struct {
	off       int64
	h         uint64
	prod, seq int
	ok        bool
}

var cfSeed = maphash.MakeSeed()

func newCfMsg(off int64, v []byte) cfMsg {
	prod, seq, ok := parsePayload(v)
	return cfMsg{off: off, h: maphash.Bytes(cfSeed, v), prod: prod, seq: seq, ok: ok}
}

// cfLog is one server's copy of one topic.
type cfLog struct {
	server string
	msgs   []cfMsg
	broken []string // what could not be read: corrupt batches, read errors
}

// cfLogFiles parses the segment files of topic on volume vol, in offset
// order: every batch's CRC checked, every message's offset and value. A
// batch that does not parse or check ends its segment's reading (noted
// in broken); the next segment is read from its own start.
func cfLogFiles(vol, topic string) cfLog {
	l := cfLog{server: vol}
	dir := filepath.Join(vol, "topics", topic)
	ents, err := os.ReadDir(dir)
	if err != nil {
		l.broken = append(l.broken, err.Error())
		return l
	}
	var names []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names) // zero-padded base offsets
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			l.broken = append(l.broken, err.Error())
			continue
		}
		if err := cfParseSegment(b, &l.msgs); err != nil {
			l.broken = append(l.broken, fmt.Sprintf("%s (%d bytes): %v", n, len(b), err))
		}
	}
	return l
}

// cfParseSegment appends the messages of the batches in b to msgs.
func cfParseSegment(b []byte, msgs *[]cfMsg) error {
	for pos := 0; pos < len(b); {
		bt, n, err := protocol.ParseBatch(b[pos:])
		if err == nil {
			err = bt.Verify()
		}
		if err == nil && bt.Codec != protocol.CodecNone {
			err = fmt.Errorf("codec %v", bt.Codec)
		}
		if err == nil {
			err = protocol.Messages(bt.Body, bt.Count, bt.BaseOffset, func(off int64, v []byte) error {
				*msgs = append(*msgs, newCfMsg(off, v))
				return nil
			})
		}
		if err != nil {
			return fmt.Errorf("batch at byte %d: %w", pos, err)
		}
		pos += n
	}
	return nil
}

// cfLogServed reads topic from addr over the binary protocol, from its
// oldest offset to its next (as the server serves it).
func cfLogServed(ctx context.Context, addr, topic string) cfLog {
	l := cfLog{server: addr}
	c, err := client.Dial(ctx, addr, client.WithDialTimeout(2*time.Second),
		client.WithRequestTimeout(30*time.Second), client.WithRetries(2, 100*time.Millisecond))
	if err != nil {
		l.broken = append(l.broken, err.Error())
		return l
	}
	defer c.Close()
	info, err := c.TopicInfo(ctx, topic)
	if err != nil {
		l.broken = append(l.broken, err.Error())
		return l
	}
	var msgs []client.Message
	for off := info.Oldest; off < info.Next; {
		if msgs, _, err = c.ConsumeInto(ctx, msgs[:0], topic, off, 5000); err != nil {
			l.broken = append(l.broken, fmt.Sprintf("consume at %d of %d: %v", off, info.Next, err))
			return l
		}
		if len(msgs) == 0 {
			l.broken = append(l.broken, fmt.Sprintf("consume at %d returned nothing, next offset %d", off, info.Next))
			return l
		}
		for _, m := range msgs {
			l.msgs = append(l.msgs, newCfMsg(m.Offset, m.Value))
			off = m.Offset + 1
		}
	}
	return l
}

// cfLedger is what a producer had acknowledged, for the check.
type cfLedger struct {
	id   int
	idem bool
	acks map[int]int64 // sequence -> offset
}

// cfCounts is what the check found, over all topics.
type cfCounts struct {
	lost, dups, nonidemDups, reordered, divergent, replaced int
	misplaced, foreign                                      int // of lost: found at another offset; messages no producer sent
}

func (a *cfCounts) add(b cfCounts) {
	a.lost += b.lost
	a.dups += b.dups
	a.nonidemDups += b.nonidemDups
	a.reordered += b.reordered
	a.divergent += b.divergent
	a.replaced += b.replaced
	a.misplaced += b.misplaced
	a.foreign += b.foreign
}

// cfCheckTopic checks one topic: the leader's log against the ledgers of
// the topic's producers (lost, duplicated, reordered, foreign messages),
// every other copy against the leader's (divergent: each copy, as files
// or as served, whose offsets and values differ from it), and the
// readers' records against it (replaced). It returns the counts and a
// few lines saying what differed.
func cfCheckTopic(topic string, leader cfLog, copies []cfLog, ledgers []cfLedger, reads []map[int64]uint64) (cfCounts, []string) {
	var r cfCounts
	var notes []string
	note := func(format string, args ...any) {
		if len(notes) < 12 {
			notes = append(notes, topic+": "+fmt.Sprintf(format, args...))
		}
	}
	for _, b := range leader.broken {
		note("the leader's copy on %s: %s", leader.server, b)
	}
	idem := map[int]bool{}
	for _, l := range ledgers {
		idem[l.id] = l.idem
	}
	at := make(map[int64]uint64, len(leader.msgs)) // offset -> hash
	first := map[[2]int]int64{}                    // (producer, sequence) -> first offset
	last := map[int]int{}                          // producer -> highest sequence so far
	for _, m := range leader.msgs {
		at[m.off] = m.h
		_, known := idem[m.prod]
		if !m.ok || !known {
			if r.foreign < 3 {
				note("offset %d holds a message no producer of the topic sent", m.off)
			}
			r.foreign++
			continue
		}
		k := [2]int{m.prod, m.seq}
		if off, dup := first[k]; dup {
			if idem[m.prod] {
				r.dups++
			} else {
				r.nonidemDups++
			}
			if r.dups+r.nonidemDups <= 3 {
				note("P%d S%d at %d and again at %d", m.prod, m.seq, off, m.off)
			}
			continue
		}
		first[k] = m.off
		if s, ok := last[m.prod]; ok && m.seq < s {
			if r.reordered < 3 {
				note("P%d S%d at %d after S%d", m.prod, m.seq, m.off, s)
			}
			r.reordered++
		}
		last[m.prod] = max(last[m.prod], m.seq)
	}
	cfCheckAcked(&r, ledgers, first, note)
	for _, c := range copies {
		if d := cfDiffer(leader.msgs, c.msgs); d != "" || len(c.broken) > 0 {
			r.divergent++
			note("the copy of %s differs from the leader's (%s): %s %s", c.server, leader.server, d, strings.Join(c.broken, "; "))
		}
	}
	for i, rd := range reads {
		for off, h := range rd {
			if got, ok := at[off]; !ok || got != h {
				if r.replaced < 3 {
					note("reader %d read offset %d, which now holds another message (present: %v)", i, off, ok)
				}
				r.replaced++
			}
		}
	}
	return r, notes
}

// cfCheckAcked counts in r the acknowledged messages of ledgers that are
// not at their acknowledged offset in first, the leader's log ((producer,
// sequence) -> first offset): lost, and of those, misplaced.
func cfCheckAcked(r *cfCounts, ledgers []cfLedger, first map[[2]int]int64, note func(string, ...any)) {
	for _, l := range ledgers {
		for seq, off := range l.acks {
			got, ok := first[[2]int{l.id, seq}]
			if ok && got == off {
				continue
			}
			if r.lost < 3 {
				note("P%d S%d acknowledged at %d, found: %v (at %d)", l.id, seq, off, ok, got)
			}
			r.lost++
			if ok {
				r.misplaced++
			}
		}
	}
}

// cfDiffer says where b first differs from a, or "" if they are the same
// offsets with the same values.
func cfDiffer(a, b []cfMsg) string {
	for i := range min(len(a), len(b)) {
		if a[i].off != b[i].off || a[i].h != b[i].h {
			return fmt.Sprintf("message %d: offset %d against %d, values equal: %v", i, a[i].off, b[i].off, a[i].h == b[i].h)
		}
	}
	if len(a) != len(b) {
		return fmt.Sprintf("%d messages against %d", len(a), len(b))
	}
	return ""
}

// cfReader follows a topic on one server throughout the phase, recording
// the value (its hash) of every offset it read.
type cfReader struct {
	addr, topic string
	stop        atomic.Bool
	done        chan struct{}

	mu     sync.Mutex
	seen   map[int64]uint64
	next   int64
	errs   int
	errMsg string
}

func startCfReader(ctx context.Context, addr, topic string) *cfReader {
	r := &cfReader{addr: addr, topic: topic, seen: map[int64]uint64{}, done: make(chan struct{})}
	go r.run(ctx)
	return r
}

func (r *cfReader) run(ctx context.Context) {
	defer close(r.done)
	var c *client.Client
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	var msgs []client.Message
	for !r.stop.Load() && ctx.Err() == nil {
		var err error
		if c == nil {
			c, err = client.Dial(ctx, r.addr, client.WithDialTimeout(time.Second),
				client.WithRequestTimeout(5*time.Second), client.WithRetries(0, 0))
		}
		if err == nil {
			msgs, _, err = c.ConsumeInto(ctx, msgs[:0], r.topic, r.next, 2000)
		}
		if err != nil {
			r.mu.Lock()
			r.errs++
			r.errMsg = err.Error()
			r.mu.Unlock()
			if errors.Is(err, client.ErrConnection) && c != nil {
				c.Close()
				c = nil
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if len(msgs) == 0 {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		r.mu.Lock()
		for _, m := range msgs {
			if _, again := r.seen[m.Offset]; !again { // the first value read there counts
				r.seen[m.Offset] = maphash.Bytes(cfSeed, m.Value)
			}
			r.next = m.Offset + 1
		}
		r.mu.Unlock()
	}
}

// end stops the reader and returns what it read.
func (r *cfReader) end() map[int64]uint64 {
	r.stop.Store(true)
	<-r.done
	return r.seen
}

func (r *cfReader) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := fmt.Sprintf("%s on %s: %d offsets read, %d errors", r.topic, r.addr, len(r.seen), r.errs)
	if r.errs > 0 {
		s += fmt.Sprintf(" (the last: %.100s)", r.errMsg)
	}
	return s
}
