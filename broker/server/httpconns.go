package server

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/storage"
)

// This file: the HTTP port's connection limit. The HTTP port's connections
// hold descriptors as the binary port's do, and keep-alives hold them
// between requests: without a bound of their own, a client that opens
// enough of them takes the descriptors the binary port and the segment
// files need. The listener counts the connections it hands to http.Server
// and answers one past Config.MaxHTTPConns with a 503 naming the limit.

// DefaultMaxHTTPConns derives the HTTP port's default connection limit
// from the process's descriptor limit: an eighth of what
// broker.DescriptorReserve leaves, at least 1 and at most 65536. With the
// binary port's three eighths (broker.DefaultMaxConns) and the segment
// files' half (storage.DefaultMaxOpenFiles), the defaults and the reserve
// fit the limit.
func DefaultMaxHTTPConns() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 65536
	}
	return DefaultMaxHTTPConnsFor(int(rl.Cur))
}

// DefaultMaxHTTPConnsFor is DefaultMaxHTTPConns for a descriptor limit of
// nofile.
func DefaultMaxHTTPConnsFor(nofile int) int {
	return max(1, min((nofile-broker.DescriptorReserve)/8, 65536))
}

// fitCluster makes the descriptor budgets left at their defaults fit the
// descriptor limit with the cluster port's (cluster.Descriptors): without
// it, a flood of that port could take the descriptors the binary port,
// the HTTP port and the segment files were promised.
func (c *Config) fitCluster() {
	var rl unix.Rlimit
	if c.Cluster == nil || unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) != nil || rl.Cur > 1<<30 {
		return
	}
	nofile := int(rl.Cur) - cluster.Descriptors
	if c.Broker.MaxConns == broker.DefaultMaxConns() {
		c.Broker.MaxConns = broker.DefaultMaxConnsFor(nofile)
	}
	if c.MaxHTTPConns == DefaultMaxHTTPConns() {
		c.MaxHTTPConns = DefaultMaxHTTPConnsFor(nofile)
	}
	if c.Storage.MaxOpenFiles == storage.DefaultMaxOpenFiles() {
		c.Storage.MaxOpenFiles = storage.DefaultMaxOpenFilesFor(nofile)
	}
}

// refuseTimeout bounds the answer to a connection over the limit: reading
// its request (and, on a TLS port, its handshake) and writing the 503.
const refuseTimeout = time.Second

// maxRefusing bounds the refused connections being answered at once: past
// it, one more is closed without an answer, so that a flood past the limit
// holds no more descriptors than this.
const maxRefusing = 16

// refusedLogEvery rate-limits the log line of refused connections.
const refusedLogEvery = 10 * time.Second

// limitListener counts the connections it accepts until they close, and
// refuses one past max.
type limitListener struct {
	net.Listener
	max      int
	tls      *tls.Config // the port's TLS, for the refusal; nil: plaintext
	log      *slog.Logger
	open     atomic.Int64
	refusing atomic.Int64
	refused  atomic.Int64 // since the last log line
	lastLog  atomic.Int64 // Unix nanoseconds of the last log line
}

func newLimitListener(ln net.Listener, maxConns int, tc *tls.Config, log *slog.Logger) *limitListener {
	return &limitListener{Listener: ln, max: maxConns, tls: tc, log: log}
}

// Accept returns the next connection within the limit; those past it are
// answered and closed on their own goroutines.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if int(l.open.Add(1)) <= l.max {
			return &countedConn{Conn: c, open: &l.open}, nil
		}
		l.open.Add(-1)
		l.logRefusal()
		if l.refusing.Add(1) > maxRefusing {
			l.refusing.Add(-1)
			c.Close()
			continue
		}
		go l.refuse(c)
	}
}

// logRefusal logs a refusal at most once per refusedLogEvery, with the
// count since the last line.
func (l *limitListener) logRefusal() {
	n := l.refused.Add(1)
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last < int64(refusedLogEvery) || !l.lastLog.CompareAndSwap(last, now) {
		return
	}
	l.refused.Add(-n)
	l.log.Warn("HTTP connection refused: the HTTP connection limit is reached", "max_http_conns", l.max, "refused", n)
}

// refuse reads the request of a connection over the limit and answers it
// with a 503 naming the limit, then closes it.
func (l *limitListener) refuse(c net.Conn) {
	defer l.refusing.Add(-1)
	if l.tls != nil {
		c = tls.Server(c, l.tls)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(refuseTimeout))
	req, err := http.ReadRequest(bufio.NewReader(io.LimitReader(c, 64<<10)))
	if err != nil {
		return
	}
	req.Body.Close()
	msg := fmt.Sprintf("too many connections: the server's HTTP connection limit (-max-http-conns) of %d is reached\n", l.max)
	_, _ = fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"+
		"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
}

// countedConn gives its slot back when it is first closed.
type countedConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.open.Add(-1) })
	return err
}
