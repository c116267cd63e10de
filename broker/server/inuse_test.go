package server_test

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/haraqa/haraqa/broker/server"
)

// TestPortInUseNamesTheFlag: a port another process holds fails the
// start with a message naming the flag and make run's variable that
// choose another, and the error still unwraps to EADDRINUSE.
func TestPortInUseNamesTheFlag(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	addr := held.Addr().String()
	for _, c := range []struct {
		set  func(*server.Config)
		want string
	}{
		{func(cfg *server.Config) { cfg.HTTPAddr = addr }, "-http port " + addr + " is in use (another server, or make run, listens on it): choose another with -http (make run HTTP_PORT=...)"},
		{func(cfg *server.Config) { cfg.Broker.Addr = addr }, "-tcp port " + addr + " is in use (another server, or make run, listens on it): choose another with -tcp (make run TCP_PORT=...)"},
	} {
		cfg := testConfig(t, 1)
		c.set(&cfg)
		srv, err := server.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = srv.Start()
		if err == nil {
			t.Fatalf("started with %s held", addr)
		}
		if first, _, _ := strings.Cut(err.Error(), "\n"); first != c.want || !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("start: %q, want %q (and EADDRINUSE)", err, c.want)
		}
	}
}
