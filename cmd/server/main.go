// Command haraqa is the haraqa server: the binary protocol on -tcp, in front
// of topics stored on the volumes given as arguments.
//
//	haraqa [flags] VOLUME...
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/httpapi"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

type config struct {
	httpPort, tcpPort       uint
	cache, cors, docs, prom bool
	pprof                   bool
	entries, limit          int
	ballast                 int64
	fsync                   string
	fsyncInterval           time.Duration
	maxFrame                int
	maxConsume              int
	retentionAge            time.Duration
	retentionBytes          int64
	retentionCheck          time.Duration
	logLevel, listen        string
	volumes                 []string
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	var c config
	fs := flag.NewFlagSet("haraqa", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.UintVar(&c.httpPort, "http", 4353, "HTTP port: REST API, API docs, Prometheus metrics, health checks")
	fs.UintVar(&c.tcpPort, "tcp", 14353, "binary protocol port")
	fs.StringVar(&c.listen, "listen", "0.0.0.0", "address to listen on")
	fs.BoolVar(&c.cache, "cache", true, "keep segment files open between reads")
	fs.BoolVar(&c.cors, "cors", true, "send CORS headers on the HTTP port")
	fs.BoolVar(&c.docs, "docs", true, "serve the API docs on the HTTP port")
	fs.BoolVar(&c.prom, "prometheus", true, "serve Prometheus metrics on the HTTP port")
	fs.BoolVar(&c.pprof, "pprof", false, "serve Go runtime profiles at /debug/pprof/ on the HTTP port")
	fs.IntVar(&c.entries, "entries", 5000, "messages per segment file before a new one starts")
	fs.IntVar(&c.limit, "limit", -1, "default consume limit in messages; -1: no limit beyond the byte bound")
	fs.Int64Var(&c.ballast, "ballast", 1<<30, "GC ballast in bytes (address space only; 0 to disable)")
	fs.StringVar(&c.fsync, "fsync", "never", "when to fsync: always (before every ack, group-committed), interval, never")
	fs.DurationVar(&c.fsyncInterval, "fsync-interval", time.Second, "fsync period with -fsync interval")
	fs.IntVar(&c.maxFrame, "max-frame", protocol.DefaultMaxFrameSize, "largest request frame in bytes")
	fs.IntVar(&c.maxConsume, "max-consume-bytes", 4<<20, "largest consume response in batch bytes")
	fs.DurationVar(&c.retentionAge, "retention-age", 0, "delete segments older than this (0: keep)")
	fs.Int64Var(&c.retentionBytes, "retention-bytes", 0, "keep at most about this many bytes per topic (0: no limit)")
	fs.DurationVar(&c.retentionCheck, "retention-check", time.Minute, "how often retention runs")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: haraqa [flags] VOLUME...\n\n"+
			"Serves topics stored on the volumes (directories). Messages are written to every\n"+
			"volume in the order given and read from the last. Example:\n\n"+
			"  haraqa -tcp 14353 /vol1 /vol2 /vol3\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c.volumes = fs.Args()
	for _, v := range c.volumes {
		if v == "true" || v == "false" {
			// "-cache false" sets -cache and makes "false" a volume.
			return nil, fmt.Errorf("volume %q looks like a flag value: write boolean flags as -flag=false", v)
		}
	}
	if len(c.volumes) == 0 {
		fs.Usage()
		return nil, errors.New("at least one volume is required")
	}
	if c.httpPort > 65535 || c.tcpPort > 65535 {
		return nil, errors.New("ports must be at most 65535")
	}
	if c.ballast < 0 {
		return nil, errors.New("-ballast must not be negative")
	}
	return &c, nil
}

func run(args []string, stderr io.Writer) int {
	c, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "haraqa:", err)
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		fmt.Fprintf(stderr, "haraqa: -log-level %q: want debug, info, warn or error\n", c.logLevel)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if err := serve(c, log); err != nil {
		fmt.Fprintln(stderr, "haraqa:", err)
		if errors.Is(err, storage.ErrInvalidOptions) || errors.Is(err, broker.ErrInvalidConfig) {
			return 2 // a flag value out of range: a usage error
		}
		return 1
	}
	return 0
}

func serve(c *config, log *slog.Logger) error {
	// A ballast is a large allocation that is never touched: it costs
	// address space, not memory, and raises the heap size the GC paces
	// itself against, so small heaps are collected less often. Go 1.19+
	// offers GOMEMLIMIT and GOGC for the same end; the flag is kept for
	// the original's users.
	ballast := make([]byte, c.ballast)
	defer runtime.KeepAlive(ballast)

	policy, err := storage.ParseFsyncPolicy(c.fsync)
	if err != nil {
		return err
	}
	opts := storage.DefaultOptions(c.volumes...)
	opts.Entries = c.entries
	opts.Cache = c.cache
	opts.Fsync = policy
	opts.FsyncInterval = c.fsyncInterval
	opts.MaxBatchBytes = c.maxFrame
	opts.RetentionAge = c.retentionAge
	opts.RetentionBytes = c.retentionBytes
	opts.RetentionCheck = c.retentionCheck
	opts.Logger = log
	if err := opts.Validate(); err != nil {
		return err
	}

	// The HTTP port listens first: /healthz answers while the volumes are
	// recovered, /readyz and the REST API once the broker serves.
	api := httpapi.New(httpapi.Config{
		Prometheus:      c.prom,
		Docs:            c.docs,
		CORS:            c.cors,
		Pprof:           c.pprof,
		MaxBodyBytes:    int64(c.maxFrame),
		DefaultLimit:    c.limit,
		MaxConsumeBytes: int64(c.maxConsume),
		Logger:          log,
	})
	opts.OnFsync = api.ObserveFsync
	hl, err := net.Listen("tcp", net.JoinHostPort(c.listen, strconv.Itoa(int(c.httpPort))))
	if err != nil {
		return fmt.Errorf("http port: %w", err)
	}
	hs := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http port", "err", err)
		}
	}()
	defer hs.Close()

	start := time.Now()
	store, err := storage.Open(opts)
	if err != nil {
		return err
	}
	st := store.Stats()
	log.Info("volumes open", "volumes", strings.Join(c.volumes, ","), "topics", len(store.ListTopics("")),
		"repairs", st.Repairs, "took", time.Since(start).Round(time.Millisecond))

	cfg := broker.DefaultConfig()
	cfg.Addr = net.JoinHostPort(c.listen, strconv.Itoa(int(c.tcpPort)))
	cfg.MaxFrameSize = c.maxFrame
	cfg.DefaultLimit = c.limit
	cfg.MaxConsumeBytes = c.maxConsume
	cfg.Logger = log
	cfg.ObserveRequest = api.ObserveRequest
	b, err := broker.New(store, cfg, policy == storage.FsyncAlways)
	if err == nil {
		err = b.Start()
	}
	if err != nil {
		return errors.Join(err, store.Close())
	}
	api.Ready(store, b)
	log.Info("serving", "tcp", b.Addr().String(), "http", hl.Addr().String(), "fsync", policy.String())

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	sig := <-sigs
	log.Info("shutting down", "signal", sig.String())
	go func() {
		<-sigs
		log.Warn("second signal: exiting at once")
		os.Exit(1)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = errors.Join(b.Shutdown(ctx), hs.Shutdown(ctx))
	if cerr := store.Close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}
