package bench

import (
	"crypto/tls"
	"fmt"
	"os"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// Mode is what a run measures.
type Mode string

// Modes.
const (
	// ModeProduce times producers: latency is each request's round trip.
	ModeProduce Mode = "produce"
	// ModeConsume fills the topics first (untimed), then times consumers
	// reading all of it once: latency is each consume request's round trip.
	ModeConsume Mode = "consume"
	// ModeBoth runs producers and consumers at once: latency is end to end,
	// from the send time in each message's header to its arrival at a
	// consumer, and every message is checked for gaps, duplicates and
	// corruption.
	ModeBoth Mode = "both"
)

// Single says how -batch 1 sends its messages.
type Single string

// Ways to send single messages.
const (
	// SingleProduce calls Client.Produce with one message and waits for its
	// acknowledgement before the next: the latency of one message.
	SingleProduce Single = "produce"
	// SingleProducer sends each message through a batching client.Producer
	// and collects the futures without waiting for each.
	SingleProducer Single = "producer"
)

// Config is one run. Start from DefaultConfig.
type Config struct {
	// Addr is the server's binary protocol address (default
	// "127.0.0.1:14353"), unused with Embedded; a comma-separated list of
	// servers spreads the topics over them (client.Dial), so a run with
	// Topics >= the servers loads them all and measures their aggregate.
	Addr string
	// Token is presented to a server started with -auth-file
	// (client.WithToken; default "": none). It needs the admin right on
	// the benchmark's topics, which are created and deleted.
	Token string
	// HTTPAddr is the server's HTTP port (host:port), read for the
	// zero-copy share from /metrics when not Embedded (default "": unknown).
	HTTPAddr string
	// Embedded starts an in-process server on fresh temporary volumes,
	// removed afterwards (default false).
	Embedded bool
	// Volumes is the embedded server's number of volumes (default 1).
	Volumes int
	// Fsync is the embedded server's fsync policy: never, interval or always
	// (default never).
	Fsync string
	// Entries is the embedded server's messages per segment (default 5000,
	// the server's default).
	Entries int
	// Ballast is a GC ballast in bytes, as the haraqa binary's -ballast,
	// for the embedded server (default 0). The process is client and
	// server at once, so a ballast also defers the client's collections:
	// everything allocated before the first one is fresh memory, which on
	// a VM costs 12-15 us per 4 KiB page on first touch. 1 GiB cut a
	// 1 KiB x 1000 produce run from 290 to 80 MB/s here.
	Ballast int64
	// TLS, when set, is the client's TLS configuration (haraqa-bench's
	// -tls flags). With Embedded, the embedded server then speaks TLS on
	// its port with a self-signed certificate made in memory, which a
	// copy of TLS trusts as its only root. Default nil: plaintext.
	TLS *tls.Config
	// Dir is where the temporary volumes and the ceiling's files go
	// (default os.TempDir()).
	Dir string

	// Mode is produce, consume or both (default produce).
	Mode Mode
	// Topics, Producers and Consumers count topics and concurrent
	// goroutines (default 1 each). Producer i writes topic i mod Topics.
	// In consume mode each topic's offsets are split among the consumers
	// that read it; in both mode consumer j follows topic j mod Topics from
	// its start, so every topic needs a consumer.
	Topics, Producers, Consumers int
	// Size is the message size in bytes, header included (default 1024,
	// at least HeaderSize).
	Size int
	// Batch is the number of messages per produce request (default 100).
	Batch int
	// Single is how a Batch of 1 is sent (default SingleProduce).
	Single Single
	// Linger is the Producer's linger time with Single SingleProducer
	// (client.WithLinger; default 5 ms, the client's): 0 sends each message
	// at once while fewer batches than the Producer's in-flight bound are
	// unanswered.
	Linger time.Duration
	// MaxInFlight is the Producer's bound on unanswered batches with
	// Single SingleProducer (client.WithMaxInFlight; default 4, the
	// client's).
	MaxInFlight int
	// Messages is the total number of messages to produce, split among the
	// producers; Duration is how long to produce instead. Exactly one is
	// non-zero (DefaultConfig: 5 seconds).
	Messages int64
	Duration time.Duration
	// Compress is the client's batch compression: none, s2 or zstd
	// (default none).
	Compress string
	// Idempotent is the clients' idempotent produce
	// (client.WithIdempotence; default true, as the client's).
	Idempotent bool
	// AcksLeader answers produces to replicated topics once the leader
	// has them (client.WithAcks(client.AcksLeader)); default false: once
	// every in-sync replica has them, as the client's default.
	AcksLeader bool
	// Warmup is the length of an untimed run of the same workload, on topics
	// of its own deleted afterwards, before the timed one (default 1s).
	Warmup time.Duration
	// Rate, when positive, paces the producers at this many messages per
	// second in all (open model): latency is measured from each message's
	// intended send time, so a stalled server shows in the percentiles.
	Rate float64
	// Ceiling also measures the plainest way to move the same bytes on this
	// machine, in the same run, and the ratio to it.
	Ceiling bool
	// SharedClient makes every producer and consumer use one client (one
	// pipelined connection) instead of a client each.
	SharedClient bool
	// Keep keeps the topics on an external server after the run (default:
	// they are deleted).
	Keep bool
	// TopicPrefix names the topics: PREFIX-0, PREFIX-1, ..., and
	// PREFIX-warm-0, ... for the warm-up (default "": "bench-" and a
	// base-36 time stamp, so every run has fresh topics).
	TopicPrefix string
}

// HeaderSize is the size of the header at the start of every message; see
// the package documentation for its layout. It is the smallest Size.
const HeaderSize = headerSize

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Addr:        "127.0.0.1:14353",
		Volumes:     1,
		Fsync:       "never",
		Entries:     5000,
		Dir:         os.TempDir(),
		Mode:        ModeProduce,
		Topics:      1,
		Producers:   1,
		Consumers:   1,
		Size:        1024,
		Batch:       100,
		Single:      SingleProduce,
		Linger:      5 * time.Millisecond,
		MaxInFlight: 4,
		Duration:    5 * time.Second,
		Compress:    "none",
		Idempotent:  true,
		Warmup:      time.Second,
	}
}

// maxGoroutines bounds producers and consumers: far past what the machine
// can use, small enough that a typo does not exhaust memory.
const maxGoroutines = 10000

// Validate checks the configuration; its errors wrap ErrUsage.
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, args...)...)
	}
	switch c.Mode {
	case ModeProduce, ModeConsume, ModeBoth:
	default:
		return bad("mode %q: want produce, consume or both", c.Mode)
	}
	switch {
	case c.Size < HeaderSize:
		return bad("size %d: the smallest message is %d bytes (its header)", c.Size, HeaderSize)
	case c.Batch < 1:
		return bad("batch %d: want at least 1", c.Batch)
	case c.Topics < 1 || c.Topics > maxGoroutines:
		return bad("topics %d: want 1 to %d", c.Topics, maxGoroutines)
	case c.Producers < 1 || c.Producers > maxGoroutines:
		return bad("producers %d: want 1 to %d", c.Producers, maxGoroutines)
	case c.Mode != ModeProduce && (c.Consumers < 1 || c.Consumers > maxGoroutines):
		return bad("consumers %d: want 1 to %d", c.Consumers, maxGoroutines)
	case c.Mode == ModeBoth && c.Consumers < c.Topics:
		return bad("both mode follows each topic with its own consumer: want -consumers >= -topics (%d < %d)", c.Consumers, c.Topics)
	case c.Messages < 0 || c.Duration < 0:
		return bad("messages and duration must not be negative")
	case c.Messages > 0 && c.Duration > 0:
		return bad("give -messages or -duration, not both")
	case c.Messages == 0 && c.Duration == 0:
		return bad("give -messages or -duration")
	case c.Warmup < 0:
		return bad("warmup %s must not be negative", c.Warmup)
	case c.Linger < 0:
		return bad("linger %v: want 0 or more", c.Linger)
	case c.MaxInFlight < 1:
		return bad("max in flight %d: want 1 or more", c.MaxInFlight)
	case c.Rate < 0:
		return bad("rate %g must not be negative", c.Rate)
	case c.Rate > 0 && c.Mode == ModeConsume:
		return bad("-rate paces producers: it does not apply to consume mode, whose fill is untimed")
	case c.Single != SingleProduce && c.Single != SingleProducer:
		return bad("single %q: want produce or producer", c.Single)
	case c.Single == SingleProducer && c.Batch != 1:
		return bad("-single producer applies to -batch 1 only")
	case c.Volumes < 1 || c.Volumes > 64:
		return bad("volumes %d: want 1 to 64", c.Volumes)
	case c.Entries < 1:
		return bad("entries %d: want at least 1", c.Entries)
	case c.Ballast < 0:
		return bad("ballast must not be negative")
	case !c.Embedded && c.Addr == "":
		return bad("give -addr or -embedded")
	}
	if _, err := codecOf(c.Compress); err != nil {
		return err
	}
	switch c.Fsync {
	case "never", "interval", "always":
	default:
		return bad("fsync %q: want always, interval or never", c.Fsync)
	}
	// One request must fit the server's default frame limit.
	if req := int64(c.Batch)*int64(c.Size+10) + protocol.BatchHeaderSize + 1024; req > protocol.DefaultMaxFrameSize-1024 {
		return bad("a batch of %d messages of %d bytes is larger than the %d MiB frame limit",
			c.Batch, c.Size, protocol.DefaultMaxFrameSize>>20)
	}
	if c.Dir == "" {
		c.Dir = os.TempDir()
	}
	return nil
}

// codecOf parses a -compress value.
func codecOf(s string) (protocol.Codec, error) {
	switch s {
	case "none", "":
		return protocol.CodecNone, nil
	case "s2":
		return protocol.CodecS2, nil
	case "zstd":
		return protocol.CodecZstd, nil
	}
	return 0, fmt.Errorf("%w: compress %q: want none, s2 or zstd", ErrUsage, s)
}

// singleSend reports whether each message is its own request, answered
// before the next: the case the ping-pong ceiling measures.
func (c *Config) singleSend() bool { return c.Batch == 1 && c.Single == SingleProduce }
