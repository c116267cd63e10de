package storage

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// BenchmarkAppendFsyncAlways measures Append with FsyncAlways from
// concurrent appenders, each waiting for its own 100-byte message, beside
// the plainest durable append: each appender writes its message to one
// shared O_APPEND file and fsyncs it itself. The metrics are both rates,
// their ratio, and haraqa's messages and commits (writes) per fsync;
// ns/op covers both.
func BenchmarkAppendFsyncAlways(b *testing.B) {
	for _, writers := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			benchFsyncAlways(b, writers)
		})
	}
}

func benchFsyncAlways(b *testing.B, writers int) {
	var fsyncs atomic.Int64
	opts := DefaultOptions(b.TempDir())
	opts.Logger = discardLogger()
	opts.Fsync = FsyncAlways
	opts.OnFsync = func(time.Duration) { fsyncs.Add(1) }
	s := openBench(b, opts)
	raw, err := os.OpenFile(filepath.Join(b.TempDir(), "raw.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	msg := make([]byte, 100)
	batch := protocol.AppendBatch(nil, msg)
	// run has writers goroutines do n appends in all, and returns how
	// long they took.
	run := func(n int, appendOne func() error) time.Duration {
		var wg sync.WaitGroup
		var failed atomic.Pointer[error]
		start := time.Now()
		for w := range writers {
			mine := n / writers
			if w < n%writers {
				mine++
			}
			wg.Go(func() {
				for range mine {
					if err := appendOne(); err != nil {
						failed.CompareAndSwap(nil, &err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err := failed.Load(); err != nil {
			b.Fatal(*err)
		}
		return time.Since(start)
	}
	haraqa := func() error { _, err := lg(b, s, "bench").Append(batch, AppendOptions{}); return err }
	plain := func() error {
		if _, err := raw.Write(batch); err != nil {
			return err
		}
		return raw.Sync()
	}
	run(writers*10, haraqa) // untimed: the segment's files, the first commits
	run(writers*10, plain)
	f0 := fsyncs.Load()
	tp, _ := s.lookup("bench")
	g0 := tp.committer.wgen.Load()
	b.SetBytes(int64(len(batch)))
	b.ResetTimer()
	haraqaTime := run(b.N, haraqa)
	rawTime := run(b.N, plain)
	n := float64(b.N)
	b.ReportMetric(n/haraqaTime.Seconds(), "haraqa-msgs/s")
	b.ReportMetric(n/rawTime.Seconds(), "raw-msgs/s")
	b.ReportMetric(rawTime.Seconds()/haraqaTime.Seconds(), "ratio")
	b.ReportMetric(n/float64(max(fsyncs.Load()-f0, 1)), "msgs/fsync")
	b.ReportMetric(float64(tp.committer.wgen.Load()-g0)/float64(max(fsyncs.Load()-f0, 1)), "commits/fsync")
}
