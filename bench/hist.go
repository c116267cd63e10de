package bench

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in microseconds from 1 us to 60 s with 3
// significant digits.
const (
	histMin    = 1
	histMax    = 60_000_000
	histDigits = 3
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, histDigits) }

// record adds d to h, clamped to the histogram's range.
func record(h *hdrhistogram.Histogram, d time.Duration) {
	us := d.Microseconds()
	_ = h.RecordValue(min(max(us, histMin), histMax)) // in range: cannot fail
}

// Latency holds percentiles in microseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// latencyOf extracts the percentiles of h (zero when it is empty).
func latencyOf(h *hdrhistogram.Histogram) Latency {
	if h == nil || h.TotalCount() == 0 {
		return Latency{}
	}
	return Latency{
		P50:  float64(h.ValueAtQuantile(50)),
		P90:  float64(h.ValueAtQuantile(90)),
		P99:  float64(h.ValueAtQuantile(99)),
		P999: float64(h.ValueAtQuantile(99.9)),
		Max:  float64(h.Max()),
	}
}

// mergeHists returns a histogram holding every value of hs.
func mergeHists(hs ...*hdrhistogram.Histogram) *hdrhistogram.Histogram {
	out := newHist()
	for _, h := range hs {
		if h != nil {
			out.Merge(h)
		}
	}
	return out
}

// percentilePoint is one point of a latency distribution.
type percentilePoint struct {
	Percentile float64 // 0 to 100
	Micros     float64
}

// distribution returns the latency at percentiles spaced evenly on the
// usual "nines" scale (50, 75, 90, 95, 99, 99.5, 99.9, ...), up to the
// largest one the count resolves, and the maximum.
func distribution(h *hdrhistogram.Histogram) []percentilePoint {
	if h == nil || h.TotalCount() == 0 {
		return nil
	}
	var pts []percentilePoint
	n := float64(h.TotalCount())
	// 1/(1-p) from 1 to n in steps of 2^(1/4).
	pts = append(pts, percentilePoint{0, float64(h.Min())})
	for inv := 1.189207115; inv <= n; inv *= 1.189207115 {
		p := 100 * (1 - 1/inv)
		pts = append(pts, percentilePoint{p, float64(h.ValueAtQuantile(p))})
	}
	pts = append(pts, percentilePoint{100 * (1 - 1/n), float64(h.Max())})
	return pts
}
