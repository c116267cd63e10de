package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/haraqa/haraqa/client"
)

const (
	goodTopic = "good"
	goodSize  = 1024 // bytes per well-behaved message
)

// latencies are the histograms of one measurement window, in microseconds.
type latencies struct {
	mu      sync.Mutex
	produce *hdrhistogram.Histogram // produce request to ack
	e2e     *hdrhistogram.Histogram // produce sent to message consumed
}

func newLatencies() *latencies {
	return &latencies{produce: hdrhistogram.New(1, 60_000_000, 3), e2e: hdrhistogram.New(1, 60_000_000, 3)}
}

func (l *latencies) record(h *hdrhistogram.Histogram, d time.Duration) {
	l.mu.Lock()
	_ = h.RecordValue(max(d.Microseconds(), 1))
	l.mu.Unlock()
}

func (l *latencies) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := func(h *hdrhistogram.Histogram, p float64) time.Duration {
		return (time.Duration(h.ValueAtQuantile(p)) * time.Microsecond).Round(time.Microsecond)
	}
	return fmt.Sprintf("produce p50 %s p99 %s max %s (%d), end-to-end p50 %s p99 %s (%d)",
		q(l.produce, 50), q(l.produce, 99), q(l.produce, 100), l.produce.TotalCount(),
		q(l.e2e, 50), q(l.e2e, 99), l.e2e.TotalCount())
}

// goodMessage is message seq: the send time, seq, then filler from seq.
func goodMessage(seq int64, sent time.Time) []byte {
	b := make([]byte, goodSize)
	binary.LittleEndian.PutUint64(b, uint64(sent.UnixNano()))
	binary.LittleEndian.PutUint64(b[8:], uint64(seq))
	for i := 16; i < len(b); i++ {
		b[i] = byte(seq) + byte(i)
	}
	return b
}

// wellBehaved is one producer that sends a 1 KiB message and waits for
// its ack, and one consumer following the topic, both recording into the
// current window.
type wellBehaved struct {
	window   atomic.Pointer[latencies]
	acked    atomic.Int64 // messages acknowledged; offsets 0..acked-1
	consumed atomic.Int64 // messages consumed and checked
	errs     chan error
	stop     chan struct{}
	wg       sync.WaitGroup
}

// startWellBehaved starts both clients on their own connections.
func startWellBehaved(ctx context.Context, s *server, w *latencies) (*wellBehaved, error) {
	g := &wellBehaved{errs: make(chan error, 2), stop: make(chan struct{})}
	g.window.Store(w)
	prod, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	if err := prod.CreateTopic(ctx, goodTopic); err != nil {
		prod.Close()
		return nil, err
	}
	cons, err := s.dial(ctx, client.WithRetries(3, 100*time.Millisecond))
	if err != nil {
		prod.Close()
		return nil, err
	}
	produced := make(chan struct{})
	g.wg.Go(func() { defer close(produced); defer prod.Close(); g.produce(ctx, prod) })
	cctx, cancel := context.WithCancel(ctx)
	g.wg.Go(func() { defer cons.Close(); g.consume(cctx, cons) })
	go func() { <-produced; g.waitCaughtUp(); cancel() }()
	return g, nil
}

func (g *wellBehaved) produce(ctx context.Context, c *client.Client) {
	for seq := int64(0); ; seq++ {
		select {
		case <-g.stop:
			return
		default:
		}
		sent := time.Now()
		base, err := c.Produce(ctx, goodTopic, goodMessage(seq, sent))
		if err == nil && base != seq {
			err = fmt.Errorf("acknowledged at offset %d, want %d", base, seq)
		}
		if err != nil {
			g.errs <- fmt.Errorf("well-behaved producer, message %d: %w", seq, err)
			return
		}
		w := g.window.Load()
		w.record(w.produce, time.Since(sent))
		g.acked.Store(seq + 1)
	}
}

func (g *wellBehaved) consume(ctx context.Context, c *client.Client) {
	want := int64(0)
	for m, err := range c.Messages(ctx, goodTopic, 0) {
		if err != nil {
			g.errs <- fmt.Errorf("well-behaved consumer at %d: %w", want, err)
			return
		}
		if m.Offset != want || string(m.Value[8:]) != string(goodMessage(want, time.Time{})[8:]) {
			g.errs <- fmt.Errorf("well-behaved consumer: offset %d (want %d) holds other bytes", m.Offset, want)
			return
		}
		sent := time.Unix(0, int64(binary.LittleEndian.Uint64(m.Value)))
		w := g.window.Load()
		w.record(w.e2e, time.Since(sent))
		want++
		g.consumed.Store(want)
	}
}

// waitCaughtUp waits, at most 10 s, for the consumer to read everything
// acknowledged.
func (g *wellBehaved) waitCaughtUp() {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if g.consumed.Load() >= g.acked.Load() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// halt stops both clients and returns their first failure.
func (g *wellBehaved) halt() error {
	close(g.stop)
	g.wg.Wait()
	close(g.errs)
	for err := range g.errs {
		return err
	}
	if c, a := g.consumed.Load(), g.acked.Load(); c < a {
		return fmt.Errorf("well-behaved consumer read %d of %d acknowledged messages", c, a)
	}
	return nil
}
