package bench

import (
	"context"
	"slices"
	"testing"
)

// BenchmarkAppendCeilingChecked runs the produce ceiling of 1 KiB x 1000
// requests (1,024,000-byte chunks, one stream, one volume) plain and with
// the checksum work every checksummed protocol adds (the sender copies the
// payload into the chunk and computes its CRC32C, the receiver computes it
// again), in five alternating pairs, and reports the median MB/s of each
// and the median of the pairs' ratios: the best a produce with checksums at
// both ends can reach against the plain ceiling. b.N is the number of
// chunks per pass.
func BenchmarkAppendCeilingChecked(b *testing.B) {
	const chunk, pairs = 1024 * 1000, 5
	ctx := context.Background()
	var total int64
	for b.Loop() {
		total += chunk
	}
	var plain, checked, ratios []float64
	for range pairs {
		var mbs [2]float64
		for i, check := range []bool{false, true} {
			cr, err := appendCeiling(ctx, b.TempDir(), 1, 1, 1, chunk, total, total, check)
			if err != nil {
				b.Fatal(err)
			}
			mbs[i] = float64(total) / 1e6 / cr.seconds
		}
		plain = append(plain, mbs[0])
		checked = append(checked, mbs[1])
		ratios = append(ratios, mbs[1]/mbs[0])
	}
	b.ReportMetric(middle(plain), "plain-MB/s")
	b.ReportMetric(middle(checked), "checked-MB/s")
	b.ReportMetric(middle(ratios), "ratio")
}

// middle is the median of v.
func middle(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}
