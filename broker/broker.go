package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/storage"
)

// Broker serves the binary protocol over TCP on gnet event loops: it
// translates frames into the calls of its service.Service, the request
// path the HTTP port shares. The store stays the caller's: the broker
// never closes it.
type Broker struct {
	cfg   Config
	svc   *service.Service
	fsync bool // appends fsync before returning: run them off the event loops

	eng        gnet.Engine
	ctx        context.Context // of Register calls; ends with the broker
	cancel     context.CancelFunc
	ln         net.Listener
	ready      chan struct{} // closed when an event loop opened the probe (Start)
	addr       net.Addr
	acceptDone chan struct{} // closed when accept returns
	conns      atomic.Int64  // descriptors held by connections accepted and not yet closed (accept.go)
	connSeq    atomic.Uint64 // connections opened: each one's tenant without a token (conn.tenant)
	slots      slots         // connections per client address (accept.go)
	started    chan struct{}
	runErr     chan error
	dead       chan struct{} // closed when the engine has stopped
	loopsDone  chan struct{} // closed when the event loops have exited, stopping or not
	deadErr    error         // why, once dead is closed
	stopping   atomic.Bool
	stopMu     sync.RWMutex   // orders inflight.Add against Shutdown's Wait
	inflight   sync.WaitGroup // produce goroutines
	tlsWG      sync.WaitGroup // TLS handshakes and pumps (tls.go)
	tlsLog     rateLog        // of failed TLS handshakes

	stalledMu sync.Mutex
	enrollMu  sync.Mutex              // serializes Engine.Register (accept.go)
	stalled   map[gnet.Conn]time.Time // connections waiting for their output to drain, since when
	draining  map[gnet.Conn]*conn     // connections with unsent output at their last count (budget.go)

	liveMu    sync.Mutex
	live      map[gnet.Conn]*conn // open connections, for the idle sweep (idle.go)
	nextSweep time.Time           // of the idle sweep; tick goroutine only

	shed   shedState  // connections gathering large unfinished frames (budget.go)
	hellos helloState // connections that have not said hello (hello.go)

	stats counters
}

// New returns a broker for store, and the service.Service over it that
// the HTTP port shares (Service), built with Config.Auth and
// Config.FilterWorkers; Start serves it. When the store fsyncs every
// append, produces run off the event loops.
func New(store *storage.Store, cfg Config) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	svc := service.New(store, service.Config{Auth: cfg.Auth, FilterWorkers: cfg.FilterWorkers, Replication: cfg.Replication,
		MaxGroupChangeRate: cfg.MaxGroupChangeRate, ClusterSecret: cfg.ClusterSecret})
	return &Broker{
		cfg:        cfg,
		svc:        svc,
		fsync:      svc.FsyncAlways(),
		ctx:        ctx,
		cancel:     cancel,
		acceptDone: make(chan struct{}),
		started:    make(chan struct{}),
		ready:      make(chan struct{}),
		runErr:     make(chan error, 1),
		dead:       make(chan struct{}),
		loopsDone:  make(chan struct{}),
		stalled:    make(map[gnet.Conn]time.Time),
		draining:   make(map[gnet.Conn]*conn),
		live:       make(map[gnet.Conn]*conn),
	}, nil
}

// Service is the request path the broker serves, for the HTTP port to
// share.
func (b *Broker) Service() *service.Service { return b.svc }

// readBufferCap is the size of each event loop's read buffer.
const readBufferCap = 1 << 20

// Start listens and serves in the background. It returns once the listener
// is up, or with the error that prevented it (a port in use, say).
func (b *Broker) Start() error {
	ln, err := net.Listen("tcp", b.cfg.Addr) // SO_REUSEADDR: a restart may bind while old connections sit in TIME_WAIT
	if err != nil {
		return fmt.Errorf("broker: listen on %s: %w", b.cfg.Addr, err)
	}
	b.ln, b.addr = ln, ln.Addr()
	opts := []gnet.Option{
		gnet.WithMulticore(true),
		gnet.WithNumEventLoop(b.cfg.EventLoops),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithTicker(true),
		gnet.WithLogger(gnetLogger{b.cfg.Logger}),
		// One read buffer per event loop (not per connection): a large one
		// takes a big batch in few read(2) calls instead of 64 KiB at a
		// time, each handed to OnTraffic and copied into the connection's
		// inbound buffer.
		gnet.WithReadBufferCap(readBufferCap),
	}
	// accept (accept.go) hands the engine its connections. gnet wants a
	// listener of its own all the same (Engine.Validate): it gets a Unix
	// socket in a private directory, removed once the engine is known to
	// run (probe), so that nothing else can ever connect to it.
	dir, err := os.MkdirTemp("", "haraqa-gnet-")
	if err != nil {
		ln.Close()
		return fmt.Errorf("broker: start event loops: %w", err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "s")
	go func() {
		err := gnet.Rotate(&events{b: b}, []string{"unix://" + sock}, opts...)
		close(b.loopsDone)
		b.runErr <- err
		if !b.stopping.Load() {
			b.deadErr = fmt.Errorf("%w: %v", ErrEngineStopped, err)
			close(b.dead)
		}
	}()
	select {
	case <-b.started:
	case err := <-b.runErr:
		ln.Close()
		if err == nil {
			err = errors.New("broker: stopped before it started")
		}
		return fmt.Errorf("broker: start event loops: %w", err)
	}
	if err := b.probe(sock); err != nil {
		ln.Close()
		b.stopping.Store(true)
		_ = b.eng.Stop(context.Background())
		<-b.runErr
		return fmt.Errorf("broker: start event loops: %w", err)
	}
	go b.accept(ln)
	return nil
}

// probeTimeout bounds the wait for the event loops to serve at start.
const probeTimeout = 10 * time.Second

// probe connects to the engine's own socket and waits for an event loop to
// open the connection (OnOpen closes ready): gnet calls OnBoot before it
// starts its event loops, and Register must not run before they are.
func (b *Broker) probe(sock string) error {
	c, err := net.DialTimeout("unix", sock, probeTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	select {
	case <-b.ready:
		return nil
	case <-time.After(probeTimeout):
		return errors.New("event loops did not start")
	}
}

// Addr is the address the broker listens on, with the real port when
// Config.Addr asked for port 0.
func (b *Broker) Addr() net.Addr { return b.addr }

// Dead is closed if the event loops stop while the broker was not shutting
// down; Err then says why. A server should exit so that it is restarted.
func (b *Broker) Dead() <-chan struct{} { return b.dead }

// Err is why the broker died (Dead), or nil.
func (b *Broker) Err() error {
	select {
	case <-b.dead:
		return b.deadErr
	default:
		return nil
	}
}

// OnBoot records the engine.
func (e *events) OnBoot(eng gnet.Engine) gnet.Action {
	b := e.b
	b.eng = eng
	close(b.started)
	return gnet.None
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
	b.ln.Close()
	<-b.acceptDone
	b.cancel()
	err := b.eng.Stop(ctx)
	if rerr := <-b.runErr; err == nil {
		err = rerr
	}
	// The event loops closed every connection: the TLS pumps see EOF and
	// close their clients; handshakes in progress ended with b.ctx.
	tlsDone := make(chan struct{})
	go func() { b.tlsWG.Wait(); close(tlsDone) }()
	select {
	case <-tlsDone:
	case <-ctx.Done():
	}
	return err
}

// Stall ticks: a connection whose output is backed up is woken every
// tick to see whether it drained (gnet has no writable callback). Ticks
// are frequent while some stall is young, since most drain within
// milliseconds, and rare once every stalled client has not read for a
// while, so that stalled connections do not keep a core busy.
const (
	stallTickFast = time.Millisecond
	stallTickSlow = 50 * time.Millisecond
	stallYoung    = 20 * time.Millisecond
	idleTick      = 10 * time.Millisecond
)

// OnTick wakes connections that stopped reading because their output was
// backed up or the memory budget was spent, so they resume once it drains;
// and, now and then, the idle ones (idle.go).
func (e *events) OnTick() (time.Duration, gnet.Action) {
	b := e.b
	b.stalledMu.Lock()
	conns := make([]gnet.Conn, 0, len(b.stalled))
	young := false
	now := time.Now()
	for c, since := range b.stalled {
		conns = append(conns, c)
		young = young || now.Sub(since) < stallYoung
		delete(b.stalled, c)
	}
	b.stalledMu.Unlock()
	for _, c := range conns {
		_ = c.Wake(nil)
	}
	b.wakeDraining()
	b.sweepIdle(now)
	b.sweepHellos(now)
	switch {
	case young:
		return stallTickFast, gnet.None
	case len(conns) > 0:
		return stallTickSlow, gnet.None
	}
	return idleTick, gnet.None
}

// stall records that c's output is backed up, to be woken by OnTick. A
// connection backed up for longer than StallTimeout (its client does not
// read what it asked for) is closed. Runs on the loop.
func (cs *conn) stall() {
	b, c := cs.b, cs.c
	now := time.Now()
	if cs.stalledSince.IsZero() {
		cs.stalledSince = now
	} else if now.Sub(cs.stalledSince) > b.cfg.StallTimeout {
		b.stats.stallClosed.Add(1)
		cs.fatal = fmt.Errorf("%w: its client has not read its responses for %s (StallTimeout)", errStalled, b.cfg.StallTimeout)
		return
	}
	b.stalledMu.Lock()
	b.stalled[c] = cs.stalledSince
	b.stalledMu.Unlock()
}

// events takes gnet's callbacks for the broker (OnBoot, OnOpen, OnTraffic,
// OnClose, OnTick), which are not part of the Broker's API.
type events struct {
	gnet.BuiltinEventEngine
	b *Broker
}

// gnetLogger routes gnet's logs to slog.
type gnetLogger struct{ l *slog.Logger }

func (g gnetLogger) Debugf(format string, args ...any) { g.l.Debug(fmt.Sprintf(format, args...)) }
func (g gnetLogger) Infof(format string, args ...any)  { g.l.Debug(fmt.Sprintf(format, args...)) }
func (g gnetLogger) Warnf(format string, args ...any)  { g.l.Warn(fmt.Sprintf(format, args...)) }
func (g gnetLogger) Errorf(format string, args ...any) { g.l.Error(fmt.Sprintf(format, args...)) }
func (g gnetLogger) Fatalf(format string, args ...any) { g.l.Error(fmt.Sprintf(format, args...)) }
