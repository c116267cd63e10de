package server_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/server"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// testConfig is a server on fresh volumes with both ports on 127.0.0.1:0.
func testConfig(t *testing.T, volumes int) server.Config {
	t.Helper()
	vols := make([]string, volumes)
	for i := range vols {
		vols[i] = t.TempDir()
	}
	cfg := server.DefaultConfig(vols...)
	cfg.Broker.Addr = "127.0.0.1:0"
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.Logger = slog.New(slog.DiscardHandler)
	return cfg
}

func start(t *testing.T, cfg server.Config) *server.Server {
	t.Helper()
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestServeAndShutdown(t *testing.T) {
	cfg := testConfig(t, 2)
	cfg.Storage.Fsync = storage.FsyncAlways
	var fsyncs atomic.Int64
	cfg.Storage.OnFsync = func(time.Duration) { fsyncs.Add(1) }
	var requests atomic.Int64
	cfg.Broker.ObserveRequest = func(protocol.Op, bool, time.Duration) { requests.Add(1) }
	srv := start(t, cfg)
	if srv.Addr() == nil || srv.HTTPAddr() == nil || srv.Store() == nil || srv.Broker() == nil {
		t.Fatal("a started server lacks an address, its store or its broker")
	}
	web := "http://" + srv.HTTPAddr().String()
	if code, body := get(t, web+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz: %d %q", code, body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Produce(ctx, "t", []byte("one"), []byte("two")); err != nil {
		t.Fatal(err)
	}
	msgs, err := c.Consume(ctx, "t", 0, 10)
	if err != nil || len(msgs) != 2 || string(msgs[1].Value) != "two" {
		t.Fatalf("consume: %v %v", msgs, err)
	}
	// The caller's observers and the HTTP port's metrics both see the work.
	if fsyncs.Load() == 0 || requests.Load() < 3 {
		t.Fatalf("observers saw %d fsyncs and %d requests", fsyncs.Load(), requests.Load())
	}
	_, metrics := get(t, web+"/metrics")
	for _, want := range []string{"haraqa_fsync_duration_seconds_count", `haraqa_request_duration_seconds_count{op="produce"`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	for _, a := range []net.Addr{srv.Addr(), srv.HTTPAddr()} {
		if conn, err := net.DialTimeout("tcp", a.String(), time.Second); err == nil {
			conn.Close()
			t.Errorf("%s still accepts after shutdown", a)
		}
	}
	if err := srv.Start(); !errors.Is(err, server.ErrState) {
		t.Fatalf("start after shutdown: %v, want ErrState", err)
	}

	// The same configuration serves the same volumes again.
	again := start(t, srv.Config())
	c2, err := client.Dial(ctx, again.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if msgs, err := c2.Consume(ctx, "t", 0, 10); err != nil || len(msgs) != 2 {
		t.Fatalf("after restart: %v %v", msgs, err)
	}
}

func TestNoHTTPPort(t *testing.T) {
	cfg := testConfig(t, 1)
	cfg.HTTPAddr = ""
	srv := start(t, cfg)
	if srv.HTTPAddr() != nil {
		t.Fatalf("HTTP port at %s without an address", srv.HTTPAddr())
	}
	if srv.Addr() == nil {
		t.Fatal("no binary port")
	}
}

func TestInvalidConfig(t *testing.T) {
	for name, change := range map[string]func(*server.Config){
		"ballast":    func(c *server.Config) { c.Ballast = -1 },
		"entries":    func(c *server.Config) { c.Storage.Entries = 0 },
		"no volumes": func(c *server.Config) { c.Storage.Volumes = nil },
		"frame":      func(c *server.Config) { c.Broker.MaxFrameSize = 1 },
	} {
		cfg := testConfig(t, 1)
		change(&cfg)
		if _, err := server.New(cfg); !errors.Is(err, server.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// TestFailedStartReleases checks that a start that fails part way gives
// back what it took: the HTTP port when the volumes cannot be opened, the
// volumes when the binary port cannot listen.
func TestFailedStartReleases(t *testing.T) {
	first := start(t, testConfig(t, 1))

	// The volume is locked by the first server: the store cannot open, and
	// the HTTP port that listened before it is closed again.
	cfg := testConfig(t, 1)
	cfg.Storage.Volumes = first.Config().Storage.Volumes
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTPAddr = hl.Addr().String()
	hl.Close()
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err == nil {
		t.Fatal("a second server opened a locked volume")
	}
	if l, err := net.Listen("tcp", cfg.HTTPAddr); err != nil {
		t.Fatalf("the HTTP port is still held after a failed start: %v", err)
	} else {
		l.Close()
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown after a failed start: %v", err)
	}

	// The binary port is taken: the volumes opened for it are unlocked.
	cfg = testConfig(t, 1)
	cfg.Broker.Addr = first.Addr().String()
	srv, err = server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err == nil {
		t.Fatal("two servers listen on one port")
	}
	cfg.Broker.Addr = "127.0.0.1:0"
	start(t, cfg) // fails if the volume is still locked
}

func TestShutdownNeverStarted(t *testing.T) {
	srv, err := server.New(testConfig(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Shutdown(context.Background()); !errors.Is(err, server.ErrState) {
		t.Fatalf("%v, want ErrState", err)
	}
	if srv.Addr() != nil || srv.Store() != nil {
		t.Fatal("a server never started has an address or a store")
	}
}

// TestShutdownEndsLongPolls: an HTTP consume waiting up to a minute for
// data does not hold the shutdown: it is answered (204) at once.
func TestShutdownEndsLongPolls(t *testing.T) {
	srv := start(t, testConfig(t, 1))
	base := "http://" + srv.HTTPAddr().String()
	req, _ := http.NewRequest(http.MethodPut, base+"/topics/events", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %v %v", resp, err)
	}
	wrote := make(chan struct{})
	status := make(chan int, 1)
	go func() {
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { close(wrote) },
		})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/topics/events?id=0&wait=60s", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			status <- -1
			return
		}
		resp.Body.Close()
		status <- resp.StatusCode
	}()
	<-wrote
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown during a long poll: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("shutdown took %s with a long poll open", took)
	}
	if code := <-status; code != http.StatusNoContent && code != -1 {
		t.Fatalf("long poll answered %d at shutdown, want 204", code)
	}
}

// TestMemoryLimit checks that Start sets the runtime's memory limit,
// derived from the broker's budget when asked to, and that Shutdown puts
// the previous one back.
func TestMemoryLimit(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "") // the derived limit gives way to a set GOMEMLIMIT
	before := debug.SetMemoryLimit(-1)
	cfg := testConfig(t, 1)
	cfg.Broker.MaxBufferedBytes = 64 << 20
	cfg.MemoryLimit = -1
	srv := start(t, cfg)
	want := server.DefaultMemoryLimit(64 << 20)
	if got := debug.SetMemoryLimit(-1); got != want {
		t.Errorf("memory limit while serving: %d, want %d (64 MiB budget and a quarter, plus headroom)", got, want)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("memory limit after shutdown: %d, want the previous %d", got, before)
	}

	cfg = testConfig(t, 1)
	cfg.MemoryLimit = 256 << 20
	cfg.Ballast = 128 << 20
	if _, err := server.New(cfg); !errors.Is(err, server.ErrInvalidConfig) || !strings.Contains(err.Error(), "memory limit") {
		t.Errorf("a ballast of half the memory limit: %v, want ErrInvalidConfig naming the memory limit", err)
	}
	cfg.Ballast = 64 << 20
	if _, err := server.New(cfg); err != nil {
		t.Errorf("a ballast of a quarter of the memory limit: %v", err)
	}
}
