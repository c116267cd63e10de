// Command haraqa is the haraqa server: the binary protocol on -tcp and the
// HTTP port on -http, in front of topics stored on the volumes given as
// arguments. The server itself is assembled by package broker/server.
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
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/haraqa/haraqa/broker/server"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// shutdownTimeout bounds how long the requests in flight get to finish
// once a signal asks the server to stop.
const shutdownTimeout = 10 * time.Second

func run(args []string, stderr io.Writer) int {
	cfg, err := server.ParseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "haraqa:", err)
		return 2
	}
	procsForDecoders(cfg.Storage.DecodeWorkers)
	if err := serve(cfg); err != nil {
		fmt.Fprintln(stderr, "haraqa:", err)
		if errors.Is(err, server.ErrInvalidConfig) {
			return 2 // a flag value out of range: a usage error
		}
		return 1
	}
	return 0
}

// procsForDecoders gives the Go scheduler a P for each decode thread
// (storage: compressed batches are decoded on threads of the lowest
// priority) beyond those it has, unless GOMAXPROCS is set: a decode thread
// the kernel has set aside for an event loop then holds a P of its own,
// not one a loop needs to run.
func procsForDecoders(workers int) {
	if os.Getenv("GOMAXPROCS") == "" && workers > 0 {
		runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + workers)
	}
}

// signals receives the signals the server handles from the process's
// first instant (package init), so that one arriving while the server is
// still being built or started waits here for handleSignals instead of
// ending the process, as a signal nobody asked for does (SIGHUP's
// default). Buffered: the signal package drops what a full channel cannot
// take.
var signals = make(chan os.Signal, 8)

func init() {
	signal.Notify(signals, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
}

// holdStartEnv names the environment variable that, set, holds the start
// before the server is built until stdin reaches its end, after a line
// saying so: for a test to send a signal then.
const holdStartEnv = "HARAQA_TEST_HOLD_START"

// serve runs the server until SIGINT or SIGTERM; a second signal exits at
// once. SIGHUP rereads the auth and TLS files. With -peers, the HTTP port
// redirects requests for the other servers' topics (server.Config.Peers).
func serve(cfg server.Config) error {
	if os.Getenv(holdStartEnv) != "" {
		cfg.Logger.Info("holding start until stdin closes", "env", holdStartEnv)
		_, _ = io.Copy(io.Discard, os.Stdin)
	}
	srv, err := server.New(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go handleSignals(srv, cfg.Logger, cancel)
	return srv.Run(ctx, shutdownTimeout)
}

// handleSignals handles the signals of the process's life, those received
// before the server was built first: SIGHUP rereads the auth and TLS files
// (server.Reload, which waits for a start under way and logs what it
// reread), the first SIGINT or SIGTERM shuts the server down (cancel), a
// second one exits at once.
func handleSignals(srv *server.Server, log *slog.Logger, cancel context.CancelFunc) {
	stopping := false
	for sig := range signals {
		switch {
		case sig == syscall.SIGHUP:
			log.Info("SIGHUP: rereading the auth and TLS files")
			_ = srv.Reload()
		case !stopping:
			log.Info("shutting down", "signal", sig.String())
			stopping = true
			cancel()
		default:
			log.Warn("second signal: exiting at once")
			os.Exit(1)
		}
	}
}
