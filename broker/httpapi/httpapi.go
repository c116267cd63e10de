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
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"net/url"
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
	// flag, default true): a page of any origin may read (GET, HEAD).
	CORS bool
	// CORSOrigins are the origins ("https://app.example.com", or "*" for
	// any) whose pages may also change or delete (POST, PUT, PATCH,
	// DELETE; the -cors-origins flag, comma-separated, default none). A
	// request of any other method that carries an Origin header naming
	// neither one of these nor the server itself (its Host) is refused
	// with 403, CORS on or off, so that no page can write through a
	// browser: a form's simple POST included.
	CORSOrigins []string
	// Pprof serves net/http/pprof under /debug/pprof/ (default false).
	Pprof bool
	// MaxBodyBytes bounds a produce request's body (default 16 MiB).
	MaxBodyBytes int64
	// DefaultLimit is the message limit of a consume that gives none;
	// -1 (the default) means no limit beyond the byte bound.
	DefaultLimit int
	// MaxConsumeBytes bounds the batch bytes one consume reads (default
	// 4 MiB), and the decoded message bytes of its response: no message is
	// added that would pass it, within a batch as between batches. The
	// first message is served whole even when larger; a batch is decoded
	// whole, up to 64 MiB.
	MaxConsumeBytes int64
	// MaxBufferedBytes bounds the bytes the HTTP port's requests hold at
	// once: bodies, the batches built from them, consumes' batches and the
	// bodies they decode (the -max-http-buffered-bytes flag; default
	// DefaultMaxBufferedBytes(0), 256 MiB; the server's default is a quarter
	// of -max-buffered-bytes, at least 64 MiB). They count against the
	// server's -max-buffered-bytes too. A request that does not fit waits
	// at most BudgetWait, then is answered 429 with Retry-After.
	MaxBufferedBytes int64
	// BudgetWait bounds how long a request waits for MaxBufferedBytes
	// (default DefaultBudgetWait, 1 s).
	BudgetWait time.Duration
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
	// MaxMetricsRate bounds the /metrics responses sent a second, all
	// clients together (default DefaultMaxMetricsRate, 4, with a burst of
	// twice as many); one more is answered 429 with Retry-After. A scrape
	// copies the whole text to its client: unbounded, a few clients in a
	// loop would take the cores from the other tenants.
	MaxMetricsRate float64
	// RefusalRate paces the refused requests (401, 403, 429) of one client
	// address, in refusals a second, a second's worth at once (default
	// DefaultRefusalRate, 100; negative: no bound): past it each refusal's
	// answer waits until the next is due, at most 2 s (refusal.go), so a
	// client looping on requests it may not make, which needs no token,
	// takes a bounded share of the server. Its other requests are not held.
	RefusalRate float64
	// Auth, when set, makes every route but /healthz and /readyz need an
	// "Authorization: Bearer TOKEN" header whose token holds the right the
	// route needs on its topic (401 without one or with a wrong one, 403
	// when not allowed). /metrics and /docs are open unless AuthMetrics;
	// pprof then needs a token with admin on every topic (pattern "*").
	// Nil (the default): no tokens.
	Auth *auth.Authorizer
	// AuthMetrics, with Auth, makes /metrics need a token with the
	// metrics right, and show only the per-topic and per-group series of
	// the topics that right is held on; /docs then needs a valid token
	// (the -auth-metrics flag, default true).
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

// DefaultConfig returns the defaults: everything on but pprof, and with
// Auth, /metrics behind the metrics right.
func DefaultConfig() Config {
	return Config{
		Prometheus:       true,
		Docs:             true,
		CORS:             true,
		AuthMetrics:      true,
		MaxBodyBytes:     protocol.DefaultMaxFrameSize,
		DefaultLimit:     -1,
		MaxConsumeBytes:  4 << 20,
		MaxBufferedBytes: DefaultMaxBufferedBytes(0),
		BudgetWait:       DefaultBudgetWait,
		MaxMessages:      10000,
		MaxWait:          time.Minute,
		MaxWatchers:      DefaultMaxWatchers,
		MaxWatchTopics:   DefaultMaxWatchTopics,
		MaxMetricsRate:   DefaultMaxMetricsRate,
		RefusalRate:      DefaultRefusalRate,
	}
}

// API is the HTTP port's handler. Its routes, besides the REST API:
//
//	GET /healthz        200 while the process serves (liveness)
//	GET /readyz         503, saying why, while the volumes are recovered, if the binary port died, or (a cluster member) until it is in step with its cluster and in the in-sync set of every topic it holds; 200 then
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

	budget *httpBudget // Config.MaxBufferedBytes

	refusals      *refusalPacer // nil: Config.RefusalRate < 0
	refusalsPaced atomic.Int64  // refusals whose answer waited
}

type state struct {
	svc    *service.Service // the request path both ports share
	broker *broker.Broker
}

// New returns the handler; call Ready once the store is open and the broker
// listens. Zero numeric fields of cfg take their defaults.
func New(cfg Config) *API {
	cfg.fillDefaults()
	a := &API{cfg: cfg, mux: http.NewServeMux(), budget: newHTTPBudget(cfg.MaxBufferedBytes, cfg.BudgetWait)}
	if cfg.RefusalRate > 0 {
		a.refusals = newRefusalPacer(cfg.RefusalRate)
	}
	if cfg.Prometheus {
		a.metrics = newMetrics(a)
	}
	a.routeREST()
	a.routeCluster()
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
	if c.MaxBufferedBytes <= 0 {
		c.MaxBufferedBytes = def.MaxBufferedBytes
	}
	if c.BudgetWait <= 0 {
		c.BudgetWait = def.BudgetWait
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
	if c.MaxMetricsRate <= 0 {
		c.MaxMetricsRate = def.MaxMetricsRate
	}
	if c.RefusalRate == 0 {
		c.RefusalRate = def.RefusalRate
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
	// With Auth and AuthMetrics, /metrics needs the metrics right and
	// shows the topics it is held on; /docs needs a valid token.
	need := func(f func(*auth.Grant) bool) func(*auth.Grant) bool {
		if cfg.AuthMetrics {
			return f
		}
		return nil
	}
	if a.metrics != nil {
		a.route("GET /metrics", a.open(need(metricsToken), a.serveMetrics))
	}
	if cfg.Docs {
		docsH := docs.Handler()
		a.mux.Handle("GET /docs/", a.open(need(anyToken), func(w http.ResponseWriter, r *http.Request, _ *auth.Grant) {
			docsH.ServeHTTP(w, r)
		}))
	}
	if cfg.Pprof {
		a.routePprof()
	}
}

// GET /readyz: 503 with the reason (in the body and X-Errors), or 200.
func (a *API) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	notReady := func(why string) {
		w.Header().Set("X-Errors", why) // so that errorWriter keeps the body
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintln(w, why)
	}
	st := a.state.Load()
	if st == nil {
		notReady("recovering")
		return
	}
	if st.broker.Err() != nil {
		notReady("binary port down")
		return
	}
	if err := st.svc.Ready(); err != nil {
		notReady(err.Error())
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// open serves h to anyone when need is nil, else through granted.
func (a *API) open(need func(*auth.Grant) bool, h func(http.ResponseWriter, *http.Request, *auth.Grant)) http.HandlerFunc {
	if need == nil || a.cfg.Auth == nil {
		return func(w http.ResponseWriter, r *http.Request) { h(w, r, nil) }
	}
	return a.granted(need, h)
}

// serveMetrics answers GET /metrics from a snapshot, as much of it as g
// may see (all of it for a nil g).
func (a *API) serveMetrics(w http.ResponseWriter, r *http.Request, g *auth.Grant) {
	if !a.metrics.rate.allow(time.Now()) {
		w.Header().Set("Retry-After", "1")
		a.fail(w, fmt.Errorf("%w: /metrics is served at most %g times a second, all clients together (-max-metrics-rate)",
			ErrMetricsRate, a.cfg.MaxMetricsRate))
		return
	}
	a.metrics.snapshot(a.state.Load()).write(w, g)
}

// routePprof registers net/http/pprof. Profiles show the command line,
// memory and every tenant's work: once tokens are on, they need admin on
// every topic (a rule whose pattern is "*").
func (a *API) routePprof() {
	prof := func(h http.HandlerFunc) http.Handler {
		return a.open(adminOnAll, func(w http.ResponseWriter, r *http.Request, _ *auth.Grant) { h(w, r) })
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

// ErrCrossOrigin answers a request that would change or delete, sent by
// a page of an origin not in Config.CORSOrigins (403).
var ErrCrossOrigin error = &apiError{protocol.CodeForbidden,
	"httpapi: forbidden: a page of another origin may only read (GET, HEAD) unless its origin is in -cors-origins"}

// ServeHTTP serves the routes above.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	origin := r.Header.Get("Origin")
	asked := r.Header.Get("Access-Control-Request-Method")
	preflight := a.cfg.CORS && r.Method == http.MethodOptions && asked != ""
	if !preflight {
		asked = r.Method
	}
	// A browser sends Origin with every request a page makes across
	// origins, a form's simple POST included, which it sends without a
	// preflight: such a request is refused here rather than run with its
	// answer hidden from the page.
	if origin != "" && !safeMethod(asked) && !a.mayWrite(origin, r.Host) {
		a.fail(w, ErrCrossOrigin)
		return
	}
	if a.cfg.CORS {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", "*")
		h.Set("Access-Control-Expose-Headers", corsExposed)
		if preflight {
			// Echo what the preflight asks for, as the original server does
			// (X-Consumer-Group and whatever a client adds): it passed the
			// origin check above, and the routes and tokens still decide.
			h.Set("Access-Control-Allow-Methods", asked)
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
	ew := &errorWriter{ResponseWriter: w}
	a.mux.ServeHTTP(ew, r)
	if a.refusals != nil && refused(ew.status) {
		// The answer is still in the connection's buffer: it leaves once
		// this returns (refusal.go).
		if d := a.refusals.delay(r.RemoteAddr, time.Now()); d > 0 {
			a.refusalsPaced.Add(1)
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
			}
		}
	}
}

// safeMethod reports whether method only reads: a page of any origin may
// send it.
func safeMethod(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions
}

// mayWrite reports whether a page of origin may change or delete: origin
// is in Config.CORSOrigins (or it holds "*"), or it is the server's own,
// host, as the API docs' pages are.
func (a *API) mayWrite(origin, host string) bool {
	for _, o := range a.cfg.CORSOrigins {
		if o == "*" || strings.EqualFold(o, origin) {
			return true
		}
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, host)
}

// ParseOrigins parses the -cors-origins flag: comma-separated origins,
// each scheme://host[:port] as a browser sends it in Origin, or "*" for
// every origin. An error wraps ErrBadOrigin.
func ParseOrigins(list string) ([]string, error) {
	var out []string
	for o := range strings.SplitSeq(list, ",") {
		if o = strings.TrimSpace(o); o == "" {
			continue
		}
		u, err := url.Parse(o)
		if o != "*" && (err != nil || u.Scheme == "" || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.User != nil) {
			return nil, fmt.Errorf("%w: %q: want scheme://host[:port], as browsers send it, or *", ErrBadOrigin, o)
		}
		out = append(out, o)
	}
	return out, nil
}

// ErrBadOrigin: an entry of -cors-origins is not an origin.
var ErrBadOrigin = errors.New("httpapi: bad -cors-origins entry")

// errorWriter gives the mux's own error responses (unknown route, method
// not allowed) the shape of every API error: the X-Errors header and the
// same one line as the body.
type errorWriter struct {
	http.ResponseWriter
	replaced bool // the body was written here; drop the mux's
	status   int  // the status written; 0: none (200 if a body was)
}

func (w *errorWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
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
