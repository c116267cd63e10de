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
	"os"
	"os/signal"
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
	if err := serve(cfg); err != nil {
		fmt.Fprintln(stderr, "haraqa:", err)
		if errors.Is(err, server.ErrInvalidConfig) {
			return 2 // a flag value out of range: a usage error
		}
		return 1
	}
	return 0
}

// serve runs the server until SIGINT or SIGTERM; a second signal exits at
// once. SIGHUP rereads the auth and TLS files. With -peers, the HTTP port
// redirects requests for the other servers' topics (server.Config.Peers).
func serve(cfg server.Config) error {
	srv, err := server.New(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv.ReloadOnHangup(ctx)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		sig := <-sigs
		cfg.Logger.Info("shutting down", "signal", sig.String())
		cancel()
		<-sigs
		cfg.Logger.Warn("second signal: exiting at once")
		os.Exit(1)
	}()
	return srv.Run(ctx, shutdownTimeout)
}
