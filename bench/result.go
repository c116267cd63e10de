package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Result is a run's outcome; its JSON form is the -json output. Rates use
// payload bytes (messages x size) and MB = 10^6 bytes.
type Result struct {
	Mode          Mode    `json:"mode"`
	Size          int     `json:"size"`
	Batch         int     `json:"batch"`
	Single        Single  `json:"single,omitempty"` // how -batch 1 was sent
	Producers     int     `json:"producers"`
	Consumers     int     `json:"consumers"`
	Topics        int     `json:"topics"`
	Volumes       int     `json:"volumes,omitempty"` // embedded only
	Fsync         string  `json:"fsync,omitempty"`   // embedded only
	Compress      string  `json:"compress"`
	NotIdempotent bool    `json:"not_idempotent,omitempty"` // produced with client.WithIdempotence(false)
	AcksLeader    bool    `json:"acks_leader,omitempty"`    // produced with client.WithAcks(client.AcksLeader)
	TLS           bool    `json:"tls,omitempty"`            // the client spoke TLS
	Rate          float64 `json:"rate"`                     // messages/s asked for, 0: as fast as possible
	Warmup        float64 `json:"warmup_seconds"`           // untimed phase before

	Messages   int64   `json:"messages"` // produced (produce, both) or read (consume) in the timed phase
	Bytes      int64   `json:"bytes"`    // Messages x Size
	Seconds    float64 `json:"seconds"`
	MsgsPerSec float64 `json:"msgs_per_sec"`
	MBPerSec   float64 `json:"mb_per_sec"`
	// Latency is per request (produce, consume; per message for -single
	// producer) or end to end per message (both), from the intended send
	// time with -rate.
	Latency     Latency `json:"latency_us"`
	LatencyKind string  `json:"latency_kind"`
	Errors      int64   `json:"errors"` // failed requests
	FirstError  string  `json:"first_error,omitempty"`
	// Received, Gaps, Duplicates and Corrupt are what the consumers found
	// (consume, both); see Tally.
	Received   int64 `json:"received"`
	Gaps       int64 `json:"gaps"`
	Duplicates int64 `json:"duplicates"`
	Corrupt    int64 `json:"corrupt"`
	// Fsyncs counts the embedded server's segment fsyncs in the timed
	// phase (with -fsync always: Messages / Fsyncs is the group-commit
	// size), FsyncLatency their durations; absent when none.
	Fsyncs       int64    `json:"fsyncs,omitempty"`
	FsyncLatency *Latency `json:"fsync_us,omitempty"`
	// ZeroCopyShare is the share of consumed bytes the server sent with
	// sendfile(2) during the timed phase; null when unknown.
	ZeroCopyShare *float64 `json:"zero_copy_share"`

	// With Ceiling: the baseline's kind (CeilingAppend, CeilingSendfile,
	// CeilingPingPong), its rate in payload-equivalent MB/s (the run's
	// Bytes over the baseline's time), and MBPerSec / CeilingMBPerSec.
	CeilingKind     string   `json:"ceiling_kind,omitempty"`
	CeilingMBPerSec *float64 `json:"ceiling_mb_per_sec,omitempty"`
	CeilingSeconds  *float64 `json:"ceiling_seconds,omitempty"`
	RatioToCeiling  *float64 `json:"ratio_to_ceiling,omitempty"`
	// CeilingStarved is RatioToCeiling above 1: haraqa cannot move the
	// bytes faster than the plainest way to move them, so the ceiling run
	// got less of the machine than haraqa's (other load), and the ratio
	// does not measure haraqa against it.
	CeilingStarved bool `json:"ceiling_starved,omitempty"`
	// The ceiling's percentiles per request (append) or round trip
	// (ping-pong); with the ping-pong, also Latency.P50 / CeilingLatency.P50.
	CeilingLatency *Latency `json:"ceiling_latency_us,omitempty"`
	LatencyRatio   *float64 `json:"latency_ratio,omitempty"`

	WarmupBytes int64    `json:"-"`
	Series      []Sample `json:"-"` // throughput samples of the timed phase
	hist        *hdrhistogram.Histogram
	ceilHist    *hdrhistogram.Histogram
}

// OK reports whether every request succeeded and the consumers read every
// message exactly once, intact.
func (r *Result) OK() bool {
	return r.Errors == 0 && r.Gaps == 0 && r.Duplicates == 0 && r.Corrupt == 0
}

func (r *runner) newResult() *Result {
	c := r.cfg
	res := &Result{
		Mode: c.Mode, Size: c.Size, Batch: c.Batch, Producers: c.Producers, Topics: c.Topics,
		Compress: c.Compress, Rate: c.Rate, Warmup: c.Warmup.Seconds(),
	}
	if c.Compress == "" {
		res.Compress = "none"
	}
	res.TLS = c.TLS != nil
	res.NotIdempotent = !c.Idempotent
	res.AcksLeader = c.AcksLeader
	if c.Mode != ModeProduce {
		res.Consumers = c.Consumers
	}
	if c.Batch == 1 {
		res.Single = c.Single
	}
	if c.Embedded {
		res.Volumes, res.Fsync = c.Volumes, c.Fsync
	}
	return res
}

func (res *Result) setRate(messages int64, secs float64) {
	res.Messages = messages
	res.Bytes = messages * int64(res.Size)
	res.Seconds = secs
	if secs > 0 {
		res.MsgsPerSec = float64(messages) / secs
		res.MBPerSec = float64(res.Bytes) / 1e6 / secs
	}
}

func (res *Result) setHist(h *hdrhistogram.Histogram, kind string) {
	res.hist = h
	res.Latency = latencyOf(h)
	res.LatencyKind = kind
}

func (res *Result) setTally(t Tally) {
	res.Received, res.Gaps, res.Duplicates, res.Corrupt = t.Received, t.Gaps, t.Duplicates, t.Corrupt
}

func (res *Result) fromProduce(p produceResult) {
	res.setRate(p.acked(), p.end.Sub(p.start).Seconds())
	hs := make([]*hdrhistogram.Histogram, len(p.producers))
	for i, s := range p.producers {
		hs[i] = s.hist
	}
	kind := "request"
	if res.Batch == 1 && res.Single == SingleProducer {
		kind = "message"
	}
	res.setHist(mergeHists(hs...), kind)
}

// fromConsume: the consumers together read each topic once.
func (res *Result) fromConsume(c consumeResult, fill produceResult) {
	var n int64
	hs := make([]*hdrhistogram.Histogram, len(c.consumers))
	byTopic := make(map[int][]*checker)
	for i, s := range c.consumers {
		n += s.received
		hs[i] = s.hist
		for t, chk := range s.checkers {
			byTopic[t] = append(byTopic[t], chk)
		}
	}
	res.setRate(n, c.end.Sub(c.start).Seconds())
	res.setHist(mergeHists(hs...), "request")
	var t Tally
	for topic, sent := range fill.sentByTopic() {
		t.merge(tally(sent, byTopic[topic]...))
	}
	res.setTally(t)
}

// fromBoth: each consumer reads its topic once on its own.
func (res *Result) fromBoth(p produceResult, c consumeResult) {
	res.setRate(p.acked(), c.end.Sub(p.start).Seconds())
	hs := make([]*hdrhistogram.Histogram, len(c.consumers))
	sent := p.sentByTopic()
	var t Tally
	for i, s := range c.consumers {
		hs[i] = s.hist
		for topic, chk := range s.checkers {
			t.merge(tally(sent[topic], chk))
		}
	}
	res.setHist(mergeHists(hs...), "end_to_end")
	res.setTally(t)
}

// StarvedNote is what the table says under a ratio above 1.
const StarvedNote = "STARVED CEILING: a ratio above 1 means the ceiling run got less of the machine than haraqa's " +
	"(other load while it ran), not that haraqa beat it; run again on a quieter machine"

func (res *Result) setCeiling(c ceilingResult) {
	res.CeilingKind = c.kind
	secs := c.seconds
	res.CeilingSeconds = &secs
	if secs <= 0 {
		return
	}
	mbps := float64(res.Bytes) / 1e6 / secs
	ratio := res.MBPerSec / mbps
	res.CeilingMBPerSec, res.RatioToCeiling = &mbps, &ratio
	res.CeilingStarved = ratio > 1
	if c.hist != nil {
		l := latencyOf(c.hist)
		res.CeilingLatency = &l
	}
	if c.kind == CeilingPingPong {
		if l := res.CeilingLatency; l.P50 > 0 {
			lr := res.Latency.P50 / l.P50
			res.LatencyRatio = &lr
		}
	}
	res.ceilHist = c.hist
}

// WriteJSON writes the result as one JSON object and a newline.
func (res *Result) WriteJSON(w io.Writer) error {
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteTable writes the result as a table for people.
func (res *Result) WriteTable(w io.Writer) error {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s: %d B messages, batch %d%s, %d producer(s)", res.Mode, res.Size, res.Batch, singleNote(res), res.Producers)
	if res.Consumers > 0 {
		fmt.Fprintf(&sb, ", %d consumer(s)", res.Consumers)
	}
	fmt.Fprintf(&sb, ", %d topic(s)", res.Topics)
	if res.Volumes > 0 {
		fmt.Fprintf(&sb, ", embedded server on %d volume(s), fsync %s", res.Volumes, res.Fsync)
	}
	if res.Compress != "none" {
		fmt.Fprintf(&sb, ", %s", res.Compress)
	}
	if res.TLS {
		sb.WriteString(", TLS")
	}
	if res.NotIdempotent {
		sb.WriteString(", not idempotent")
	}
	if res.AcksLeader {
		sb.WriteString(", acks=leader")
	}
	if res.Rate > 0 {
		fmt.Fprintf(&sb, ", paced at %.0f msgs/s", res.Rate)
	}
	fmt.Fprintf(&sb, "\nlatency: %s, in microseconds\n\n", latencyNote(res.LatencyKind))

	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tmessages\tbytes\tseconds\tmsgs/s\tMB/s\tp50\tp90\tp99\tp99.9\tmax\terrors\t")
	l := res.Latency
	fmt.Fprintf(tw, "haraqa\t%d\t%d\t%.3f\t%.0f\t%.1f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%d\t\n",
		res.Messages, res.Bytes, res.Seconds, res.MsgsPerSec, res.MBPerSec, l.P50, l.P90, l.P99, l.P999, l.Max, res.Errors)
	if res.CeilingMBPerSec != nil {
		cl := Latency{}
		if res.CeilingLatency != nil {
			cl = *res.CeilingLatency
		}
		fmt.Fprintf(tw, "ceiling (%s)\t%d\t%d\t%.3f\t%.0f\t%.1f\t%s\t%s\t%s\t%s\t%s\t-\t\n",
			res.CeilingKind, res.Messages, res.Bytes, *res.CeilingSeconds, float64(res.Messages) / *res.CeilingSeconds,
			*res.CeilingMBPerSec, orDash(cl.P50), orDash(cl.P90), orDash(cl.P99), orDash(cl.P999), orDash(cl.Max))
	}
	tw.Flush()
	sb.WriteString("\n")
	if res.RatioToCeiling != nil {
		fmt.Fprintf(&sb, "ratio to ceiling: %.2f (MB/s)", *res.RatioToCeiling)
		if res.LatencyRatio != nil {
			fmt.Fprintf(&sb, ", p50 latency %.2fx the ping-pong's", *res.LatencyRatio)
		}
		sb.WriteString("\n")
		if res.CeilingStarved {
			sb.WriteString(StarvedNote + "\n")
		}
	}
	if res.Mode != ModeProduce {
		fmt.Fprintf(&sb, "consumers read %d messages: %d missing, %d duplicated, %d corrupt\n",
			res.Received, res.Gaps, res.Duplicates, res.Corrupt)
	}
	if res.ZeroCopyShare != nil {
		fmt.Fprintf(&sb, "zero-copy share of consumed bytes: %.1f%%\n", 100**res.ZeroCopyShare)
	} else if res.Mode != ModeProduce {
		sb.WriteString("zero-copy share of consumed bytes: unknown (give -http-addr, or use -embedded)\n")
	}
	if res.Fsyncs > 0 {
		fmt.Fprintf(&sb, "fsyncs: %d, %.1f messages each, p50 %.0f us, p99 %.0f us\n",
			res.Fsyncs, float64(res.Messages)/float64(res.Fsyncs), res.FsyncLatency.P50, res.FsyncLatency.P99)
	}
	if res.FirstError != "" {
		fmt.Fprintf(&sb, "first error: %s\n", res.FirstError)
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

func singleNote(res *Result) string {
	if res.Batch != 1 {
		return ""
	}
	if res.Single == SingleProducer {
		return " (single sends through client.Producer)"
	}
	return " (each produce waits for its ack)"
}

func latencyNote(kind string) string {
	switch kind {
	case "end_to_end":
		return "end to end, from the send time in each message to its arrival at a consumer"
	case "message":
		return "per message, from Producer.Send to its acknowledgement"
	}
	return "per request round trip"
}

func orDash(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", v)
}
