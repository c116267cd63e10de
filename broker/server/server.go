// Package server assembles a haraqa server from its parts, in one place:
// it opens and recovers the volumes (storage), serves the binary protocol
// (broker) and the HTTP port (httpapi), sets the Go runtime's memory limit
// and holds the GC ballast, and shuts them down in order. Given the
// servers sharing the topics (Config.Peers), it has the HTTP port redirect
// requests for their topics to them (locator.go). The haraqa binary,
// haraqa-bench's embedded server and the brokertest helper all start
// servers through it; ParseFlags maps the haraqa binary's command line
// onto a Config.
//
// Start-up order: the HTTP port listens first, so /healthz answers while
// the volumes are recovered (which can take a while after a crash); then
// the store opens, the broker listens, and /readyz and the REST API turn
// on. Shutdown runs the other way: the broker refuses new requests and
// answers those in flight, the HTTP port drains, then the store closes.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/auth"
	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/broker/httpapi"
	"github.com/haraqa/haraqa/broker/replica"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// ErrInvalidConfig is wrapped by every error of Config.Validate, including
// those of the storage options and the broker config it checks.
var ErrInvalidConfig = errors.New("server: invalid configuration")

// ErrState is returned by Start on a server already started, and by
// Shutdown on one never started.
var ErrState = errors.New("server: not in a state to do that")

// Config configures a Server. Start from DefaultConfig.
type Config struct {
	// Storage says where the topics live and how they are written
	// (volumes, entries per segment, fsync policy, retention). Its
	// OnFsync, when set, is called beside the HTTP port's fsync metric.
	Storage storage.Options
	// Broker configures the binary protocol port (address, frame and
	// consume limits, event loops). Its ObserveRequest, when set, is
	// called beside the HTTP port's request metric.
	Broker broker.Config
	// HTTP says what the HTTP port serves. Its MaxBufferedBytes, when
	// negative (DefaultConfig's), is httpapi.DefaultMaxBufferedBytes of
	// Broker.MaxBufferedBytes: a quarter of it, at least 64 MiB.
	HTTP httpapi.Config
	// HTTPAddr is the HTTP port's address, host:port (default
	// "127.0.0.1:4353"; port 0 picks a free one, see Server.HTTPAddr).
	// Empty: no HTTP port.
	HTTPAddr string
	// HTTPReadHeaderTimeout bounds how long a client may take to send a
	// request's headers on the HTTP port (default 10 s).
	HTTPReadHeaderTimeout time.Duration
	// HTTPReadTimeout bounds how long a client may take to send a whole
	// request, body included (default 1 minute).
	HTTPReadTimeout time.Duration
	// HTTPIdleTimeout closes a keep-alive HTTP connection idle this long
	// (default 2 minutes).
	HTTPIdleTimeout time.Duration
	// MaxHTTPConns bounds the HTTP port's open connections, keep-alives
	// included (default DefaultMaxHTTPConns(): an eighth of the descriptor
	// limit less 64, at most 65536; 0 means that default too), so that
	// they cannot take the descriptors of the binary port and the segment
	// files. A connection past it is answered 503 Service Unavailable,
	// naming the limit, and closed (httpconns.go).
	MaxHTTPConns int
	// HTTPMaxHeaderBytes bounds a request's headers (default 64 KiB).
	HTTPMaxHeaderBytes int
	// TLSCertFile and TLSKeyFile, when set, make both ports speak TLS
	// only, presenting this PEM certificate (chain) and key (default
	// "": plaintext). Both or neither. They are read at Start, which
	// fails if they cannot be, and again on ReloadTLS and whenever their
	// modification time changes (see TLSReloadCheck); a reload that fails
	// keeps the previous certificate and logs why.
	TLSCertFile string
	TLSKeyFile  string
	// TLSClientCAFile, when set with TLSCertFile, is a PEM file of the
	// certificate authorities whose client certificates both ports
	// require (mutual TLS); reloaded with the certificate (default "":
	// no client certificates asked for).
	TLSClientCAFile string
	// TLSReloadCheck is how often the TLS files' modification times are
	// checked (default DefaultTLSReloadCheck, 5 s).
	TLSReloadCheck time.Duration
	// TLS, when set and TLSCertFile is not, is both ports' TLS
	// configuration as given, never reloaded: for a certificate made in
	// memory (haraqa-bench -embedded -tls). Default nil.
	TLS *tls.Config
	// Ballast is the size in bytes of a GC ballast: an allocation never
	// touched, which costs address space, not memory, and raises the heap
	// size the GC paces itself against, so small heaps are collected less
	// often (default 0, as the haraqa binary's -ballast flag). The runtime
	// counts it as heap in use, so it counts toward MemoryLimit: Validate
	// refuses a ballast of half the limit or more. MemoryLimit serves the
	// same end without that cost.
	Ballast int64
	// MemoryLimit is the Go runtime's soft memory limit in bytes
	// (runtime/debug.SetMemoryLimit, what GOMEMLIMIT sets), set by Start
	// and put back by Shutdown: the garbage collector runs harder as the
	// process nears it, so the garbage of hostile or merely busy clients
	// is collected before it takes the machine. 0 (the default): the
	// runtime's own (GOMEMLIMIT, or none). -1: DefaultMemoryLimit of
	// Broker.MaxBufferedBytes, unless GOMEMLIMIT is set (the haraqa
	// binary's default).
	MemoryLimit int64
	// AuthFile is the path of an auth file (see package broker/auth): when
	// set, every request on both ports needs a token it holds, with the
	// right the request needs on its topic. Read by New, again by Reload.
	// Empty (the default): no tokens, everything allowed.
	AuthFile string
	// Peers are the servers that share the topics (the -peers flag), this
	// one among them. With an HTTP port, New builds HTTP.Peers from them:
	// a Locator that asks the others over the binary protocol (package
	// client) whether they have a topic, so that the HTTP port redirects
	// requests for their topics, and that knows this server in the list
	// by Broker.Addr. HTTP.Peers must then be nil. Default nil.
	Peers []Peer
	// Cluster, when set, makes the Peers one cluster of replicated topics
	// (the -cluster flag, or -replicas over 1): their metadata in a Raft
	// group on each server's cluster port, each topic on Replicas of
	// them, led by one (docs/replication.md). HTTP requests for a topic
	// another server serves are redirected by the cluster, not by Peers.
	Cluster *ClusterConfig
	// Logger receives the server's logs and is handed to the storage,
	// broker and HTTP parts that have none of their own (default
	// slog.Default()).
	Logger *slog.Logger
}

// DefaultConfig returns the defaults for a server on volumes: the
// storage, broker and HTTP defaults, listening on 127.0.0.1.
func DefaultConfig(volumes ...string) Config {
	hc := httpapi.DefaultConfig()
	hc.MaxBufferedBytes = -1 // derived from Broker.MaxBufferedBytes by New
	return Config{
		Storage:               storage.DefaultOptions(volumes...),
		Broker:                broker.DefaultConfig(),
		HTTP:                  hc,
		HTTPAddr:              "127.0.0.1:4353",
		HTTPReadHeaderTimeout: 10 * time.Second,
		HTTPReadTimeout:       time.Minute,
		HTTPIdleTimeout:       2 * time.Minute,
		HTTPMaxHeaderBytes:    64 << 10,
		MaxHTTPConns:          DefaultMaxHTTPConns(),
	}
}

// Validate checks the configuration and its parts, and hands the Logger to
// the parts that have none.
func (c *Config) Validate() error {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Storage.Logger == nil {
		c.Storage.Logger = c.Logger
	}
	if c.Broker.Logger == nil {
		c.Broker.Logger = c.Logger
	}
	if c.HTTP.Logger == nil {
		c.HTTP.Logger = c.Logger
	}
	switch {
	case (c.TLSCertFile == "") != (c.TLSKeyFile == ""):
		return fmt.Errorf("%w: TLS needs both a certificate and a key file", ErrInvalidConfig)
	case c.TLSClientCAFile != "" && c.TLSCertFile == "" && c.TLS == nil:
		return fmt.Errorf("%w: a client CA needs TLS: give a certificate and a key", ErrInvalidConfig)
	case c.TLSReloadCheck < 0:
		return fmt.Errorf("%w: TLS reload check %s: want 0 (the default) or more", ErrInvalidConfig, c.TLSReloadCheck)
	case c.TLSReloadCheck == 0:
		c.TLSReloadCheck = DefaultTLSReloadCheck
	}
	if err := c.checkCluster(); err != nil {
		return err
	}
	if len(c.Peers) > 0 && c.HTTP.Peers != nil {
		return fmt.Errorf("%w: both Peers and HTTP.Peers: give one", ErrInvalidConfig)
	}
	if c.Ballast < 0 {
		return fmt.Errorf("%w: ballast %d bytes: want 0 or more", ErrInvalidConfig, c.Ballast)
	}
	if c.MemoryLimit < -1 {
		return fmt.Errorf("%w: memory limit %d bytes: want -1 (derived), 0 (the runtime's) or more", ErrInvalidConfig, c.MemoryLimit)
	}
	if limit := c.memoryLimit(); limit > 0 && c.Ballast >= limit/2 {
		return fmt.Errorf("%w: a ballast of %d bytes counts toward the memory limit of %d bytes: want under half of it (-ballast 0, or a larger -memory-limit)", ErrInvalidConfig, c.Ballast, limit)
	}
	if c.HTTPReadHeaderTimeout <= 0 {
		c.HTTPReadHeaderTimeout = 10 * time.Second
	}
	if c.HTTPReadTimeout <= 0 {
		c.HTTPReadTimeout = time.Minute
	}
	if c.HTTPIdleTimeout <= 0 {
		c.HTTPIdleTimeout = 2 * time.Minute
	}
	if c.HTTPMaxHeaderBytes <= 0 {
		c.HTTPMaxHeaderBytes = 64 << 10
	}
	switch {
	case c.MaxHTTPConns < 0:
		return fmt.Errorf("%w: max HTTP conns %d: want 0 (the default) or more", ErrInvalidConfig, c.MaxHTTPConns)
	case c.MaxHTTPConns == 0:
		c.MaxHTTPConns = DefaultMaxHTTPConns()
	}
	c.fitCluster()
	if err := c.Storage.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := c.Broker.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// Server is one haraqa server: its store, its broker and its HTTP port.
type Server struct {
	cfg Config // as given, with defaults filled in
	run Config // cfg with the HTTP port's observers wired in
	log *slog.Logger
	api *httpapi.API // nil without an HTTP port

	mu      sync.Mutex // guards the fields below and the order of Start and Shutdown
	started bool
	stopped bool
	// noHandOff: Shutdown leaves the cluster to find this member gone,
	// as after a crash (tests: a member that did not hand off).
	noHandOff bool
	hl        net.Listener
	hs        *http.Server
	httpDone  chan error         // the HTTP server's Serve result
	httpStop  context.CancelFunc // ends every HTTP request's context (long polls) at shutdown
	store     *storage.Store
	broker    *broker.Broker
	ballast   []byte
	oldLimit  int64            // the runtime's memory limit before Start set one; -1: not set
	auth      *auth.Authorizer // nil without Config.AuthFile
	peers     *peerLocator     // nil without Config.Peers or an HTTP port
	repl      *replica.Manager // nil without Config.Cluster
	node      *cluster.Node    // nil without Config.Cluster
	certs     *certs           // nil unless TLSCertFile is set
	tls       *tls.Config      // both ports' TLS configuration; nil: plaintext
	tlsStop   chan struct{}    // ends certs.watch
	tlsDone   chan struct{}    // closed when it has
}

// DefaultMemoryLimit is the memory limit derived from a broker's
// MaxBufferedBytes: what the broker may buffer before it closes clients
// that do not read (the budget and a quarter) and memoryHeadroom for the
// rest of the process (storage indexes and caches, goroutine stacks,
// list and validation scratch). 0 (no limit) when the budget is 0 (no
// bound).
func DefaultMemoryLimit(maxBufferedBytes int64) int64 {
	if maxBufferedBytes <= 0 {
		return 0
	}
	return maxBufferedBytes + maxBufferedBytes/4 + memoryHeadroom
}

// memoryHeadroom is what DefaultMemoryLimit adds to the broker's buffers.
const memoryHeadroom = 128 << 20

// memoryLimit is the limit Start sets: 0 for none.
func (c *Config) memoryLimit() int64 {
	if c.MemoryLimit != -1 {
		return c.MemoryLimit
	}
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	return DefaultMemoryLimit(c.Broker.MaxBufferedBytes)
}

// New checks cfg and returns a server; Start serves it.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, run: cfg, log: cfg.Logger}
	if cfg.AuthFile != "" {
		a, err := auth.Load(cfg.AuthFile)
		if err != nil {
			return nil, fmt.Errorf("%w: -auth-file: %w", ErrInvalidConfig, err)
		}
		s.auth = a
		s.run.Broker.Auth, s.run.HTTP.Auth = a, a
		cfg.Logger.Info("tokens required on both ports", "auth_file", cfg.AuthFile, "rules", a.Rules().Len())
	}
	if cfg.HTTPAddr != "" {
		if len(cfg.Peers) > 0 && cfg.Cluster == nil {
			s.peers = newPeerLocator(cfg.Peers, cfg.Broker.Addr, cfg.Logger)
			s.run.HTTP.Peers = s.peers
		}
		if s.run.HTTP.MaxBufferedBytes < 0 {
			s.run.HTTP.MaxBufferedBytes = httpapi.DefaultMaxBufferedBytes(s.run.Broker.MaxBufferedBytes)
		}
		s.api = httpapi.New(s.run.HTTP)
		s.run.Storage.OnFsync = both(cfg.Storage.OnFsync, s.api.ObserveFsync)
		observe := s.api.ObserveRequest
		if prev := cfg.Broker.ObserveRequest; prev != nil {
			observe = func(op protocol.Op, waited bool, took time.Duration) {
				prev(op, waited, took)
				s.api.ObserveRequest(op, waited, took)
			}
		}
		s.run.Broker.ObserveRequest = observe
	}
	return s, nil
}

// both returns a function calling f, if set, then g.
func both(f, g func(time.Duration)) func(time.Duration) {
	if f == nil {
		return g
	}
	return func(d time.Duration) { f(d); g(d) }
}

// Start listens on the HTTP port, opens and recovers the volumes, and
// serves the binary protocol. It returns once both ports listen, or with
// the error that prevented it, having released what it had taken.
func (s *Server) Start() (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return fmt.Errorf("%w: start: already started", ErrState)
	}
	s.started = true
	defer func() {
		if err != nil {
			s.stopped = true
			err = errors.Join(err, s.closeLocked(context.Background()))
		}
	}()
	s.ballast = make([]byte, s.cfg.Ballast)
	s.oldLimit = -1
	if limit := s.cfg.memoryLimit(); limit > 0 {
		s.oldLimit = debug.SetMemoryLimit(limit)
	}
	if err := s.startTLS(); err != nil {
		return err
	}
	if err := s.listenHTTP(); err != nil {
		return err
	}
	begun := time.Now()
	if s.store, err = storage.Open(s.run.Storage); err != nil {
		return err
	}
	st := s.store.Stats()
	s.log.Info("volumes open", "volumes", strings.Join(s.cfg.Storage.Volumes, ","),
		"topics", len(s.store.ListTopics("")), "repairs", st.Repairs, "took", time.Since(begun).Round(time.Millisecond))
	bc := s.run.Broker
	if s.tls != nil {
		bc.TLS = s.tls // else Broker.TLS as given
	}
	if s.cfg.Cluster != nil {
		s.repl = s.newReplicas()
		bc.Replication = s.repl.Replication()
		bc.ClusterSecret = s.cfg.Cluster.Token
	}
	if s.broker, err = broker.New(s.store, bc); err != nil {
		return err
	}
	if err := s.broker.Start(); err != nil {
		s.broker = nil // never started: nothing to shut down
		return portInUse(err, "-tcp", "TCP_PORT", s.cfg.Broker.Addr)
	}
	if s.cfg.Cluster != nil {
		if err := s.startCluster(); err != nil {
			return err
		}
	}
	if s.api != nil {
		s.api.Ready(s.broker)
	}
	attrs := []any{"tcp", s.broker.Addr().String()}
	if s.hl != nil {
		attrs = append(attrs, "http", s.hl.Addr().String())
	}
	if s.oldLimit >= 0 {
		attrs = append(attrs, "memory_limit", debug.SetMemoryLimit(-1))
	}
	s.log.Info("serving", append(attrs, "fsync", s.store.FsyncPolicy().String(), "tls", s.tls != nil)...)
	s.warnOpen()
	return nil
}

// warnOpen logs one warning when a port listens beyond loopback and no
// auth file is given: anyone who reaches it may read, write and delete
// every topic.
func (s *Server) warnOpen() {
	if s.auth != nil {
		return
	}
	var open []string
	for _, a := range []net.Addr{s.broker.Addr(), s.hlAddr()} {
		if a == nil {
			continue
		}
		if ta, ok := a.(*net.TCPAddr); ok && !ta.IP.IsLoopback() {
			open = append(open, a.String())
		}
	}
	if len(open) > 0 {
		s.log.Warn("listening beyond loopback without -auth-file: anyone who reaches these ports can read, write and delete every topic; "+
			"create tokens with 'hrqa token new' and start with -auth-file FILE, or listen on 127.0.0.1",
			"addrs", strings.Join(open, ","))
	}
}

// hlAddr is the HTTP listener's address, nil without one. mu must be held.
func (s *Server) hlAddr() net.Addr {
	if s.hl == nil {
		return nil
	}
	return s.hl.Addr()
}

// Reload reads the auth file (Config.AuthFile) and the TLS files
// (TLSCertFile, TLSKeyFile, TLSClientCAFile) again, those that are set.
// On an error what is in force stays, and the error (which names the file
// and line, never a token or a key) is logged and returned. New rules
// apply to HTTP requests and binary connections that say hello from then
// on; a connection keeps the rights of its last hello. A new certificate
// serves new connections; open ones keep theirs.
func (s *Server) Reload() error {
	var errs []error
	if s.auth != nil {
		if err := s.auth.Reload(); err != nil {
			s.log.Error("auth file not reloaded; the previous rules stay in force", "err", err)
			errs = append(errs, err)
		} else {
			s.log.Info("auth file reloaded", "auth_file", s.auth.Path(), "rules", s.auth.Rules().Len())
		}
	}
	if err := s.ReloadTLS(); err != nil {
		s.log.Error("TLS files not reloaded; the previous certificate stays in force", "err", err)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// startTLS loads the TLS files, if any, and watches them for changes.
// mu must be held.
func (s *Server) startTLS() error {
	if s.cfg.TLSCertFile == "" {
		s.tls = s.cfg.TLS
		return nil
	}
	c, err := loadCerts(s.cfg.TLSCertFile, s.cfg.TLSKeyFile, s.cfg.TLSClientCAFile, s.log)
	if err != nil {
		return err
	}
	s.certs, s.tls = c, c.config()
	s.tlsStop, s.tlsDone = make(chan struct{}), make(chan struct{})
	go c.watch(s.cfg.TLSReloadCheck, s.tlsStop, s.tlsDone)
	return nil
}

// ReloadTLS reads the TLS files again (Reload, on SIGHUP, calls it): new connections on both ports get the new certificate and
// client CAs, established ones keep theirs. On failure the previous
// configuration stays in force and the error says why. Without TLS files
// it does nothing.
func (s *Server) ReloadTLS() error {
	s.mu.Lock()
	c := s.certs
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.reload()
}

// listenHTTP starts the HTTP port, if there is one. mu must be held.
func (s *Server) listenHTTP() error {
	if s.api == nil {
		return nil
	}
	hl, err := net.Listen("tcp", s.cfg.HTTPAddr)
	if err != nil {
		return portInUse(fmt.Errorf("server: http port: %w", err), "-http", "HTTP_PORT", s.cfg.HTTPAddr)
	}
	s.hl = hl
	base, stop := context.WithCancel(context.Background())
	s.httpStop = stop
	s.hs = &http.Server{
		Handler:           s.api,
		ReadHeaderTimeout: s.cfg.HTTPReadHeaderTimeout,
		ReadTimeout:       s.cfg.HTTPReadTimeout,
		IdleTimeout:       s.cfg.HTTPIdleTimeout,
		MaxHeaderBytes:    s.cfg.HTTPMaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          log.New(httpErrorLog{s.log}, "", 0),
	}
	s.httpDone = make(chan error, 1)
	var served net.Listener = newLimitListener(hl, s.cfg.MaxHTTPConns, s.tls, s.log)
	if s.tls != nil {
		// Handshakes run in each connection's goroutine, bounded by the
		// read timeouts; no ALPN: HTTP/1.1, as on a plaintext port.
		served = tls.NewListener(served, s.tls)
	}
	go func() {
		err := s.hs.Serve(served)
		if !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http port stopped", "err", err)
		}
		s.httpDone <- err
	}()
	return nil
}

// httpErrorLog routes net/http's error log to the server's logger: failed
// TLS handshakes (a scanner, a client without the CA) at debug level, as
// they come once per connection from anyone who can reach the port; the
// rest as warnings.
type httpErrorLog struct{ l *slog.Logger }

func (h httpErrorLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if strings.HasPrefix(msg, "http: TLS handshake error") {
		h.l.Debug(msg)
	} else {
		h.l.Warn(msg)
	}
	return len(p), nil
}

// Run starts the server, serves until ctx is done, then shuts it down,
// giving the requests in flight up to timeout to finish. If the binary
// port dies first (broker.ErrEngineStopped), Run shuts down too and
// returns that error, so that the process exits non-zero and is restarted.
func (s *Server) Run(ctx context.Context, timeout time.Duration) error {
	if err := s.Start(); err != nil {
		return err
	}
	var dead error
	select {
	case <-ctx.Done():
	case <-s.Broker().Dead():
		dead = s.Broker().Err()
		s.log.Error("the binary port stopped; shutting down so that the server is restarted", "err", dead)
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return errors.Join(dead, s.Shutdown(sctx))
}

// Addr is the binary protocol's address, with the real port when
// Config.Broker.Addr asked for port 0; nil before Start.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broker == nil {
		return nil
	}
	return s.broker.Addr()
}

// HTTPAddr is the HTTP port's address, with the real port when
// Config.HTTPAddr asked for port 0; nil before Start or without an HTTP
// port.
func (s *Server) HTTPAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hl == nil {
		return nil
	}
	return s.hl.Addr()
}

// Store is the server's store, nil before Start. It stays the server's:
// Shutdown closes it.
func (s *Server) Store() *storage.Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.store
}

// Broker is the server's broker, nil before Start.
func (s *Server) Broker() *broker.Broker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.broker
}

// Config is the configuration in force, with the defaults Validate filled
// in. Starting a new server with it serves the same volumes.
func (s *Server) Config() Config { return s.cfg }

// Shutdown stops the server gracefully: the broker refuses new requests
// and answers those in flight, the HTTP port stops accepting and waits for
// its requests, then the store closes. When ctx ends first, what is left
// is closed at once. A second call returns nil.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		return fmt.Errorf("%w: shutdown: never started", ErrState)
	}
	if s.stopped {
		return nil
	}
	s.stopped = true
	if err := s.closeLocked(ctx); err != nil {
		return err
	}
	s.log.Info("stopped")
	return nil
}

// handOffTimeout bounds the hand-off of a cluster member's leads and
// in-sync places as it stops (cluster.Node.HandOff).
const handOffTimeout = 5 * time.Second

// drainTimeout bounds how long a stopping leader waits for its in-sync
// followers to copy what it appended (replica.Manager.Drain) before it
// hands its leads off.
const drainTimeout = time.Second

// closeLocked stops whatever runs, in order. mu must be held.
func (s *Server) closeLocked(ctx context.Context) error {
	var errs []error
	if s.httpStop != nil {
		s.httpStop() // long polls answer now instead of holding the shutdown
	}
	if s.repl != nil {
		if !s.noHandOff {
			// No produce is taken from here on, and the followers copy
			// the leads' last batches, so that the replica the lead goes
			// to holds every batch acknowledged here, acks=leader ones too.
			dctx, cancel := context.WithTimeout(ctx, drainTimeout)
			if err := s.repl.Drain(dctx); err != nil {
				s.log.Warn("draining before handing off", "err", err)
			}
			cancel()
		}
		s.repl.Close() // produces waiting for replicas are answered; no more fetches from the leaders
	}
	if s.node != nil {
		// The others take over this member's leads and drop it from the
		// in-sync sets now, not once its heartbeats have failed for
		// -member-timeout.
		if !s.noHandOff {
			hctx, cancel := context.WithTimeout(ctx, handOffTimeout)
			if err := s.node.HandOff(hctx); err != nil {
				s.log.Warn("handing off before stopping", "err", err)
			}
			cancel()
		}
		errs = append(errs, s.node.Close())
	}
	if s.broker != nil {
		errs = append(errs, s.broker.Shutdown(ctx))
	}
	if s.hs != nil {
		if err := s.hs.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("server: http port: %w", err), s.hs.Close())
		}
		if err := <-s.httpDone; !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("server: http port: %w", err))
		}
	}
	if s.peers != nil {
		s.peers.close() // after the HTTP port: its requests ask the peers
	}
	if s.store != nil {
		errs = append(errs, s.store.Close())
	}
	if s.tlsStop != nil {
		close(s.tlsStop)
		<-s.tlsDone
		s.tlsStop = nil
	}
	runtime.KeepAlive(s.ballast)
	s.ballast = nil
	if s.oldLimit >= 0 {
		debug.SetMemoryLimit(s.oldLimit)
		s.oldLimit = -1
	}
	return errors.Join(errs...)
}

// ReloadOnHangup rereads the auth and TLS files (Reload) on every SIGHUP
// until ctx ends; from its call on, SIGHUP no longer stops the process. A
// failed reload is logged and keeps what was in force.
func (s *Server) ReloadOnHangup(ctx context.Context) {
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hups)
		for {
			select {
			case <-hups:
				_ = s.Reload()
			case <-ctx.Done():
				return
			}
		}
	}()
}
