package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
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

// benchWarmup is how long each benchmark appends untimed first
// (HARAQA_BENCH_WARMUP overrides it; make test runs benchmarks once with 0).
var benchWarmup = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("HARAQA_BENCH_WARMUP")); err == nil {
		return d
	}
	return 2 * time.Second
}()

// rawAppender is a baseline: batches appended with os.File.Write to one
// plain file per volume, and with roll > 0 to a new file per volume every
// roll batches, as haraqa starts a segment every Options.Entries messages.
type rawAppender struct {
	dirs    []string
	files   []*os.File
	roll, n int
}

func newRawAppender(b *testing.B, vols, roll int) *rawAppender {
	r := &rawAppender{roll: roll}
	for range vols {
		r.dirs = append(r.dirs, b.TempDir())
	}
	if err := r.open(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.close)
	return r
}

func (r *rawAppender) open() error {
	r.close()
	r.files = r.files[:0]
	for _, d := range r.dirs {
		f, err := os.OpenFile(filepath.Join(d, fmt.Sprintf("%020d.log", r.n)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		r.files = append(r.files, f)
	}
	return nil
}

func (r *rawAppender) close() {
	for _, f := range r.files {
		f.Close()
	}
}

func (r *rawAppender) write(batch []byte) error {
	if r.roll > 0 && r.n > 0 && r.n%r.roll == 0 {
		if err := r.open(); err != nil {
			return err
		}
	}
	r.n++
	for _, f := range r.files {
		if _, err := f.Write(batch); err != nil {
			return err
		}
	}
	return nil
}

// openBench opens a store with opts, closed when the benchmark ends, and
// creates its topic "bench".
func openBench(b *testing.B, opts Options) *Store {
	b.Helper()
	s, err := Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.CreateTopic("bench"); err != nil {
		b.Fatal(err)
	}
	return s
}

func benchAppend(b *testing.B, batch []byte, count, vols int) {
	dirs := make([]string, vols)
	for i := range dirs {
		dirs[i] = b.TempDir()
	}
	opts := DefaultOptions(dirs...)
	opts.Logger = discardLogger()
	if e := os.Getenv("HARAQA_BENCH_ENTRIES"); e != "" {
		fmt.Sscan(e, &opts.Entries)
	}
	raw := newRawAppender(b, vols, 0)
	rolling := newRawAppender(b, vols, (opts.Entries+count-1)/count)
	s := openBench(b, opts)
	// Untimed warm-up: on a fresh VM the first few thousand file creations
	// and the first pages of a growing page cache cost several times what
	// they cost later (docs/benchmarks.md), which would measure the machine
	// rather than the code.
	for end := time.Now().Add(benchWarmup); time.Now().Before(end); {
		_, err := lg(b, s, "bench").Append(batch, AppendOptions{})
		if err == nil {
			err = errors.Join(raw.write(batch), rolling.write(batch))
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	var haraqaTime, rawTime, rollTime time.Duration
	b.SetBytes(int64(len(batch)))
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		if _, err := lg(b, s, "bench").Append(batch, AppendOptions{}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := raw.write(batch); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if err := rolling.write(batch); err != nil {
			b.Fatal(err)
		}
		rollTime += time.Since(t2)
		rawTime += t2.Sub(t1)
		haraqaTime += t1.Sub(t0)
	}
	n := float64(b.N)
	b.ReportMetric(n*float64(len(batch))/1e6/haraqaTime.Seconds(), "haraqa-MB/s")
	b.ReportMetric(n*float64(len(batch))/1e6/rawTime.Seconds(), "raw-MB/s")
	b.ReportMetric(n*float64(count)/haraqaTime.Seconds(), "haraqa-msgs/s")
	b.ReportMetric(rawTime.Seconds()/haraqaTime.Seconds(), "ratio")
	b.ReportMetric(rollTime.Seconds()/haraqaTime.Seconds(), "ratio-rolling")
}

// BenchmarkAppendCompressed: Append of compressed batches from one
// goroutine, one tenant: each is decoded once to be checked, through the
// decode budget and its threads (decode.go). Baseline: the raw append of
// the same bytes.
func BenchmarkAppendCompressed(b *testing.B) {
	for _, codec := range []protocol.Codec{protocol.CodecS2, protocol.CodecZstd} {
		for _, batch := range []int{1, 100} {
			m := make([][]byte, batch)
			for i := range m {
				m[i] = make([]byte, 1024)
				for j := range m[i] {
					m[i][j] = byte((i + j) % 7)
				}
			}
			buf := protocol.AppendBatchCodec(nil, codec, m...)
			b.Run(fmt.Sprintf("codec=%s/size=1024/batch=%d", codec, batch), func(b *testing.B) {
				benchAppend(b, buf, batch, 1)
			})
		}
	}
}

// BenchmarkDecodeBudget: one acquire and release of the decode budget, from
// one goroutine (the single-tenant path) and from 8 goroutines of 8
// tenants at once.
func BenchmarkDecodeBudget(b *testing.B) {
	b.Run("tenants=1", func(b *testing.B) {
		d := newDecodeBudget(64<<20, 1, 256<<20)
		b.ReportAllocs()
		for b.Loop() {
			n, _ := d.acquire("t", 4096)
			d.release(n)
		}
	})
	b.Run("tenants=8", func(b *testing.B) {
		d := newDecodeBudget(64<<20, 1, 256<<20)
		var next atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			tenant := fmt.Sprint("t", next.Add(1))
			for pb.Next() {
				n, _ := d.acquire(tenant, 4096)
				d.release(n)
			}
		})
	})
}
