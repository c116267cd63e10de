package bench

import (
	"math"
	"testing"
	"time"
)

func TestLatencyPercentiles(t *testing.T) {
	h := newHist()
	for i := 1; i <= 1000; i++ { // 1..1000 us
		record(h, time.Duration(i)*time.Microsecond)
	}
	l := latencyOf(h)
	near := func(got, want float64) bool { return math.Abs(got-want) <= want*0.002+1 }
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"p50", l.P50, 500}, {"p90", l.P90, 900}, {"p99", l.P99, 990}, {"p99.9", l.P999, 999}, {"max", l.Max, 1000}} {
		if !near(c.got, c.want) {
			t.Errorf("%s = %v, want about %v", c.name, c.got, c.want)
		}
	}
	if latencyOf(newHist()) != (Latency{}) || latencyOf(nil) != (Latency{}) {
		t.Error("empty histogram gives non-zero percentiles")
	}
}

func TestRecordClamps(t *testing.T) {
	h := newHist()
	record(h, 0)
	record(h, time.Hour)
	if h.TotalCount() != 2 || h.Min() != histMin || h.Max() < histMax*999/1000 {
		t.Fatalf("count %d min %d max %d", h.TotalCount(), h.Min(), h.Max())
	}
}

func TestMergeAndDistribution(t *testing.T) {
	a, b := newHist(), newHist()
	for i := range 100 {
		record(a, time.Duration(10+i)*time.Microsecond)
		record(b, time.Duration(1000+i)*time.Microsecond)
	}
	m := mergeHists(a, nil, b)
	if m.TotalCount() != 200 {
		t.Fatalf("merged count %d", m.TotalCount())
	}
	pts := distribution(m)
	if len(pts) < 5 {
		t.Fatalf("%d points", len(pts))
	}
	for i := 1; i < len(pts); i++ {
		if pts[i].Percentile < pts[i-1].Percentile || pts[i].Micros < pts[i-1].Micros {
			t.Fatalf("distribution not monotonic at %d: %+v", i, pts[i-1:i+1])
		}
	}
	if last := pts[len(pts)-1]; last.Micros != float64(m.Max()) {
		t.Fatalf("last point %v, want the max %d", last, m.Max())
	}
	if distribution(newHist()) != nil {
		t.Fatal("distribution of an empty histogram")
	}
}
