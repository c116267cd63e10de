package client

import (
	"crypto/tls"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// Option configures a Client.
type Option func(*options)

type options struct {
	dialTimeout    time.Duration
	requestTimeout time.Duration
	retries        int
	backoff        time.Duration
	autoCreate     bool
	acksLeader     bool // WithAcks(AcksLeader)
	codec          protocol.Codec
	maxBatchBytes  int
	maxResponse    int // 0: responseLimit's default
	idleTimeout    time.Duration
	token          string      // sent in a hello on each new connection; "" none
	name           string      // the client's name in the hello
	tls            *tls.Config // nil: plaintext
	locateTimeout  time.Duration
	attemptTimeout time.Duration // WithAttemptTimeout; 0: off
	idempotent     bool
}

func defaultOptions() options {
	return options{
		dialTimeout:    5 * time.Second,
		requestTimeout: 30 * time.Second,
		retries:        3,
		backoff:        100 * time.Millisecond,
		autoCreate:     true,
		codec:          protocol.CodecNone,
		maxBatchBytes:  protocol.DefaultMaxFrameSize - 1024,
		idleTimeout:    DefaultIdleTimeout,
		name:           "haraqa-go",
		locateTimeout:  DefaultLocateTimeout,
		attemptTimeout: DefaultAttemptTimeout,
		idempotent:     true,
	}
}

// WithIdempotence turns idempotent produce on or off (default on). On,
// every batch of Produce, ProduceMessages and a Producer carries a
// producer id and a sequence number, so a batch sent again after a broken
// connection is stored once: the server answers it with the offset it got
// the first time. Off, batches carry neither (they are version 1 batches,
// readable by older consumers) and a produce that may have reached the
// server is not sent again.
func WithIdempotence(on bool) Option { return func(o *options) { o.idempotent = on } }

// WithToken makes the client present token to the server: in a hello
// (protocol op 9), the first request on every connection it opens,
// reconnections included. A server started with -auth-file needs one for
// every request but Ping: without it requests fail with
// ErrUnauthenticated, and those the token does not allow with
// ErrForbidden. A server without an auth file accepts any token. A token
// the server does not hold fails Dial (or the first request on a new
// connection) with ErrUnauthenticated; too many such failures from one
// address, with ErrLimitReached for a while.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// WithClientName sets the name the client gives in its hello, which a
// server may log (default "haraqa-go"; at most 255 bytes). It is sent only
// with WithToken.
func WithClientName(name string) Option { return func(o *options) { o.name = name } }

// WithDialTimeout bounds each connection attempt (default 5s).
func WithDialTimeout(d time.Duration) Option { return func(o *options) { o.dialTimeout = d } }

// WithRequestTimeout bounds each request when its context has no earlier
// deadline (default 30s). A long poll's wait is added to it.
func WithRequestTimeout(d time.Duration) Option { return func(o *options) { o.requestTimeout = d } }

// WithRetries sets how many times a request that failed on a broken
// connection is sent again on a new one, waiting backoff, doubled each
// time, in between (default 3 and 100ms). See the package doc for which
// requests are retried.
func WithRetries(n int, backoff time.Duration) Option {
	return func(o *options) { o.retries, o.backoff = max(n, 0), backoff }
}

// DefaultIdleTimeout is the default WithIdleTimeout: a minute under the
// server's default -idle-timeout (10 minutes), as Kafka's clients keep 9
// minutes under their brokers' 10.
const DefaultIdleTimeout = 9 * time.Minute

// WithIdleTimeout makes the client drop a connection on which no request
// was sent for d and none is waiting, and dial a new one for the next
// request, so that a request does not race the server closing the idle
// connection (default DefaultIdleTimeout; 0: keep connections however long
// they idle). Keep it under the server's -idle-timeout. Nothing runs while
// the client idles: the check is made when the next request is sent.
func WithIdleTimeout(d time.Duration) Option { return func(o *options) { o.idleTimeout = max(d, 0) } }

// WithTLS makes the client speak TLS with cfg, for a server started with
// -tls-cert and -tls-key (default: plaintext). The handshake is part of
// each connection attempt, bounded by WithDialTimeout and the context.
// cfg.ServerName, when empty, is the host of the address dialed. See
// TLSConfigFromFiles for a configuration made from PEM files.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithAutoCreate makes Produce create a missing topic (default true).
func WithAutoCreate(on bool) Option { return func(o *options) { o.autoCreate = on } }

// Acks says when a produce to a replicated topic is answered.
type Acks int

const (
	// AcksAll (the default): once every in-sync replica has the batch
	// (and, with the server's -fsync always, has fsynced it), so a
	// leader's death loses no acknowledged message.
	AcksAll Acks = iota
	// AcksLeader: once the leader has it. A leader that dies before its
	// followers copied the batch loses it (docs/replication.md).
	AcksLeader
)

// WithAcks sets when produces to replicated topics are answered (default
// AcksAll). Topics that are not replicated are answered once stored.
func WithAcks(a Acks) Option { return func(o *options) { o.acksLeader = a == AcksLeader } }

// WithCompression compresses produced batches with codec (default
// CompressionNone; CompressionS2 or CompressionZstd).
func WithCompression(codec Compression) Option { return func(o *options) { o.codec = codec } }

// WithMaxBatchBytes bounds the encoded size of one produced batch (default
// just under the server's default 64 MiB frame limit).
func WithMaxBatchBytes(n int) Option { return func(o *options) { o.maxBatchBytes = n } }

// WithMaxResponseBytes bounds the size of one response frame the client
// reads (default: the larger of the server's default frame limit and
// WithMaxBatchBytes, plus 64 KiB of framing, so that whatever the client
// may produce it can consume again; a consume response carries at least
// one whole batch). Consume requests ask for no more batch bytes than a
// response within it holds (and at most 4 MiB), so only a single batch
// larger than that, produced by another client, can exceed it: such a
// response fails its request with ErrResponseTooLarge, naming both sizes.
// Its bytes are read and dropped, so the connection stays usable.
func WithMaxResponseBytes(n int) Option { return func(o *options) { o.maxResponse = n } }

// responseLimit is the largest response frame read.
func (o *options) responseLimit() int {
	if o.maxResponse > 0 {
		return o.maxResponse
	}
	return max(protocol.DefaultMaxFrameSize, o.maxBatchBytes) + 64<<10
}
