// Package httpapi serves haraqa's HTTP side port: health checks and
// Prometheus metrics. It listens from the start, so liveness holds while the
// volumes are being recovered; readiness and the haraqa metrics follow once
// Ready is called.
package httpapi

import (
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/storage"
)

// Config says what the HTTP port serves.
type Config struct {
	// Prometheus serves /metrics (the -prometheus flag, default true).
	Prometheus bool
}

// API is the HTTP port's handler:
//
//	GET /healthz   200 while the process serves (liveness)
//	GET /readyz    503 while the volumes are recovered, 200 once the broker listens
//	GET /metrics   Prometheus metrics, with Go and process metrics, if Config.Prometheus
type API struct {
	mux   *http.ServeMux
	state atomic.Pointer[state]
}

type state struct {
	store  *storage.Store
	broker *broker.Broker
}

// New returns the handler; call Ready once the store is open and the broker
// listens.
func New(cfg Config) *API {
	a := &API{mux: http.NewServeMux()}
	a.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	a.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if a.state.Load() == nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("recovering\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	if cfg.Prometheus {
		reg := prometheus.NewRegistry()
		reg.MustRegister(
			collectors.NewGoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
			collector{api: a},
		)
		a.mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	}
	return a
}

// Ready makes /readyz answer 200 and the haraqa metrics flow.
func (a *API) Ready(store *storage.Store, b *broker.Broker) {
	a.state.Store(&state{store: store, broker: b})
}

// ServeHTTP serves the routes above.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }
