package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/storage"
)

// embedded is an in-process server on fresh temporary volumes. It is the
// only part of the package that touches the broker and storage packages;
// the load itself goes through the client like any other.
type embedded struct {
	dir     string
	store   *storage.Store
	broker  *broker.Broker
	ballast []byte

	fsyncMu   sync.Mutex
	fsyncHist *hdrhistogram.Histogram // fsync durations since resetFsyncs
}

// startEmbedded opens a store on volumes fresh directories under dir and
// serves it on 127.0.0.1:0, as the haraqa binary does with the same flags.
func startEmbedded(cfg *Config, log *slog.Logger) (*embedded, error) {
	policy, err := storage.ParseFsyncPolicy(cfg.Fsync)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	dir, err := os.MkdirTemp(cfg.Dir, "haraqa-bench-")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrServer, err)
	}
	vols := make([]string, cfg.Volumes)
	for i := range vols {
		vols[i] = filepath.Join(dir, fmt.Sprintf("vol%d", i+1))
	}
	so := storage.DefaultOptions(vols...)
	so.Fsync = policy
	so.Entries = cfg.Entries
	so.Logger = log
	e := &embedded{dir: dir, fsyncHist: newHist()}
	so.OnFsync = func(d time.Duration) {
		e.fsyncMu.Lock()
		record(e.fsyncHist, d)
		e.fsyncMu.Unlock()
	}
	store, err := storage.Open(so)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: %w", ErrServer, err)
	}
	bc := broker.DefaultConfig()
	bc.Addr = "127.0.0.1:0"
	bc.Logger = log
	b, err := broker.New(store, bc, policy == storage.FsyncAlways)
	if err == nil {
		err = b.Start()
	}
	if err != nil {
		err = errors.Join(err, store.Close())
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: %w", ErrServer, err)
	}
	// The haraqa binary's GC ballast (see its -ballast flag): address
	// space, never touched, so the GC paces itself as in the real server.
	e.store, e.broker, e.ballast = store, b, make([]byte, cfg.Ballast)
	return e, nil
}

func (e *embedded) addr() string { return e.broker.Addr().String() }

// consumed returns the broker's zero-copy and copied consume bytes.
func (e *embedded) consumed(context.Context) (zeroCopy, copied int64, err error) {
	st := e.broker.Stats()
	return st.ZeroCopyBytes, st.CopiedBytes, nil
}

// settle waits until the files of deleted topics are removed, so that
// their removal neither takes CPU from a timed phase nor leaves the page
// cache it frees still in use.
func (e *embedded) settle(ctx context.Context) error {
	if err := e.store.WaitDeleted(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrServer, err)
	}
	return nil
}

// resetFsyncs starts counting fsyncs afresh.
func (e *embedded) resetFsyncs() {
	e.fsyncMu.Lock()
	e.fsyncHist.Reset()
	e.fsyncMu.Unlock()
}

// fsyncs returns the number of segment fsyncs since resetFsyncs and
// their durations.
func (e *embedded) fsyncs() (int64, Latency) {
	e.fsyncMu.Lock()
	defer e.fsyncMu.Unlock()
	return e.fsyncHist.TotalCount(), latencyOf(e.fsyncHist)
}

// close stops the server and removes its volumes.
func (e *embedded) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := errors.Join(e.broker.Shutdown(ctx), e.store.Close(), os.RemoveAll(e.dir))
	runtime.KeepAlive(e.ballast)
	e.ballast = nil
	if err != nil {
		return fmt.Errorf("%w: %w", ErrServer, err)
	}
	return nil
}

// scrapeConsumed reads the zero-copy and copied consume bytes from a
// server's Prometheus metrics at http://addr/metrics.
func scrapeConsumed(ctx context.Context, addr string) (zeroCopy, copied int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("metrics: %s", resp.Status)
	}
	return parseConsumedMetrics(bufio.NewScanner(resp.Body))
}

// consumedMetrics are the names, newest first, under which servers have
// exported their consume bytes by path (zero_copy or copied).
var consumedMetrics = []string{"haraqa_consume_sent_bytes_total", "haraqa_consumed_bytes_total"}

// parseConsumedMetrics finds the zero-copy and copied consume bytes in
// Prometheus text format.
func parseConsumedMetrics(sc *bufio.Scanner) (zeroCopy, copied int64, err error) {
	type pair struct {
		z, c   int64
		zf, cf bool
	}
	found := make([]pair, len(consumedMetrics))
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok {
			continue
		}
		i := slices.Index(consumedMetrics, name)
		end := strings.IndexByte(rest, '}')
		if i < 0 || end < 0 {
			continue
		}
		fields := strings.Fields(rest[end+1:])
		if len(fields) == 0 {
			continue
		}
		v, perr := strconv.ParseFloat(fields[0], 64)
		if perr != nil {
			continue
		}
		switch labels := rest[:end]; {
		case strings.Contains(labels, `path="zero_copy"`):
			found[i].z, found[i].zf = int64(v), true
		case strings.Contains(labels, `path="copied"`):
			found[i].c, found[i].cf = int64(v), true
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	for _, f := range found {
		if f.zf && f.cf {
			return f.z, f.c, nil
		}
	}
	return 0, 0, fmt.Errorf("metrics: none of %s by path", strings.Join(consumedMetrics, ", "))
}
