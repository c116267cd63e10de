// Package brokertest starts real haraqa servers for tests: a storage.Store on
// fresh temporary volumes behind a broker listening on 127.0.0.1:0.
package brokertest

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/storage"
)

// Server is a running broker and its store.
type Server struct {
	Addr    string // host:port of the binary protocol
	Volumes []string
	Store   *storage.Store
	Broker  *broker.Broker
	Options storage.Options
	Config  broker.Config

	closed bool
}

// Option adjusts the store options and broker config before start.
type Option func(*storage.Options, *broker.Config)

// Start starts a server on n fresh volumes in t.TempDir() and stops it when
// the test ends.
func Start(t testing.TB, volumes int, opts ...Option) *Server {
	t.Helper()
	vols := make([]string, volumes)
	for i := range vols {
		vols[i] = t.TempDir()
	}
	so := storage.DefaultOptions(vols...)
	so.Logger = slog.New(slog.DiscardHandler)
	bc := broker.DefaultConfig()
	bc.Addr = "127.0.0.1:0"
	bc.Logger = so.Logger
	for _, o := range opts {
		o(&so, &bc)
	}
	s, err := StartWith(so, bc)
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

// StartWith opens a store with so and serves it with bc.
func StartWith(so storage.Options, bc broker.Config) (*Server, error) {
	store, err := storage.Open(so)
	if err != nil {
		return nil, err
	}
	b, err := broker.New(store, bc, so.Fsync == storage.FsyncAlways)
	if err == nil {
		err = b.Start()
	}
	if err != nil {
		return nil, errors.Join(err, store.Close())
	}
	return &Server{Addr: b.Addr().String(), Volumes: so.Volumes, Store: store, Broker: b, Options: so, Config: bc}, nil
}

// Close shuts the broker down and closes the store. Safe to call twice.
func (s *Server) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(s.Broker.Shutdown(ctx), s.Store.Close())
}

// Restart closes the server and starts a new one on the same volumes and
// address settings (a new port).
func (s *Server) Restart() (*Server, error) {
	if err := s.Close(); err != nil {
		return nil, err
	}
	return StartWith(s.Options, s.Config)
}
