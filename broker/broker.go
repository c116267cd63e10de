package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/haraqa/haraqa/storage"
)

// Broker serves the binary protocol over TCP on gnet event loops, in front
// of a storage.Store. The store stays the caller's: the broker never closes it.
type Broker struct {
	gnet.BuiltinEventEngine

	cfg   Config
	store *storage.Store
	fsync bool // appends fsync before returning: run them off the event loops

	eng      gnet.Engine
	addr     net.Addr
	started  chan struct{}
	runErr   chan error
	stopping atomic.Bool
	stopMu   sync.RWMutex   // orders inflight.Add against Shutdown's Wait
	inflight sync.WaitGroup // produce goroutines

	stalledMu sync.Mutex
	stalled   map[gnet.Conn]struct{} // connections waiting for their output to drain

	stats counters
}

// New returns a broker for store; Start serves it. When the store fsyncs
// every append, produces run off the event loops.
func New(store *storage.Store, cfg Config) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Broker{
		cfg:     cfg,
		store:   store,
		fsync:   store.FsyncPolicy() == storage.FsyncAlways,
		started: make(chan struct{}),
		runErr:  make(chan error, 1),
		stalled: make(map[gnet.Conn]struct{}),
	}, nil
}

// readBufferCap is the size of each event loop's read buffer.
const readBufferCap = 1 << 20

// Start listens and serves in the background. It returns once the listener
// is up, or with the error that prevented it (a port in use, say).
func (b *Broker) Start() error {
	opts := []gnet.Option{
		gnet.WithMulticore(true),
		gnet.WithNumEventLoop(b.cfg.EventLoops),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithReusePort(false),
		gnet.WithReuseAddr(true), // a restart may bind while old connections sit in TIME_WAIT
		gnet.WithTicker(true),
		gnet.WithLogger(gnetLogger{b.cfg.Logger}),
		// One read buffer per event loop (not per connection): a large one
		// takes a big batch in few read(2) calls instead of 64 KiB at a
		// time, each handed to OnTraffic and copied into the connection's
		// inbound buffer.
		gnet.WithReadBufferCap(readBufferCap),
	}
	go func() { b.runErr <- gnet.Run(b, "tcp://"+b.cfg.Addr, opts...) }()
	select {
	case <-b.started:
		return nil
	case err := <-b.runErr:
		if err == nil {
			err = errors.New("broker: stopped before it started")
		}
		return fmt.Errorf("broker: listen on %s: %w", b.cfg.Addr, err)
	}
}

// Addr is the address the broker listens on, with the real port when
// Config.Addr asked for port 0.
func (b *Broker) Addr() net.Addr { return b.addr }

// OnBoot records the engine and the listening address.
func (b *Broker) OnBoot(eng gnet.Engine) gnet.Action {
	b.eng = eng
	b.addr = listenAddr(eng, b.cfg.Addr)
	close(b.started)
	return gnet.None
}

// listenAddr reads the bound address from a duplicate of the listener.
func listenAddr(eng gnet.Engine, fallback string) net.Addr {
	fd, err := eng.Dup()
	if err == nil {
		defer unix.Close(fd)
		if sa, err := unix.Getsockname(fd); err == nil {
			switch sa := sa.(type) {
			case *unix.SockaddrInet4:
				return &net.TCPAddr{IP: net.IP(sa.Addr[:]), Port: sa.Port}
			case *unix.SockaddrInet6:
				return &net.TCPAddr{IP: net.IP(sa.Addr[:]), Port: sa.Port}
			}
		}
	}
	a, _ := net.ResolveTCPAddr("tcp", fallback)
	return a
}

// Shutdown stops the broker gracefully: new requests are refused with
// CodeShuttingDown, produces in flight finish and are answered, then the
// listener and every connection close. It does not close the store.
func (b *Broker) Shutdown(ctx context.Context) error {
	select {
	case <-b.started:
	default:
		return ErrNotStarted
	}
	b.stopMu.Lock()
	already := b.stopping.Swap(true)
	b.stopMu.Unlock()
	if already {
		return nil
	}
	done := make(chan struct{})
	go func() { b.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	// Give the event loops a moment to write the answers of the last
	// produces; the engine's Stop then closes every connection.
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) && b.stats.pending.Load() > 0 {
		time.Sleep(time.Millisecond)
	}
	err := b.eng.Stop(ctx)
	if rerr := <-b.runErr; err == nil {
		err = rerr
	}
	return err
}

// OnTick wakes connections that stopped reading because their output was
// backed up, so they resume once it drains. gnet has no writable callback.
func (b *Broker) OnTick() (time.Duration, gnet.Action) {
	b.stalledMu.Lock()
	conns := make([]gnet.Conn, 0, len(b.stalled))
	for c := range b.stalled {
		conns = append(conns, c)
		delete(b.stalled, c)
	}
	b.stalledMu.Unlock()
	for _, c := range conns {
		_ = c.Wake(nil)
	}
	if len(conns) > 0 {
		return time.Millisecond, gnet.None
	}
	return 10 * time.Millisecond, gnet.None
}

func (b *Broker) stall(c gnet.Conn) {
	b.stalledMu.Lock()
	b.stalled[c] = struct{}{}
	b.stalledMu.Unlock()
}

// gnetLogger routes gnet's logs to slog.
type gnetLogger struct{ l *slog.Logger }

func (g gnetLogger) Debugf(format string, args ...any) { g.l.Debug(fmt.Sprintf(format, args...)) }
func (g gnetLogger) Infof(format string, args ...any)  { g.l.Debug(fmt.Sprintf(format, args...)) }
func (g gnetLogger) Warnf(format string, args ...any)  { g.l.Warn(fmt.Sprintf(format, args...)) }
func (g gnetLogger) Errorf(format string, args ...any) { g.l.Error(fmt.Sprintf(format, args...)) }
func (g gnetLogger) Fatalf(format string, args ...any) { g.l.Error(fmt.Sprintf(format, args...)) }
