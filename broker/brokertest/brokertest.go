// Package brokertest starts real haraqa servers for tests: the server
// package's assembly on fresh temporary volumes, the binary protocol on
// 127.0.0.1:0 and, when an Option asks for it, the HTTP port too.
package brokertest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/server"
	"github.com/haraqa/haraqa/storage"
)

// Server is a running server. Its fields are set by Start and stay valid
// until Close.
type Server struct {
	Addr    string // host:port of the binary protocol
	Volumes []string
	Store   *storage.Store
	Broker  *broker.Broker
	Options storage.Options
	Config  broker.Config
	// Server is the assembly behind the fields above.
	Server *server.Server

	closed bool
}

// Option adjusts the store options and broker config before start.
type Option func(*storage.Options, *broker.Config)

// Start starts a server on n fresh volumes in t.TempDir(), without an HTTP
// port, and stops it when the test ends.
func Start(t testing.TB, volumes int, opts ...Option) *Server {
	t.Helper()
	vols := make([]string, volumes)
	for i := range vols {
		vols[i] = t.TempDir()
	}
	cfg := Config(vols...)
	for _, o := range opts {
		o(&cfg.Storage, &cfg.Broker)
	}
	s, err := StartConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// Config returns the configuration Start uses: the defaults on volumes,
// the binary protocol on 127.0.0.1:0, no HTTP port, logs discarded.
func Config(volumes ...string) server.Config {
	cfg := server.DefaultConfig(volumes...)
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Broker.Addr = "127.0.0.1:0"
	cfg.HTTPAddr = ""
	return cfg
}

// StartWith opens a store with so and serves it with bc, without an HTTP
// port.
func StartWith(so storage.Options, bc broker.Config) (*Server, error) {
	cfg := Config(so.Volumes...)
	cfg.Storage, cfg.Broker = so, bc
	return StartConfig(cfg)
}

// StartConfig starts a server with cfg. The caller closes it.
func StartConfig(cfg server.Config) (*Server, error) {
	srv, err := server.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := srv.Start(); err != nil {
		return nil, err
	}
	cfg = srv.Config()
	return &Server{
		Addr: srv.Addr().String(), Volumes: cfg.Storage.Volumes,
		Store: srv.Store(), Broker: srv.Broker(),
		Options: cfg.Storage, Config: cfg.Broker, Server: srv,
	}, nil
}

// Close shuts the server down and closes the store. Safe to call twice.
func (s *Server) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Server.Shutdown(ctx)
}

// Restart closes the server and starts a new one on the same volumes with
// the same configuration (a new port, when the address asked for port 0).
func (s *Server) Restart() (*Server, error) {
	if err := s.Close(); err != nil {
		return nil, err
	}
	return StartConfig(s.Server.Config())
}

// Log returns the handle on topic's log in the server's store, failing
// the test if there is none.
func (s *Server) Log(t testing.TB, topic string) *storage.Log {
	t.Helper()
	l, err := s.Store.Log(topic)
	if err != nil {
		t.Fatalf("log %q: %v", topic, err)
	}
	return l
}
