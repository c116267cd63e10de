package bench

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// sampleEvery is the period of the throughput samples and of the progress
// bar's updates.
const sampleEvery = 100 * time.Millisecond

// lineEvery is the period of the plain progress lines (UI.Lines).
const lineEvery = time.Second

// progressLine is one plain line of progress: the phase, its time so far,
// the messages counted (of total, when known) and the last interval's rate.
func progressLine(desc string, took time.Duration, n, total int64, rate float64, size int) string {
	count := groupThousands(float64(n))
	if total > 0 {
		count += " of " + groupThousands(float64(total))
	}
	return fmt.Sprintf("haraqa-bench: %s %.0fs: %s msgs, %s msgs/s, %.1f MB/s",
		desc, took.Round(time.Second).Seconds(), count, groupThousands(rate), rate*float64(size)/1e6)
}

// Sample is the running totals at one moment of the timed phase.
type Sample struct {
	Seconds  float64 `json:"t"`        // since the timed phase started
	Produced int64   `json:"produced"` // messages acknowledged so far
	Consumed int64   `json:"consumed"` // messages read so far
}

// watcher samples the live counters during a phase and, when w is not
// nil, draws a progress bar with the current rate on it.
type watcher struct {
	stop    chan struct{}
	done    sync.WaitGroup
	samples []Sample
}

// watch starts sampling r.live for a phase called desc. count picks the
// figure the bar shows; total is its expected end (-1: unknown).
func (r *runner) watch(desc string, total int64, count func(*live) int64) *watcher {
	w := &watcher{stop: make(chan struct{})}
	var bar *progressbar.ProgressBar
	if r.progress != nil {
		bar = newBar(r.progress, desc, total)
	}
	start := time.Now()
	w.done.Go(func() {
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		prev, prevT := int64(0), start
		linePrev, lineT := int64(0), start
		for {
			select {
			case <-w.stop:
				if bar != nil {
					bar.Set64(count(&r.live))
					bar.Finish()
					fmt.Fprintln(r.progress)
				}
				return
			case now := <-t.C:
				p, c := r.live.produced.Load(), r.live.consumed.Load()
				w.samples = append(w.samples, Sample{now.Sub(start).Seconds(), p, c})
				if bar != nil {
					n := count(&r.live)
					rate := float64(n-prev) / now.Sub(prevT).Seconds()
					prev, prevT = n, now
					bar.Describe(fmt.Sprintf("%-8s %10.0f msgs/s %8.1f MB/s", desc, rate, rate*float64(r.cfg.Size)/1e6))
					bar.Set64(n)
				}
				if r.lines != nil && now.Sub(lineT) >= lineEvery {
					n := count(&r.live)
					rate := float64(n-linePrev) / now.Sub(lineT).Seconds()
					linePrev, lineT = n, now
					fmt.Fprintln(r.lines, progressLine(desc, now.Sub(start), n, total, rate, r.cfg.Size))
				}
			}
		}
	})
	return w
}

// end stops the watcher and returns its samples.
func (w *watcher) end() []Sample {
	close(w.stop)
	w.done.Wait()
	return w.samples
}

func newBar(out io.Writer, desc string, total int64) *progressbar.ProgressBar {
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(out),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionSetItsString("msgs"),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(sampleEvery),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionSpinnerType(14),
	)
}

func producedCount(l *live) int64 { return l.produced.Load() }
func consumedCount(l *live) int64 { return l.consumed.Load() }
