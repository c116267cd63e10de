package bench

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/broker/httpapi"
	"github.com/haraqa/haraqa/client"
)

func testConfig(mode Mode) Config {
	c := DefaultConfig()
	c.Embedded = true
	c.Dir = ""
	c.Mode = mode
	c.Size = 128
	c.Batch = 50
	c.Messages = 3000
	c.Duration = 0
	c.Warmup = 50 * time.Millisecond
	return c
}

func runOK(t *testing.T, cfg Config) *Result {
	t.Helper()
	cfg.Dir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := Run(ctx, cfg, UI{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() {
		t.Fatalf("run not OK: %+v", res)
	}
	return res
}

func TestRunProduce(t *testing.T) {
	cfg := testConfig(ModeProduce)
	cfg.Producers, cfg.Topics = 3, 2
	res := runOK(t, cfg)
	if res.Messages != 3000 || res.Bytes != 3000*128 || res.Seconds <= 0 || res.MsgsPerSec <= 0 {
		t.Fatalf("%+v", res)
	}
	if res.Latency.P50 <= 0 || res.Latency.Max < res.Latency.P99 || res.LatencyKind != "request" {
		t.Fatalf("latency %+v %s", res.Latency, res.LatencyKind)
	}
	if res.hist.TotalCount() != 3000/50 {
		t.Fatalf("%d requests timed, want 60", res.hist.TotalCount())
	}
}

func TestRunConsume(t *testing.T) {
	cfg := testConfig(ModeConsume)
	cfg.Consumers, cfg.Producers = 3, 2
	cfg.Ceiling = true
	res := runOK(t, cfg)
	if res.Messages != 3000 || res.Received != 3000 {
		t.Fatalf("read %d (%d checked) of 3000", res.Messages, res.Received)
	}
	if res.ZeroCopyShare == nil || res.CeilingKind != CeilingSendfile || res.RatioToCeiling == nil || *res.RatioToCeiling <= 0 {
		t.Fatalf("%+v", res)
	}
	// Single-message batches are filled by many pipelined producers; the
	// reading still finds each producer's messages in order.
	cfg.Batch, cfg.Messages, cfg.Ceiling = 1, 500, false
	if res := runOK(t, cfg); res.Received != 500 {
		t.Fatalf("read %d of 500", res.Received)
	}
}

func TestRunBoth(t *testing.T) {
	cfg := testConfig(ModeBoth)
	cfg.Producers, cfg.Consumers, cfg.Topics = 2, 3, 2 // topic 0 has two followers
	cfg.Ceiling = true
	res := runOK(t, cfg)
	// Topic 0 holds 1500 messages and is read twice, topic 1 once.
	if res.Messages != 3000 || res.Received != 4500 {
		t.Fatalf("produced %d, received %d", res.Messages, res.Received)
	}
	if res.LatencyKind != "end_to_end" || res.hist.TotalCount() != 4500 || res.CeilingKind != CeilingAppend {
		t.Fatalf("%+v", res)
	}
}

func TestRunSingleMessages(t *testing.T) {
	cfg := testConfig(ModeProduce)
	cfg.Batch, cfg.Messages = 1, 300
	cfg.Ceiling = true
	res := runOK(t, cfg)
	if res.CeilingKind != CeilingPingPong || res.CeilingLatency == nil || res.LatencyRatio == nil {
		t.Fatalf("%+v", res)
	}

	cfg.Single = SingleProducer
	cfg.Compress = "s2"
	cfg.SharedClient = true
	res = runOK(t, cfg)
	if res.Messages != 300 || res.LatencyKind != "message" || res.hist.TotalCount() != 300 {
		t.Fatalf("%+v", res)
	}
}

func TestRunDurationAndRate(t *testing.T) {
	cfg := testConfig(ModeBoth)
	cfg.Messages, cfg.Duration = 0, 300*time.Millisecond
	cfg.Rate, cfg.Batch = 2000, 10
	cfg.Compress = "zstd"
	res := runOK(t, cfg)
	// The schedule bounds the count (rate x the timed phase, plus a batch
	// in flight for each producer), not the server; how near a loaded
	// machine comes to it is for benchmarks to say.
	bound := cfg.Rate*res.Seconds + float64(cfg.Batch*cfg.Producers)
	if res.Messages == 0 || float64(res.Messages) > bound || res.Seconds < cfg.Duration.Seconds() {
		t.Fatalf("%d messages in %.3f s at 2000/s for 300ms, at most %.0f on the schedule", res.Messages, res.Seconds, bound)
	}
}

// Paced requests are due on the schedule whether or not the sender kept
// up, so a late request's latency includes its lateness.
func TestScheduleIgnoresLateness(t *testing.T) {
	var stop atomic.Bool
	start := time.Now().Add(-100 * time.Millisecond)
	w := producerWork{st: &producerStats{}, stop: &stop, rate: 1000, start: start}
	n, due := w.next(context.Background(), 10, 5)
	if n != 10 || !due.Equal(start.Add(50*time.Millisecond)) {
		t.Fatalf("request 5: %d messages due %v after start, want 10 at 50ms", n, due.Sub(start))
	}
	n, due = w.next(context.Background(), 10, 11) // due 10ms from now: waits
	if n != 10 || time.Now().Before(due) {
		t.Fatalf("request 11 returned before its time")
	}
	stop.Store(true)
	if n, _ := w.next(context.Background(), 10, 12); n != 0 {
		t.Fatal("a stopped producer goes on")
	}
}

// A consumer that reads a message twice, a message never sent, or a
// corrupt one fails the run. The topics are prepared on a real server
// before the run starts.
func TestRunDetectsBadTopics(t *testing.T) {
	srv := brokertest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pay := newPayload(128, false)
	dup := pay.newMessage()
	pay.stamp(dup, 0, 0, time.Now().UnixNano()) // what producer 0 sends first
	bad := pay.newMessage()
	pay.stamp(bad, 0, 1, time.Now().UnixNano())
	bad[100] ^= 1
	for _, tc := range []struct {
		prefix string
		mode   Mode
		msg    []byte
		check  func(*Result) bool
	}{
		{"dup", ModeBoth, dup, func(r *Result) bool { return r.Duplicates == 1 && r.Corrupt == 0 }},
		{"bad", ModeBoth, bad, func(r *Result) bool { return r.Corrupt == 1 && r.Duplicates == 0 }},
		{"cdup", ModeConsume, dup, func(r *Result) bool { return r.Duplicates == 1 }},
	} {
		if _, err := c.Produce(ctx, tc.prefix+"-0", tc.msg); err != nil {
			t.Fatal(err)
		}
		cfg := testConfig(tc.mode)
		cfg.Embedded, cfg.Addr, cfg.TopicPrefix = false, srv.Addr, tc.prefix
		cfg.Warmup, cfg.Messages = 0, 200
		cfg.Dir = t.TempDir()
		res, err := Run(ctx, cfg, UI{})
		if err != nil {
			t.Fatal(err)
		}
		if res.OK() || !tc.check(res) {
			t.Errorf("%s: %+v", tc.prefix, res)
		}
		// The run deleted its topics from the external server.
		if _, err := c.TopicInfo(ctx, tc.prefix+"-0"); !errors.Is(err, client.ErrTopicNotFound) {
			t.Errorf("%s: topic left behind: %v", tc.prefix, err)
		}
	}
}

func TestRunUnreachable(t *testing.T) {
	cfg := testConfig(ModeProduce)
	cfg.Embedded, cfg.Addr = false, "127.0.0.1:1"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := Run(ctx, cfg, UI{}); err == nil || errors.Is(err, ErrUsage) {
		t.Fatalf("err %v, want a connection error", err)
	}
	cfg.Size = 3
	if _, err := Run(ctx, cfg, UI{}); !errors.Is(err, ErrUsage) {
		t.Fatalf("err %v, want ErrUsage", err)
	}
}

// Against an external server, the zero-copy share comes from its HTTP
// port's metrics.
func TestRunScrapesZeroCopy(t *testing.T) {
	srv := brokertest.Start(t, 1)
	api := httpapi.New(httpapi.Config{Prometheus: true})
	api.Ready(srv.Broker)
	hs := httptest.NewServer(api)
	defer hs.Close()
	cfg := testConfig(ModeConsume)
	cfg.Embedded, cfg.Addr, cfg.HTTPAddr = false, srv.Addr, strings.TrimPrefix(hs.URL, "http://")
	cfg.Warmup = 0
	res := runOK(t, cfg)
	if res.ZeroCopyShare == nil || *res.ZeroCopyShare < 0 || *res.ZeroCopyShare > 1 {
		t.Fatalf("zero-copy share %v", res.ZeroCopyShare)
	}
}
