package storage

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// BenchmarkAppend measures Append for a matrix of message size, batch size
// and volume count beside a raw baseline: the same batch bytes written to
// plain files with os.File.Write, one write per batch per volume. The two
// run interleaved in the same loop, so both see the same page cache and the
// same neighbours on a shared machine; the metrics are haraqa's and raw's
// throughput and their ratio. ns/op covers both.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{100, 1024} {
		for _, batch := range []int{1, 100, 1000} {
			for _, vols := range []int{1, 3} {
				m := make([][]byte, batch)
				for i := range m {
					m[i] = make([]byte, size)
					for j := range m[i] {
						m[i][j] = byte(i + j)
					}
				}
				buf := protocol.AppendBatch(nil, m...)
				b.Run(fmt.Sprintf("size=%d/batch=%d/vols=%d", size, batch, vols), func(b *testing.B) {
					benchAppend(b, buf, batch, vols)
				})
			}
		}
	}
}

func benchAppend(b *testing.B, batch []byte, count, vols int) {
	dirs := make([]string, vols)
	raw := make([]*os.File, vols)
	for i := range dirs {
		dirs[i] = b.TempDir()
		f, err := os.OpenFile(filepath.Join(b.TempDir(), "raw.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		raw[i] = f
	}
	opts := DefaultOptions(dirs...)
	opts.Logger = discardLogger()
	if e := os.Getenv("HARAQA_BENCH_ENTRIES"); e != "" {
		fmt.Sscan(e, &opts.Entries)
	}
	s, err := Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateTopic("bench"); err != nil {
		b.Fatal(err)
	}
	var haraqaTime, rawTime time.Duration
	b.SetBytes(int64(len(batch)))
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		if _, err := s.Append("bench", batch); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		for _, f := range raw {
			if _, err := f.Write(batch); err != nil {
				b.Fatal(err)
			}
		}
		rawTime += time.Since(t1)
		haraqaTime += t1.Sub(t0)
	}
	n := float64(b.N)
	b.ReportMetric(n*float64(len(batch))/1e6/haraqaTime.Seconds(), "haraqa-MB/s")
	b.ReportMetric(n*float64(len(batch))/1e6/rawTime.Seconds(), "raw-MB/s")
	b.ReportMetric(n*float64(count)/haraqaTime.Seconds(), "haraqa-msgs/s")
	b.ReportMetric(rawTime.Seconds()/haraqaTime.Seconds(), "ratio")
}
