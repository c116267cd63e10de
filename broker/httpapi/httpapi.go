// Package httpapi serves haraqa's HTTP side port: the REST API over the
// topics, health checks, Prometheus metrics, the API docs and, when asked,
// pprof. It listens from the start, so liveness holds while the volumes are
// being recovered; the REST API, readiness and the haraqa metrics follow
// once Ready is called.
//
// The REST API is a translation: each route turns its request into the
// calls of package service, the request path the binary port serves too,
// so that rights, names, bounds and error codes are the same on both
// ports; the status of an error is derived from its wire code.
//
// The routes are documented in docs/openapi.yaml (served at
// /docs/openapi.yaml) and, for operators, in docs/http.md.
package httpapi

import (
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/auth"
	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/docs"
	"github.com/haraqa/haraqa/protocol"
)

// Config says what the HTTP port serves.
type Config struct {
	// Prometheus serves /metrics (the -prometheus flag, default true).
	Prometheus bool
	// Docs serves the API docs under /docs/ (the -docs flag, default true).
	Docs bool
	// CORS sends CORS headers and answers preflight requests (the -cors
	// flag, default true).
	CORS bool
	// Pprof serves net/http/pprof under /debug/pprof/ (default false).
	Pprof bool
	// MaxBodyBytes bounds a produce request's body (default 16 MiB).
	MaxBodyBytes int64
	// DefaultLimit is the message limit of a consume that gives none;
	// -1 (the default) means no limit beyond the byte bound.
	DefaultLimit int
	// MaxConsumeBytes bounds the batch bytes one consume reads (default
	// 4 MiB), and the decoded message bytes of its response: no batch is
	// added once they reach it. The first batch is read whole even when
	// larger, up to 64 MiB decoded.
	MaxConsumeBytes int64
	// MaxMessages bounds the messages of one consume response, which keeps
	// its X-Sizes header short (default 10000).
	MaxMessages int
	// MaxWait bounds a consume's long-poll wait (default 60 s).
	MaxWait time.Duration
	// MaxWatchers bounds the open topic watches, GET /ws/topics (default
	// DefaultMaxWatchers, 1024); past it a watch is refused with 429.
	MaxWatchers int
	// MaxWatchTopics bounds the topics of one watch (default
	// DefaultMaxWatchTopics, 100).
	MaxWatchTopics int
	// Auth, when set, makes every route but /healthz and /readyz need an
	// "Authorization: Bearer TOKEN" header whose token holds the right the
	// route needs on its topic (401 without one or with a wrong one, 403
	// when not allowed). /metrics and /docs stay open unless AuthMetrics;
	// pprof then needs an admin token. Nil (the default): no tokens.
	Auth *auth.Authorizer
	// AuthMetrics makes /metrics and /docs need a token with the admin
	// right (the -auth-metrics flag, default false). Only with Auth.
	AuthMetrics bool
	// Peers, when set, is asked where a topic lives that this server does
	// not have, for the routes on /topics/{topic}: a request for a topic
	// on another server is answered 307 with that server's URL. Listing
	// /topics and watching /ws/topics stay local. Nil (the default): no
	// peers, every request is served here.
	Peers Locator
	// Logger receives internal errors (default slog.Default()).
	Logger *slog.Logger
}

// DefaultConfig returns the defaults: everything on but pprof.
func DefaultConfig() Config {
	return Config{
		Prometheus:      true,
		Docs:            true,
		CORS:            true,
		MaxBodyBytes:    protocol.DefaultMaxFrameSize,
		DefaultLimit:    -1,
		MaxConsumeBytes: 4 << 20,
		MaxMessages:     10000,
		MaxWait:         time.Minute,
		MaxWatchers:     DefaultMaxWatchers,
		MaxWatchTopics:  DefaultMaxWatchTopics,
	}
}

// API is the HTTP port's handler. Its routes, besides the REST API:
//
//	GET /healthz        200 while the process serves (liveness)
//	GET /readyz         503 while the volumes are recovered or if the binary port died, 200 once the broker listens
//	GET /metrics        Prometheus metrics, with Go and process metrics (Config.Prometheus)
//	GET /docs/...       API docs: index, Redoc, Swagger UI, openapi.yaml (Config.Docs)
//	    /debug/pprof/   runtime profiles (Config.Pprof)
type API struct {
	cfg     Config
	mux     *http.ServeMux
	state   atomic.Pointer[state]
	metrics *metrics // nil without Config.Prometheus
	routes  []string // "METHOD /path" of the API routes, as in openapi.yaml

	watchers atomic.Int64 // open GET /ws/topics watches
}

type state struct {
	svc    *service.Service // the request path both ports share
	broker *broker.Broker
}

// New returns the handler; call Ready once the store is open and the broker
// listens. Zero numeric fields of cfg take their defaults.
func New(cfg Config) *API {
	cfg.fillDefaults()
	a := &API{cfg: cfg, mux: http.NewServeMux()}
	if cfg.Prometheus {
		a.metrics = newMetrics(a)
	}
	a.routeREST()
	a.routeOps()
	return a
}

// fillDefaults gives the zero numeric fields of c their defaults.
func (c *Config) fillDefaults() {
	def := DefaultConfig()
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = def.MaxBodyBytes
	}
	if c.DefaultLimit == 0 {
		c.DefaultLimit = def.DefaultLimit
	}
	if c.MaxConsumeBytes <= 0 {
		c.MaxConsumeBytes = def.MaxConsumeBytes
	}
	if c.MaxMessages <= 0 {
		c.MaxMessages = def.MaxMessages
	}
	if c.MaxWait <= 0 {
		c.MaxWait = def.MaxWait
	}
	if c.MaxWatchers <= 0 {
		c.MaxWatchers = def.MaxWatchers
	}
	if c.MaxWatchTopics <= 0 {
		c.MaxWatchTopics = def.MaxWatchTopics
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// routeREST registers the REST API: each route on a topic names the op
// whose right it needs (service.RightOf).
func (a *API) routeREST() {
	a.route("GET /topics", a.listTopics)
	a.mux.HandleFunc("GET /topics/{$}", a.listTopics) // the original client's spelling, not a route of its own
	a.route("PUT /topics/{topic}", a.onTopic(protocol.OpCreateTopic, a.create))
	a.route("DELETE /topics/{topic}", a.onTopic(protocol.OpDeleteTopic, a.remove))
	a.route("GET /topics/{topic}/info", a.onTopic(protocol.OpTopicInfo, a.topicInfo))
	a.route("PATCH /topics/{topic}", a.onTopic(protocol.OpTruncate, a.truncate))
	a.route("POST /topics/{topic}", a.onTopic(protocol.OpProduce, a.produce))
	a.route("GET /topics/{topic}", a.onTopic(protocol.OpConsume, a.consume))
	a.route("GET /ws/topics", a.watchTopics)
}

// routeOps registers what operators use: health, readiness, metrics, docs
// and, when asked, pprof.
func (a *API) routeOps() {
	cfg := a.cfg
	a.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if cfg.Docs {
			http.Redirect(w, r, "/docs/", http.StatusFound)
			return
		}
		http.NotFound(w, r)
	})
	a.route("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	a.route("GET /readyz", a.readyz)
	// open serves h to anyone, or with Auth and AuthMetrics to admins.
	open := func(h http.Handler) http.Handler {
		if cfg.Auth != nil && cfg.AuthMetrics {
			return a.adminOnly(h)
		}
		return h
	}
	if a.metrics != nil {
		a.route("GET /metrics", open(a.metrics.handler).ServeHTTP)
	}
	if cfg.Docs {
		a.mux.Handle("GET /docs/", open(docs.Handler()))
	}
	if cfg.Pprof {
		a.routePprof()
	}
}

// GET /readyz
func (a *API) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	st := a.state.Load()
	if st == nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("recovering\n"))
		return
	}
	if st.broker.Err() != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("binary port down\n"))
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// routePprof registers net/http/pprof. Profiles show the command line and
// memory: admins only once tokens are on.
func (a *API) routePprof() {
	prof := func(h http.HandlerFunc) http.Handler {
		if a.cfg.Auth != nil {
			return a.adminOnly(h)
		}
		return h
	}
	a.mux.Handle("/debug/pprof/", prof(pprof.Index))
	a.mux.Handle("/debug/pprof/cmdline", prof(pprof.Cmdline))
	a.mux.Handle("/debug/pprof/profile", prof(pprof.Profile))
	a.mux.Handle("/debug/pprof/symbol", prof(pprof.Symbol))
	a.mux.Handle("/debug/pprof/trace", prof(pprof.Trace))
}

// route registers an API route, timed for the metrics.
func (a *API) route(pattern string, h http.HandlerFunc) {
	a.routes = append(a.routes, pattern)
	if a.metrics != nil {
		h = a.metrics.timed(pattern, h)
	}
	a.mux.Handle(pattern, h)
}

// Routes returns the API routes as "METHOD /path", in registration order:
// the REST API, health checks and, if served, /metrics. The docs and pprof
// pages are not part of the API.
func (a *API) Routes() []string { return append([]string(nil), a.routes...) }

// Ready makes the REST API and /readyz answer and the haraqa metrics
// flow: the REST API is served through b's service (broker.Service), the
// request path the binary port serves.
func (a *API) Ready(b *broker.Broker) {
	a.state.Store(&state{svc: b.Service(), broker: b})
}

// ObserveRequest records a binary protocol request's latency; pass it as
// broker.Config.ObserveRequest. It does nothing without Config.Prometheus.
func (a *API) ObserveRequest(op protocol.Op, waited bool, took time.Duration) {
	if a.metrics != nil {
		a.metrics.observeRequest(op, waited, took)
	}
}

// ObserveFsync records a segment fsync's latency; pass it as
// storage.Options.OnFsync. It does nothing without Config.Prometheus.
func (a *API) ObserveFsync(took time.Duration) {
	if a.metrics != nil {
		a.metrics.fsync.Observe(took.Seconds())
	}
}

// corsExposed are the response headers a browser script may read.
const corsExposed = "X-Sizes, X-Errors, X-Id, X-Oldest, X-Committed"

// ServeHTTP serves the routes above.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a.cfg.CORS {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", "*")
		h.Set("Access-Control-Expose-Headers", corsExposed)
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			// Echo what the preflight asks for, as the original server does
			// (X-Consumer-Group and whatever a client adds); the routes and
			// tokens still decide.
			h.Set("Access-Control-Allow-Methods", r.Header.Get("Access-Control-Request-Method"))
			allow := "Authorization, Content-Type, X-Sizes, X-Id, X-Limit, X-Consumer-Group, X-Topics"
			if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
				allow = req
			}
			h.Set("Access-Control-Allow-Headers", allow)
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	a.mux.ServeHTTP(&errorWriter{ResponseWriter: w}, r)
}

// errorWriter gives the mux's own error responses (unknown route, method
// not allowed) the shape of every API error: the X-Errors header and the
// same one line as the body.
type errorWriter struct {
	http.ResponseWriter
	replaced bool // the body was written here; drop the mux's
}

func (w *errorWriter) WriteHeader(code int) {
	h := w.Header()
	if code < 400 || h.Get("X-Errors") != "" {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	msg := strings.ToLower(http.StatusText(code))
	h.Set("X-Errors", msg)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Del("Content-Length")
	w.ResponseWriter.WriteHeader(code)
	_, _ = w.ResponseWriter.Write([]byte(msg + "\n"))
	w.replaced = true
}

func (w *errorWriter) Write(b []byte) (int, error) {
	if w.replaced {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *errorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
