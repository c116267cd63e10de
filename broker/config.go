package broker

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/haraqa/haraqa/broker/auth"
	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
)

// Config configures a Broker. Start from DefaultConfig.
type Config struct {
	// Addr is the TCP address of the binary protocol, host:port
	// (default "127.0.0.1:14353"; port 0 picks a free one, see Broker.Addr).
	Addr string
	// MaxFrameSize bounds the length of a request frame (default 64 MiB).
	// A larger declared length is answered with an error and the
	// connection is closed, before the frame is buffered.
	MaxFrameSize int
	// DefaultLimit is the message limit of a consume that gives none;
	// -1 (the default) means no limit beyond the byte bound.
	DefaultLimit int
	// MaxConsumeBytes bounds the batch bytes of one consume response
	// (default 4 MiB); a request may ask for less. The first batch is sent
	// whole even when larger, so a consumer always makes progress.
	MaxConsumeBytes int
	// MaxWait bounds the long-poll wait of a consume (default 1 minute).
	MaxWait time.Duration
	// MaxOutboundBytes is how much a connection's unsent output may hold
	// before the broker stops reading its requests (default 16 MiB).
	MaxOutboundBytes int
	// StallTimeout closes a connection whose output has stayed over
	// MaxOutboundBytes this long: its client asks and does not read
	// (default 1 minute).
	StallTimeout time.Duration
	// MaxPending bounds the requests of one connection waiting for their
	// turn to be answered (default 4096); past it, reading stops too.
	MaxPending int
	// MaxConns bounds the descriptors the binary port's connections hold
	// (default DefaultMaxConns(): three eighths of the process's
	// descriptor limit less 64, at most 65536, so that segment files and
	// the HTTP port keep theirs): a TCP connection holds one, a TLS
	// connection TLSDescriptors (3). A connection over it is sent one
	// CodeLimitReached frame naming the limit and closed.
	MaxConns int
	// MaxConnsPerAddr bounds the binary port's connections from one client
	// IP address (default DefaultMaxConnsPerAddr, 128; 0: no bound), so
	// that one host cannot take all MaxConns slots. A connection over it
	// is sent one CodeLimitReached frame naming the limit and closed.
	MaxConnsPerAddr int
	// MaxControlRate bounds the control requests of one connection, every
	// request but produce, consume, import and hello (pings, topic admin
	// and lookups, group commits, fetches and leases), in requests a
	// second (default DefaultMaxControlRate, 5000; 0: no bound), with
	// bursts of a tenth of a second's worth (at least 1). Past it the
	// connection is not read until the next one is due (control.go):
	// nothing is refused, its requests wait, as Kafka throttles a client
	// past its request quota, so a client pipelining tens of thousands of
	// them takes a bounded share of the server.
	MaxControlRate int
	// MaxBufferedBytes bounds what the broker buffers for all connections
	// together (default DefaultMaxBufferedBytes(): a quarter of physical
	// memory, at most 1 GiB; 0: no bound): unread input, unsent output,
	// answers held behind an earlier one, produce batches copied for
	// storage and large frames being gathered, with what the HTTP port
	// reserves for its request bodies and responses (Reserve). Over it,
	// connections that hold output of their own are not read until the
	// total is under it again; a connection holding no output is still
	// served; the connections gathering the largest unfinished frames are
	// closed until the excess is covered; and the HTTP port refuses
	// requests with 429 (see docs/broker.md, "Memory budget").
	MaxBufferedBytes int64
	// IdleTimeout closes a connection that holds nothing (no request in
	// flight, no parked consume, nothing buffered either way) and has
	// received no bytes for this long (default 10 minutes, as Kafka's
	// connections.max.idle.ms; 0: never). It is sent one CodeIdleTimeout
	// frame first, which tells its client that nothing it sent since was
	// read. Checked every IdleTimeout/4, so a connection is closed between
	// IdleTimeout and 1.25 IdleTimeout after its last bytes.
	IdleTimeout time.Duration
	// MaxPreHelloFrame bounds, with Auth, the frames of a connection that
	// has not presented a valid token with a hello (default
	// DefaultMaxPreHelloFrame, 64 KiB; 0 means that default too): a larger
	// announced frame is answered with CodeFrameTooLarge, whose message
	// names the limit and says that the hello comes first, and the
	// connection is closed before any of the frame is buffered. A hello (at
	// most about 1.3 KB) is far under it; each frame is checked when it is
	// reached, so large requests pipelined behind a hello are served.
	MaxPreHelloFrame int
	// HelloTimeout closes, with Auth, a connection that has not presented
	// a valid token with a hello this long after it opened (default
	// DefaultHelloTimeout, 10 s; 0: never), pings or not. It is sent one
	// CodeUnauthenticated frame first, op 0 and correlation id 0. Checked
	// every HelloTimeout/4, so it is closed between HelloTimeout and 1.25
	// HelloTimeout after it opened.
	HelloTimeout time.Duration
	// Auth, when set, makes every request but ping need a token presented
	// with a hello (protocol op 9), and checks each request's right on its
	// topic (see package auth). Nil (the default): no tokens, everything
	// allowed. The Authorizer stays the caller's, who may Reload it.
	Auth *auth.Authorizer
	// TLS, when set, makes the binary port speak TLS only, with this
	// configuration (certificates, client authentication): a connection's
	// handshake runs on a goroutine of its own, within 10 s and counted
	// against MaxConns, then the connection is served through a socket
	// pair (see docs/security.md, "TLS"). Default nil: plaintext.
	TLS *tls.Config
	// EventLoops is the number of gnet event loops (default 0: one per CPU).
	EventLoops int
	// FilterWorkers bounds the list-topics regex filters compiled or
	// matched at once, off the event loops, whatever the number of
	// connections asking (default DefaultFilterWorkers(): half the CPUs,
	// at least 1; 0 means that default too), so that costly filters within protocol's bounds leave
	// the other cores to the event loops. Up to 64 more per worker wait
	// for one; past that a filter is refused with CodeLimitReached.
	FilterWorkers int
	// Replication, when set, is the cluster this server is a member of
	// (service.Config.Replication). Default nil.
	Replication service.Replication
	// ClusterSecret is the cluster members' shared secret
	// (service.Config.ClusterSecret): without Auth, the token a hello must
	// present for the server-to-server and membership ops. Default "".
	ClusterSecret string
	// MaxGroupChangeRate bounds, with Auth and Replication, each token's
	// group commits, leases, releases and deletions on the replicated
	// topics this server leads, in changes a second, with bursts of a
	// second's worth (default service.DefaultMaxGroupChangeRate, 1000; 0:
	// no bound): each is a Raft entry on every member. Past it a change
	// is refused with CodeLimitReached naming the limit (HTTP 429).
	MaxGroupChangeRate int
	// Logger receives connection and request errors (default slog.Default()).
	Logger *slog.Logger
	// ObserveRequest, when set, is told each answered request's op, whether
	// it was a consume that waited for data (a long poll), and the time from
	// its arrival to its response being queued for the socket. It runs on
	// event loops and connection goroutines and must be quick.
	ObserveRequest func(op protocol.Op, waited bool, took time.Duration)
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Addr:             "127.0.0.1:14353",
		MaxFrameSize:     protocol.DefaultMaxFrameSize,
		DefaultLimit:     -1,
		MaxConsumeBytes:  4 << 20,
		MaxWait:          time.Minute,
		MaxOutboundBytes: 16 << 20,
		MaxPending:       4096,
		MaxConns:         DefaultMaxConns(),
		MaxConnsPerAddr:  DefaultMaxConnsPerAddr,
		MaxControlRate:   DefaultMaxControlRate,
		StallTimeout:     time.Minute,
		MaxBufferedBytes: DefaultMaxBufferedBytes(),
		IdleTimeout:      DefaultIdleTimeout,
		MaxPreHelloFrame: DefaultMaxPreHelloFrame,
		HelloTimeout:     DefaultHelloTimeout,
		FilterWorkers:    DefaultFilterWorkers(),

		MaxGroupChangeRate: service.DefaultMaxGroupChangeRate,
	}
}

// DefaultFilterWorkers is the default Config.FilterWorkers: half of
// GOMAXPROCS, at least 1.
func DefaultFilterWorkers() int { return service.DefaultFilterWorkers() }

// Validate checks the configuration and fills in the Logger.
func (c *Config) Validate() error {
	switch {
	case c.Addr == "":
		return fmt.Errorf("%w: empty address", ErrInvalidConfig)
	case c.MaxFrameSize < protocol.HeaderSize+protocol.BatchHeaderSize+64:
		return fmt.Errorf("%w: max frame size %d is too small", ErrInvalidConfig, c.MaxFrameSize)
	case c.DefaultLimit < -1:
		return fmt.Errorf("%w: default limit %d: want -1 or more", ErrInvalidConfig, c.DefaultLimit)
	case c.MaxConsumeBytes < 1:
		return fmt.Errorf("%w: max consume bytes %d", ErrInvalidConfig, c.MaxConsumeBytes)
	case c.MaxWait < 0:
		return fmt.Errorf("%w: max wait %s", ErrInvalidConfig, c.MaxWait)
	case c.MaxOutboundBytes < 1 || c.MaxPending < 1:
		return fmt.Errorf("%w: max outbound bytes and max pending must be positive", ErrInvalidConfig)
	case c.StallTimeout <= 0:
		return fmt.Errorf("%w: stall timeout %s: want more than 0", ErrInvalidConfig, c.StallTimeout)
	case c.MaxConns < 1:
		return fmt.Errorf("%w: max conns %d: want 1 or more", ErrInvalidConfig, c.MaxConns)
	case c.MaxConnsPerAddr < 0:
		return fmt.Errorf("%w: max conns per address %d: want 0 (no bound) or more", ErrInvalidConfig, c.MaxConnsPerAddr)
	case c.MaxControlRate < 0:
		return fmt.Errorf("%w: max control rate %d: want 0 (no bound) or more", ErrInvalidConfig, c.MaxControlRate)
	case c.MaxGroupChangeRate < 0:
		return fmt.Errorf("%w: max group change rate %d: want 0 (no bound) or more", ErrInvalidConfig, c.MaxGroupChangeRate)
	case c.MaxBufferedBytes < 0:
		return fmt.Errorf("%w: max buffered bytes %d: want 0 (no bound) or more", ErrInvalidConfig, c.MaxBufferedBytes)
	case c.IdleTimeout < 0:
		return fmt.Errorf("%w: idle timeout %s: want 0 (never) or more", ErrInvalidConfig, c.IdleTimeout)
	case c.MaxPreHelloFrame != 0 && c.MaxPreHelloFrame < minPreHelloFrame:
		return fmt.Errorf("%w: max pre-hello frame %d: want %d or more, so that a hello fits (0: the default)", ErrInvalidConfig, c.MaxPreHelloFrame, minPreHelloFrame)
	case c.HelloTimeout < 0:
		return fmt.Errorf("%w: hello timeout %s: want 0 (never) or more", ErrInvalidConfig, c.HelloTimeout)
	case c.FilterWorkers < 0:
		return fmt.Errorf("%w: filter workers %d: want 1 or more (0: the default)", ErrInvalidConfig, c.FilterWorkers)
	case c.EventLoops < 0:
		return fmt.Errorf("%w: event loops %d", ErrInvalidConfig, c.EventLoops)
	}
	if c.FilterWorkers == 0 {
		c.FilterWorkers = DefaultFilterWorkers()
	}
	if c.MaxPreHelloFrame == 0 {
		c.MaxPreHelloFrame = DefaultMaxPreHelloFrame
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}
