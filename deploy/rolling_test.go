package deploy

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
)

// ackLog is what a producer was answered: each acknowledged message's
// offset, the errors, the longest a produce took and how many took
// longer than slowAck.
type ackLog struct {
	mu      sync.Mutex
	offsets []int64 // of message i
	errs    []error
	slowest time.Duration
	slow    int
}

// slowAck is a produce's time worth counting in a healthy cluster on
// loopback, where an acknowledgement takes milliseconds.
const slowAck = 250 * time.Millisecond

func (a *ackLog) acked() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.offsets)
}

// produceUntil produces message 0, 1, ... one at a time to topic with
// acks=all through c until ctx ends, each given ioTimeout.
func produceUntil(ctx context.Context, c *client.Client, topic string, a *ackLog) {
	for i := 0; ctx.Err() == nil; i++ {
		pctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
		began := time.Now()
		off, err := c.Produce(pctx, topic, []byte(strconv.Itoa(i)))
		took := time.Since(began)
		cancel()
		a.mu.Lock()
		a.slowest = max(a.slowest, took)
		if took > slowAck {
			a.slow++
		}
		if err != nil {
			a.errs = append(a.errs, err)
			a.mu.Unlock()
			return // message i is not acknowledged: the next would not be i+1
		}
		a.offsets = append(a.offsets, off)
		a.mu.Unlock()
	}
}

// readLog is what a Reader following a topic read: each message's value
// and offset in order, and the error that stopped it, if any.
type readLog struct {
	mu     sync.Mutex
	values []string
	offs   []int64
	err    error
}

func (l *readLog) read() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.values)
}

// add records msgs, and err unless ctx ended.
func (l *readLog) add(ctx context.Context, msgs []client.Message, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range msgs {
		l.values = append(l.values, string(m.Value))
		l.offs = append(l.offs, m.Offset)
	}
	if err != nil && ctx.Err() == nil {
		l.err = err
	}
}

// readUntil follows topic from offset 0 through a Reader of c until ctx
// ends; any other error stops it and is kept.
func readUntil(ctx context.Context, c *client.Client, topic string, l *readLog) {
	r, err := c.NewReader(topic, 0)
	if err != nil {
		l.mu.Lock()
		l.err = err
		l.mu.Unlock()
		return
	}
	defer r.Close()
	for {
		msgs, err := r.Next(ctx)
		l.add(ctx, msgs, err)
		if err != nil {
			return
		}
	}
}

// consumeUntil reads topic from offset 0 with the client's Consume, a
// request at a time, until ctx ends; the first other error stops it and
// is kept. It counts the messages in l.
func consumeUntil(ctx context.Context, c *client.Client, topic string, l *readLog) {
	for off := int64(0); ; {
		msgs, err := c.Consume(ctx, topic, off, 100)
		l.add(ctx, msgs, err)
		if err != nil || ctx.Err() != nil {
			return
		}
		if len(msgs) == 0 {
			time.Sleep(10 * time.Millisecond) // at the end
		}
		off += int64(len(msgs))
	}
}

// TestClusterRollingRestart does to the cluster of deploy/kubernetes what
// the StatefulSet's RollingUpdate and docs/deploy.md ("Rolling upgrades")
// do: restart one pod at a time, from the highest ordinal down, each with
// SIGTERM and the same volumes, and before the next wait until the
// restarted pod is ready and every pod is in step with the Raft group
// with every topic's in-sync set full (hrqa cluster status). Meanwhile a
// client given every pod produces with acks=all: no produce may fail, and
// every acknowledged message is read back once, in order; and a Reader of
// that client follows the topic throughout: it never fails, and reads
// every acknowledged message once, in order. It also logs
// what the restarted pod's cluster status said when /readyz first
// answered 200, which is all a readiness probe waits for.
func TestClusterRollingRestart(t *testing.T) {
	s := haraqa(t)
	sts := loadManifests(t).statefulSets[0]
	ps := startPods(t, s, sts, testAuth())
	ps.exercise(t, 3)
	c := ps.dial(t, ps.addrs())
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	if err := c.CreateTopic(ctx, "rolling"); err != nil {
		t.Fatalf("create topic: %v\n%s", err, ps.log())
	}
	var a ackLog
	done := make(chan struct{})
	go func() { defer close(done); produceUntil(ctx, c, "rolling", &a) }()
	var rl readLog
	rctx, stopReading := context.WithCancel(t.Context())
	defer stopReading()
	readDone := make(chan struct{})
	go func() { defer close(readDone); readUntil(rctx, c, "rolling", &rl) }()
	var cl readLog
	consumeDone := make(chan struct{})
	go func() { defer close(consumeDone); consumeUntil(rctx, c, "rolling", &cl) }()
	// Each step waits for a few more acknowledgements, so that they fit
	// the deadline also when every produce with acks=all takes 0.5 or 1 s:
	// as it does on a healthy cluster when the topic's leader leads
	// another topic too (the followers' fetches wait out
	// replica.DefaultFetchWait, 500 ms, for that server's other topic).
	progress := func(what string) {
		t.Helper()
		from, deadline := a.acked(), time.Now().Add(ioTimeout)
		for a.acked() < from+5 {
			a.mu.Lock()
			errs := a.errs
			a.mu.Unlock()
			if len(errs) > 0 || time.Now().After(deadline) {
				stop()
				<-done
				t.Fatalf("%s: %d acknowledged, then %v\n%s", what, a.acked(), errors.Join(errs...), ps.log())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	progress("before the restarts")
	for i := len(ps.list) - 1; i >= 0; i-- {
		ps.list[i].r.stop(t)
		ps.start(t, i)
		ps.ready(t, i)
		if st, err := ps.status(ctx, i); err == nil {
			t.Logf("pod %d: ready; its cluster status then: in step %v, raft leader %q, topics %+v", i, st.InStep, st.RaftLeader, st.Topics)
		}
		for j := range ps.list {
			ps.waitInStep(t, j)
			ps.waitInSync(t, j)
		}
		progress("after restarting pod " + strconv.Itoa(i))
	}
	stop()
	<-done
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.errs) > 0 {
		t.Fatalf("a produce failed during the rolling restart: %v\n%s", errors.Join(a.errs...), ps.log())
	}
	t.Logf("%d messages acknowledged with acks=all during the restarts; the slowest produce took %v, %d took over %v",
		len(a.offsets), a.slowest.Round(time.Millisecond), a.slow, slowAck)
	msgs, err := c.Consume(t.Context(), "rolling", 0, len(a.offsets)+1)
	if err != nil {
		t.Fatalf("consume: %v\n%s", err, ps.log())
	}
	if len(msgs) < len(a.offsets) {
		t.Fatalf("%d messages read back, %d acknowledged", len(msgs), len(a.offsets))
	}
	for i, off := range a.offsets {
		if m := msgs[i]; off != int64(i) || m.Offset != off || string(m.Value) != strconv.Itoa(i) {
			t.Fatalf("message %d acknowledged at offset %d, read at %d as %q", i, off, m.Offset, m.Value)
		}
	}
	for deadline := time.Now().Add(ioTimeout); rl.read() < len(a.offsets); {
		rl.mu.Lock()
		err := rl.err
		rl.mu.Unlock()
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("the Reader following the topic read %d of %d acknowledged messages, then: %v\n%s", rl.read(), len(a.offsets), err, ps.log())
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopReading()
	<-readDone
	<-consumeDone
	if rl.err != nil {
		t.Fatalf("the Reader following the topic: %v", rl.err)
	}
	if cl.err != nil {
		t.Fatalf("Consume after %d messages: %v", len(cl.values), cl.err)
	}
	for i := range cl.values {
		if cl.offs[i] != int64(i) || cl.values[i] != strconv.Itoa(i) {
			t.Fatalf("Consume's message %d: offset %d, %q", i, cl.offs[i], cl.values[i])
		}
	}
	for i := range a.offsets {
		if rl.offs[i] != int64(i) || rl.values[i] != strconv.Itoa(i) {
			t.Fatalf("the Reader's message %d: offset %d, %q", i, rl.offs[i], rl.values[i])
		}
	}
	t.Logf("a Reader followed the topic through the restarts: %d messages, in order, no error; Consume calls read %d", len(rl.values), len(cl.values))
	ps.stop(t)
}
