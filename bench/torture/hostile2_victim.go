package main

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/haraqa/haraqa/client"
)

// victimProd is the victim's producer number in its messages.
const victimProd = 700

// lat2 is a histogram of produce latencies, in microseconds.
type lat2 struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

func newLat2() *lat2 { return &lat2{h: hdrhistogram.New(1, 60_000_000, 3)} }

func (l *lat2) add(d time.Duration) {
	l.mu.Lock()
	_ = l.h.RecordValue(max(d.Microseconds(), 1))
	l.mu.Unlock()
}

func (l *lat2) p99() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Duration(l.h.ValueAtQuantile(99)) * time.Microsecond
}

func (l *lat2) count() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.h.TotalCount()
}

// victim2 is the well-behaved tenant: from 127.0.0.1 with its own token,
// it produces one message to the row's topic, waits for the ack, pauses a
// millisecond, and so on; every acknowledged message goes in the ledger.
type victim2 struct {
	c, check *client.Client // producing, and reading back
	l        *ledger
	topic    atomic.Pointer[string]
	window   atomic.Pointer[lat2]
	gate     sync.Mutex // held by the producer around each produce; pause takes it
	errMu    sync.Mutex
	nerr     int
	first    error
	stop     chan struct{}
	done     chan struct{}
}

func startVictim(ctx context.Context, g *rig2) (*victim2, error) {
	c, err := g.dial(ctx, g.tok.victim)
	if err != nil {
		return nil, err
	}
	check, err := g.dial(ctx, g.tok.victim)
	if err != nil {
		c.Close()
		return nil, err
	}
	v := &victim2{c: c, check: check, l: newLedger(), stop: make(chan struct{}), done: make(chan struct{})}
	go v.loop(ctx)
	return v, nil
}

func (v *victim2) loop(ctx context.Context) {
	defer close(v.done)
	for {
		select {
		case <-v.stop:
			return
		case <-time.After(time.Millisecond):
		}
		v.gate.Lock()
		t := v.topic.Load()
		if t == nil {
			v.gate.Unlock()
			continue
		}
		begun := time.Now()
		err := v.l.produce(ctx, v.c, *t, victimProd, 1)
		took := time.Since(begun)
		v.gate.Unlock()
		if err != nil {
			v.noteErr(err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if w := v.window.Load(); w != nil {
			w.add(took)
		}
	}
}

func (v *victim2) noteErr(err error) {
	v.errMu.Lock()
	v.nerr++
	if v.first == nil {
		v.first = err
	}
	v.errMu.Unlock()
}

// takeErrors returns the produces failed since the last call, and the first.
func (v *victim2) takeErrors() (int, error) {
	v.errMu.Lock()
	defer v.errMu.Unlock()
	n, first := v.nerr, v.first
	v.nerr, v.first = 0, nil
	return n, first
}

// record sends the latencies to w from now on; nil: nowhere.
func (v *victim2) record(w *lat2) { v.window.Store(w) }

// idleWindow moves the victim to topic and measures it for d before the
// attack.
func (v *victim2) idleWindow(ctx context.Context, topic string, d time.Duration) (*lat2, error) {
	if err := v.check.CreateTopic(ctx, topic); err != nil && !errors.Is(err, client.ErrTopicExists) {
		return nil, err
	}
	v.topic.Store(&topic)
	v.takeErrors()
	w := newLat2()
	v.record(w)
	time.Sleep(d)
	v.record(nil)
	if n, first := v.takeErrors(); n > 0 {
		return nil, first
	}
	if w.count() == 0 {
		return nil, errors.New("no produce acknowledged in the idle window")
	}
	return w, nil
}

// park stops the victim's produces until the next idleWindow.
func (v *victim2) park() {
	v.gate.Lock()
	v.topic.Store(nil)
	v.gate.Unlock()
}

// pause stops the victim's produces until resume.
func (v *victim2) pause()  { v.gate.Lock() }
func (v *victim2) resume() { v.gate.Unlock() }

// verify checks every message acknowledged on topic is stored once.
func (v *victim2) verify(ctx context.Context, topic string) (checked, error) {
	return v.l.verify(ctx, v.check, topic)
}

func (v *victim2) close() {
	close(v.stop)
	<-v.done
	v.c.Close()
	v.check.Close()
}
