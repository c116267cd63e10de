package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/haraqa/haraqa/client"
)

// A torture message is "P<producer> S<sequence> " and then filler bytes
// that depend on both, so a message can be rebuilt from its header alone
// and a changed byte anywhere is noticed.
const headerLen = len("P000 S0000000000 ")

// payload is message seq of producer prod.
func payload(prod, seq int) []byte {
	n := headerLen + 24 + (seq*37+prod*11)%200
	b := fmt.Appendf(make([]byte, 0, n), "P%03d S%010d ", prod, seq)
	for i := len(b); i < n; i++ {
		b = append(b, byte('a'+(prod*31+seq*7+i)%26))
	}
	return b
}

// parsePayload returns the producer and sequence of a torture message,
// and whether its bytes are exactly what payload builds for them.
func parsePayload(b []byte) (prod, seq int, ok bool) {
	if len(b) < headerLen || b[0] != 'P' || b[4] != ' ' || b[5] != 'S' {
		return 0, 0, false
	}
	p, err1 := strconv.Atoi(string(b[1:4]))
	s, err2 := strconv.Atoi(string(b[6 : headerLen-1]))
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return p, s, bytes.Equal(b, payload(p, s))
}

// ack is one acknowledged message: who sent it.
type ack struct{ prod, seq int }

// ledger records every acknowledged message of every topic, and the next
// sequence number of each producer, across server restarts.
type ledger struct {
	mu     sync.Mutex
	acked  map[string]map[int64]ack // topic -> offset -> message
	seqs   map[int]int              // producer -> next sequence
	unsure int                      // produces whose fate is unknown (failed)
}

func newLedger() *ledger {
	return &ledger{acked: make(map[string]map[int64]ack), seqs: make(map[int]int)}
}

// next reserves n sequence numbers of producer prod and returns the first.
func (l *ledger) next(prod, n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.seqs[prod]
	l.seqs[prod] = s + n
	return s
}

// record notes that the n messages from seq on landed at base, base+1, ...
func (l *ledger) record(topic string, base int64, prod, seq, n int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.acked[topic]
	if m == nil {
		m = make(map[int64]ack)
		l.acked[topic] = m
	}
	for i := range n {
		off := base + int64(i)
		if old, dup := m[off]; dup {
			return fmt.Errorf("%s offset %d acknowledged twice: P%d S%d and P%d S%d", topic, off, old.prod, old.seq, prod, seq+i)
		}
		m[off] = ack{prod, seq + i}
	}
	return nil
}

func (l *ledger) failed() {
	l.mu.Lock()
	l.unsure++
	l.mu.Unlock()
}

// total is the number of acknowledged messages over all topics.
func (l *ledger) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.acked {
		n += len(m)
	}
	return n
}

// produce sends batch messages of producer prod to topic and records them
// once acknowledged.
func (l *ledger) produce(ctx context.Context, c *client.Client, topic string, prod, batch int) error {
	seq := l.next(prod, batch)
	msgs := make([][]byte, batch)
	for i := range msgs {
		msgs[i] = payload(prod, seq+i)
	}
	base, err := c.Produce(ctx, topic, msgs...)
	if err != nil {
		l.failed()
		return err
	}
	return l.record(topic, base, prod, seq, batch)
}

// checked is what verify found in one topic.
type checked struct {
	acked, present, extra int // acknowledged, messages read, unacknowledged present
}

func (a *checked) add(b checked) {
	a.acked += b.acked
	a.present += b.present
	a.extra += b.extra
}

// verify reads a topic from its oldest offset to its end and checks that
// offsets are dense, every message is a whole torture message, each
// producer's messages are in the order it sent them, and every
// acknowledged message is there at its offset with its exact bytes.
func (l *ledger) verify(ctx context.Context, c *client.Client, topic string) (checked, error) {
	l.mu.Lock()
	want := l.acked[topic]
	l.mu.Unlock()
	var res checked
	res.acked = len(want)
	info, err := c.TopicInfo(ctx, topic)
	if errors.Is(err, client.ErrTopicNotFound) && len(want) == 0 {
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("%s: topic info: %w", topic, err)
	}
	if info.Oldest != 0 {
		return res, fmt.Errorf("%s: oldest offset %d, want 0 (nothing was truncated)", topic, info.Oldest)
	}
	last := make(map[int]int) // producer -> last sequence seen
	var msgs []client.Message
	for off := int64(0); off < info.Next; {
		if msgs, _, err = c.ConsumeInto(ctx, msgs[:0], topic, off, 2000); err != nil {
			return res, fmt.Errorf("%s: consume at %d of %d: %w", topic, off, info.Next, err)
		}
		if len(msgs) == 0 {
			return res, fmt.Errorf("%s: consume at %d returned nothing, next offset %d", topic, off, info.Next)
		}
		for _, m := range msgs {
			w, has := want[off]
			if err := checkMessage(m, off, w, has, last, topic); err != nil {
				return res, err
			}
			if !has {
				res.extra++
			}
			res.present++
			off++
		}
	}
	for off, a := range want {
		if off >= info.Next {
			return res, fmt.Errorf("%s: acknowledged P%d S%d at offset %d is lost: the topic ends at %d", topic, a.prod, a.seq, off, info.Next)
		}
	}
	return res, nil
}

// checkMessage checks one message read at offset off.
// want is the message acknowledged there, if has.
func checkMessage(m client.Message, off int64, want ack, has bool, last map[int]int, topic string) error {
	if m.Offset != off {
		return fmt.Errorf("%s: offsets not dense: got %d, want %d", topic, m.Offset, off)
	}
	prod, seq, ok := parsePayload(m.Value)
	if !ok {
		return fmt.Errorf("%s: offset %d holds %d bytes that are no message sent: %.40q", topic, off, len(m.Value), m.Value)
	}
	if has && want != (ack{prod, seq}) {
		return fmt.Errorf("%s: offset %d holds P%d S%d, acknowledged P%d S%d", topic, off, prod, seq, want.prod, want.seq)
	}
	if prev, seen := last[prod]; seen && seq <= prev {
		return fmt.Errorf("%s: producer %d out of order at offset %d: S%d after S%d", topic, prod, off, seq, prev)
	}
	last[prod] = seq
	return nil
}

// verifyAll checks every topic the ledger knows.
func (l *ledger) verifyAll(ctx context.Context, c *client.Client) (checked, error) {
	l.mu.Lock()
	topics := make([]string, 0, len(l.acked))
	for t := range l.acked {
		topics = append(topics, t)
	}
	l.mu.Unlock()
	var all checked
	for _, t := range topics {
		res, err := l.verify(ctx, c, t)
		all.add(res)
		if err != nil {
			return all, err
		}
	}
	return all, nil
}

// forget drops a deleted topic.
func (l *ledger) forget(topic string) {
	l.mu.Lock()
	delete(l.acked, topic)
	l.mu.Unlock()
}
