// Command natslat measures what haraqa-bench -mode both measures for
// haraqa, on NATS JetStream: the end-to-end latency of a followed stream
// (publish to a push consumer's handler), open model, at a fixed rate.
// Each message carries its intended send time; latency counts from then,
// so a publisher that falls behind shows in the figures.
//
//	go run . -url nats://127.0.0.1:4333 -rate 10000 -size 1024 -duration 5s
//
// It is a module of its own so that the NATS client is no dependency of
// haraqa's.
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go"
)

func main() {
	url := flag.String("url", "nats://127.0.0.1:4333", "NATS server")
	rate := flag.Float64("rate", 10000, "messages per second")
	size := flag.Int("size", 1024, "message size in bytes, at least 16")
	duration := flag.Duration("duration", 5*time.Second, "timed phase")
	warmup := flag.Duration("warmup", time.Second, "untimed phase before it")
	flag.Parse()
	if err := run(*url, *rate, *size, *duration, *warmup); err != nil {
		fmt.Fprintln(os.Stderr, "natslat:", err)
		os.Exit(1)
	}
}

func run(url string, rate float64, size int, duration, warmup time.Duration) error {
	if size < 16 || rate <= 0 {
		return fmt.Errorf("want -size >= 16 and -rate > 0")
	}
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := nc.JetStream(nats.PublishAsyncMaxPending(4096))
	if err != nil {
		return err
	}
	const stream, subject = "natslat", "natslat.m"
	_ = js.DeleteStream(stream)
	if _, err := js.AddStream(&nats.StreamConfig{Name: stream, Subjects: []string{subject}, Storage: nats.FileStorage}); err != nil {
		return err
	}
	defer js.DeleteStream(stream)

	var mu sync.Mutex
	hist := hdrhistogram.New(1, 60_000_000, 3) // microseconds
	var received, timed int64
	start := time.Now()
	timedFrom := start.Add(warmup).UnixNano()
	sub, err := js.Subscribe(subject, func(m *nats.Msg) {
		sent := int64(binary.LittleEndian.Uint64(m.Data))
		lat := time.Now().UnixNano() - sent
		mu.Lock()
		received++
		if sent >= timedFrom {
			timed++
			_ = hist.RecordValue(max(lat/1000, 1))
		}
		mu.Unlock()
	}, nats.DeliverNew(), nats.AckNone())
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()

	msg := make([]byte, size)
	total := int64(rate * (warmup + duration).Seconds())
	for k := int64(0); k < total; k++ {
		due := start.Add(time.Duration(float64(k) / rate * float64(time.Second)))
		sleepUntil(due)
		binary.LittleEndian.PutUint64(msg, uint64(due.UnixNano()))
		if _, err := js.PublishAsync(subject, msg); err != nil {
			return err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		return fmt.Errorf("publishes not acknowledged in 30 s")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := received
		mu.Unlock()
		if n >= total || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	out := map[string]any{
		"system": "nats-jetstream", "rate": rate, "size": size, "sent": total, "received": received, "timed": timed,
		"latency_us": map[string]int64{
			"p50": hist.ValueAtQuantile(50), "p90": hist.ValueAtQuantile(90), "p99": hist.ValueAtQuantile(99),
			"p999": hist.ValueAtQuantile(99.9), "max": hist.Max(),
		},
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}
