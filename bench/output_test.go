package bench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"
)

// sampleResult is a result as a produce run with a ping-pong ceiling
// leaves it.
func sampleResult(t *testing.T) *Result {
	t.Helper()
	r := &runner{cfg: &Config{Mode: ModeProduce, Size: 100, Batch: 1, Single: SingleProduce, Producers: 1, Topics: 1, Compress: "none"}}
	res := r.newResult()
	h := newHist()
	for i := range 1000 {
		record(h, time.Duration(20+i%50)*time.Microsecond)
	}
	res.setRate(1000, 0.05)
	res.setHist(h, "request")
	c := newHist()
	for i := range 1000 {
		record(c, time.Duration(15+i%40)*time.Microsecond)
	}
	res.setCeiling(ceilingResult{kind: CeilingPingPong, bytes: 100000, seconds: 0.04, hist: c})
	for i := 1; i <= 5; i++ {
		res.Series = append(res.Series, Sample{Seconds: float64(i) / 10, Produced: int64(200 * i)})
	}
	return res
}

func TestResultJSON(t *testing.T) {
	res := sampleResult(t)
	var buf bytes.Buffer
	if err := res.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	for _, k := range []string{"mode", "size", "batch", "messages", "bytes", "seconds", "msgs_per_sec", "mb_per_sec",
		"latency_us", "errors", "ceiling_mb_per_sec", "ratio_to_ceiling", "ceiling_latency_us", "latency_ratio", "zero_copy_share"} {
		if _, ok := m[k]; !ok {
			t.Errorf("key %q missing: %s", k, buf.Bytes())
		}
	}
	lat, _ := m["latency_us"].(map[string]any)
	for _, k := range []string{"p50", "p90", "p99", "p999", "max"} {
		if v, ok := lat[k].(float64); !ok || v <= 0 {
			t.Errorf("latency_us.%s = %v", k, lat[k])
		}
	}
	if m["mode"] != "produce" || m["messages"] != 1000.0 || m["bytes"] != 100000.0 || m["zero_copy_share"] != nil {
		t.Errorf("values: %s", buf.Bytes())
	}
	if got, want := m["msgs_per_sec"].(float64), 20000.0; got < want*0.999 || got > want*1.001 {
		t.Errorf("msgs_per_sec %v, want %v", got, want)
	}
	// MB/s 2.0 against a ceiling of 100000 B in 0.04 s: 2.5 MB/s.
	if got := m["ratio_to_ceiling"].(float64); got < 0.799 || got > 0.801 {
		t.Errorf("ratio_to_ceiling %v, want 0.8", got)
	}
	if m["latency_ratio"].(float64) <= 1 {
		t.Errorf("latency_ratio %v: haraqa's p50 is the larger", m["latency_ratio"])
	}

	// Without a ceiling the ceiling keys are absent.
	r := &runner{cfg: &Config{Mode: ModeConsume, Size: 100, Batch: 10, Producers: 1, Consumers: 2, Topics: 1}}
	plain := r.newResult()
	plain.setRate(10, 1)
	buf.Reset()
	if err := plain.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	m = nil
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ceiling_mb_per_sec", "ratio_to_ceiling", "ceiling_latency_us", "latency_ratio"} {
		if _, ok := m[k]; ok {
			t.Errorf("key %q present without a ceiling", k)
		}
	}
	if m["compress"] != "none" || m["consumers"] != 2.0 {
		t.Errorf("values: %s", buf.Bytes())
	}
}

func TestResultTable(t *testing.T) {
	res := sampleResult(t)
	var buf bytes.Buffer
	if err := res.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"messages", "bytes", "seconds", "msgs/s", "MB/s", "p50", "p99.9", "max", "errors",
		"haraqa", "ceiling (ping-pong)", "ratio to ceiling: 0.80", "each produce waits for its ack"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	res.Mode = ModeBoth
	res.Gaps = 3
	share := 0.5
	res.ZeroCopyShare = &share
	buf.Reset()
	res.WriteTable(&buf)
	if out := buf.String(); !strings.Contains(out, "3 missing") || !strings.Contains(out, "zero-copy share of consumed bytes: 50.0%") {
		t.Errorf("both table:\n%s", out)
	}
	if res.OK() {
		t.Error("a result with gaps is OK")
	}
}

func TestReportSelfContained(t *testing.T) {
	res := sampleResult(t)
	res.Mode = ModeBoth
	for i := range res.Series {
		res.Series[i].Consumed = res.Series[i].Produced - 10
	}
	var buf bytes.Buffer
	if err := WriteReport(&buf, res); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	if regexp.MustCompile(`(?i)(https?:)?//[a-z0-9]`).MatchString(page) {
		t.Error("the report references a network address")
	}
	for _, bad := range []string{"<script", "<link", "@import", "url("} {
		if strings.Contains(strings.ToLower(page), bad) {
			t.Errorf("the report contains %q", bad)
		}
	}
	if n := strings.Count(page, "<svg"); n != 2 {
		t.Errorf("%d charts, want 2", n)
	}
	if n := strings.Count(page, "<polyline"); n != 4 { // produced, consumed; haraqa, ceiling
		t.Errorf("%d lines, want 4", n)
	}
	for _, want := range []string{"99.9%", "latency (us)", "messages/s", "ceiling (ping-pong)"} {
		if !strings.Contains(page, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// Well-formed: every element closed and nested (the page is also XML).
	d := xml.NewDecoder(strings.NewReader(page))
	d.Strict = true
	depth := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
		switch tok.(type) {
		case xml.StartElement:
			depth++
		case xml.EndElement:
			depth--
		}
	}
	if depth != 0 {
		t.Fatalf("unbalanced elements: depth %d", depth)
	}
}

func TestReportWithoutData(t *testing.T) {
	r := &runner{cfg: &Config{Mode: ModeProduce, Size: 100, Batch: 1}}
	var buf bytes.Buffer
	if err := WriteReport(&buf, r.newResult()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "No data.") {
		t.Error("an empty result draws charts")
	}
}

func TestParseConsumedMetrics(t *testing.T) {
	older := `# HELP haraqa_consumed_bytes_total Batch bytes sent to consumers.
# TYPE haraqa_consumed_bytes_total counter
haraqa_consumed_bytes_total{path="copied"} 1024
haraqa_consumed_bytes_total{path="zero_copy"} 1.048576e+06
haraqa_produced_bytes_total 5
`
	newer := `haraqa_consumed_bytes_total{topic="a"} 77
haraqa_consume_sent_bytes_total{path="zero_copy"} 3000
haraqa_consume_sent_bytes_total{path="copied"} 10
`
	for _, tc := range []struct {
		text string
		z, c int64
	}{{older, 1 << 20, 1024}, {newer, 3000, 10}} {
		z, c, err := parseConsumedMetrics(strings.NewReader(tc.text))
		if err != nil || z != tc.z || c != tc.c {
			t.Fatalf("got %d %d %v, want %d %d", z, c, err, tc.z, tc.c)
		}
	}
	if _, _, err := parseConsumedMetrics(strings.NewReader("haraqa_produced_bytes_total 5\n")); err == nil {
		t.Fatal("missing metrics not reported")
	}
}

// A ratio above 1 is flagged as a starved ceiling in the result, its
// table and the matrix; one at or below 1 is not.
func TestStarvedCeiling(t *testing.T) {
	for _, tc := range []struct {
		ceilingSeconds float64
		starved        bool
	}{{0.5, false}, {1, false}, {2, true}} {
		res := &Result{Mode: ModeProduce, Messages: 1000, Bytes: 1e6, Seconds: 1, MBPerSec: 1}
		res.setCeiling(ceilingResult{kind: CeilingAppend, seconds: tc.ceilingSeconds})
		if res.CeilingStarved != tc.starved {
			t.Errorf("ceiling %vs: ratio %.2f, starved %v", tc.ceilingSeconds, *res.RatioToCeiling, res.CeilingStarved)
		}
		var buf bytes.Buffer
		if err := res.WriteTable(&buf); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(buf.String(), "STARVED CEILING"); got != tc.starved {
			t.Errorf("ceiling %vs: table flags it %v:\n%s", tc.ceilingSeconds, got, buf.String())
		}
		b, _ := json.Marshal(res)
		if got := strings.Contains(string(b), `"ceiling_starved":true`); got != tc.starved {
			t.Errorf("ceiling %vs: JSON %s", tc.ceilingSeconds, b)
		}
	}
	if got := ratioText(3.51); got != "3.51 (starved ceiling)" {
		t.Errorf("ratioText(3.51) = %q", got)
	}
	if got := ratioText(0.9); got != "0.90" {
		t.Errorf("ratioText(0.9) = %q", got)
	}
}

func TestProgressLine(t *testing.T) {
	got := progressLine("both", 3200*time.Millisecond, 1234567, -1, 412345.4, 100)
	if want := "haraqa-bench: both 3s: 1,234,567 msgs, 412,345 msgs/s, 41.2 MB/s"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	got = progressLine("fill", time.Second, 500, 1000, 500, 1024)
	if !strings.Contains(got, "500 of 1,000 msgs") {
		t.Errorf("with a total: %q", got)
	}
}
