package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/haraqa/haraqa/broker/server"
)

// embedded is an in-process server on fresh temporary volumes, assembled
// as the haraqa binary's is (package broker/server). The load itself goes
// through the client like any other.
type embedded struct {
	dir string
	srv *server.Server

	fsyncMu   sync.Mutex
	fsyncHist *hdrhistogram.Histogram // fsync durations since resetFsyncs
}

// startEmbedded opens a store on volumes fresh directories under dir and
// serves it on 127.0.0.1:0, as the haraqa binary does with the same flags;
// with cfg.TLS, over TLS with a self-signed certificate, and returns the
// client configuration that trusts it.
func startEmbedded(cfg *Config, log *slog.Logger) (*embedded, *tls.Config, error) {
	var srvTLS, cliTLS *tls.Config
	if cfg.TLS != nil {
		var err error
		if srvTLS, cliTLS, err = selfSigned(cfg.TLS); err != nil {
			return nil, nil, err
		}
	}
	dir, err := os.MkdirTemp(cfg.Dir, "haraqa-bench-")
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrServer, err)
	}
	vols := make([]string, cfg.Volumes)
	for i := range vols {
		vols[i] = filepath.Join(dir, fmt.Sprintf("vol%d", i+1))
	}
	sc := server.DefaultConfig(vols...)
	if err := sc.Storage.Fsync.UnmarshalText([]byte(cfg.Fsync)); err != nil {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	sc.TLS = srvTLS
	sc.Storage.Entries = cfg.Entries
	sc.Broker.Addr = "127.0.0.1:0"
	sc.HTTPAddr = "" // the load reads the broker's counters directly
	// The haraqa binary's GC ballast (see its -ballast flag): address
	// space, never touched, so the GC paces itself as in the real server.
	sc.Ballast = cfg.Ballast
	sc.Logger = log
	e := &embedded{dir: dir, fsyncHist: newHist()}
	sc.Storage.OnFsync = func(d time.Duration) {
		e.fsyncMu.Lock()
		record(e.fsyncHist, d)
		e.fsyncMu.Unlock()
	}
	if e.srv, err = server.New(sc); err == nil {
		err = e.srv.Start()
	}
	if err != nil {
		os.RemoveAll(dir)
		if errors.Is(err, server.ErrInvalidConfig) {
			return nil, nil, fmt.Errorf("%w: %w", ErrUsage, err)
		}
		return nil, nil, fmt.Errorf("%w: %w", ErrServer, err)
	}
	return e, cliTLS, nil
}

func (e *embedded) addr() string { return e.srv.Addr().String() }

// consumed returns the broker's zero-copy and copied consume bytes.
func (e *embedded) consumed(context.Context) (zeroCopy, copied int64, err error) {
	st := e.srv.Broker().Stats()
	return st.ZeroCopyBytes, st.CopiedBytes, nil
}

// settle waits until the files of deleted topics are removed, so that
// their removal neither takes CPU from a timed phase nor leaves the page
// cache it frees still in use.
func (e *embedded) settle(ctx context.Context) error {
	if err := e.srv.Store().WaitDeleted(ctx); err != nil {
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
	if err := errors.Join(e.srv.Shutdown(ctx), os.RemoveAll(e.dir)); err != nil {
		return fmt.Errorf("%w: %w", ErrServer, err)
	}
	return nil
}

// scrapeConsumed reads the zero-copy and copied consume bytes from a
// server's Prometheus metrics at http://addr/metrics, presenting token
// (if any) for a server started with -auth-metrics.
func scrapeConsumed(ctx context.Context, addr, token string) (zeroCopy, copied int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("metrics: %s", resp.Status)
	}
	return parseConsumedMetrics(resp.Body)
}

// consumedMetrics are the names, newest first, under which servers have
// exported their consume bytes by path (zero_copy or copied).
var consumedMetrics = []string{"haraqa_consume_sent_bytes_total", "haraqa_consumed_bytes_total"}

// parseConsumedMetrics finds the zero-copy and copied consume bytes in
// Prometheus text format.
func parseConsumedMetrics(r io.Reader) (zeroCopy, copied int64, err error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return 0, 0, fmt.Errorf("metrics: %w", err)
	}
	for _, name := range consumedMetrics {
		var z, c *float64
		for _, m := range families[name].GetMetric() {
			v := metricValue(m)
			for _, l := range m.GetLabel() {
				switch {
				case l.GetName() != "path":
				case l.GetValue() == "zero_copy":
					z = &v
				case l.GetValue() == "copied":
					c = &v
				}
			}
		}
		if z != nil && c != nil {
			return int64(*z), int64(*c), nil
		}
	}
	return 0, 0, fmt.Errorf("metrics: none of %s by path", strings.Join(consumedMetrics, ", "))
}

// metricValue is the value of a counter, gauge or untyped sample.
func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	}
	return m.GetUntyped().GetValue()
}
