// Package bench is the load generator behind cmd/haraqa-bench. It talks to
// a server only through the client package, as any user would; the one
// exception is the embedded server (Config.Embedded), which it starts
// from the storage and broker packages on fresh temporary volumes and
// removes afterwards, so one command measures end to end on a fresh
// machine.
//
// # A run
//
// A run has up to three phases: an untimed warm-up of the same workload on
// topics of its own, deleted afterwards (Config.Warmup; it warms both heaps
// and hands the timed phase recycled page-cache pages, as a server that
// has been running for a while has; an embedded server's removal of the
// deleted files is waited for, as the ceiling removes its warm-up files
// before timing); for consume mode an untimed fill of
// the topics; and the timed phase:
//
//   - produce: Producers goroutines each send requests of Batch messages
//     with Client.Produce and wait for each acknowledgement; latency is per
//     request. With Batch 1 and SingleProducer, single messages go through
//     a batching client.Producer instead, latency per message from Send to
//     its acknowledgement.
//   - consume: Consumers goroutines read everything the fill wrote, once,
//     each topic's offsets split among its consumers, each range read with
//     a client.Reader (the next response is requested while the current one
//     is checked); latency is per Next, one response.
//     Messages are checked for size and sequence (the client checks each
//     batch's CRC).
//   - both: producers as in produce mode while consumers follow the topics
//     from offset 0 (a client.Reader, long polls at the end); latency is end to end,
//     from the send time in each message's header to its arrival, and every
//     message's checksum is verified.
//
// With Rate, producers follow a schedule (open model, as OpenMessaging
// Benchmark does) and latency counts from each request's intended send
// time, so a server that stalls shows in the percentiles instead of
// slowing the senders down and hiding (coordinated omission). The last
// 2 ms of each wait are slept with nanosleep(2) without timer slack
// (sleepUntil): Go's timers wake in whole milliseconds of epoll_wait, which
// would send a fast schedule in bursts and make the pacer's lateness most
// of the latency measured. Latencies go into HDR histograms, 1 us to 60 s,
// 3 significant digits.
//
// # Messages
//
// Every message starts with a 24-byte header, little-endian, followed by
// filler (pseudo-random lowercase text from a fixed seed):
//
//	0        4                12               20       24
//	+--------+----------------+----------------+--------+------------ - -
//	|producer| sequence       | send time      | check  | filler ...
//	| uint32 | uint64         | int64, Unix ns | uint32 |
//	+--------+----------------+----------------+--------+------------ - -
//
// The producer id is unique within a run and sequence numbers count from
// 0 per producer, so a consumer can tell, per producer, a gap (a number
// never read), a duplicate (one read twice) and corruption (check is not
// CRC32C(bytes 0-19) XOR CRC32C(bytes 24-end)). Without compression the
// filler is the same in every message, its CRC computed once, so a
// producer writes 24 bytes per message; with compression it differs per
// message, or batches would compress unrealistically well.
//
// # Ceilings
//
// With Config.Ceiling the run also measures, in the same process and
// right after the timed phase, the plainest way to move the same bytes on
// this machine (CeilingAppend, CeilingSendfile, CeilingPingPong), and
// reports the ratio. On a noisy, shared machine absolute figures swing
// from run to run; the ratio to a ceiling measured moments apart does
// much less. Both mode is judged against the append ceiling of its
// producers.
//
// # Output
//
// Result is printed as a table or, with -json, as one object with at
// least mode, size, batch, messages, bytes, seconds, msgs_per_sec,
// mb_per_sec, latency_us (p50, p90, p99, p999, max), errors, and with a
// ceiling ceiling_mb_per_sec and ratio_to_ceiling (haraqa MB/s / ceiling
// MB/s); for the ping-pong ceiling also ceiling_latency_us and
// latency_ratio (haraqa p50 / ping-pong p50). MB is 10^6 bytes of
// payload (messages x size). WriteReport draws the same as a
// self-contained HTML page; RunMatrix runs the standard matrix and
// Matrix.Markdown renders its medians for docs/benchmarks.md.
package bench
