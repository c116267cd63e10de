package server

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/haraqa/haraqa/broker/httpapi"
)

// ParseFlags maps the haraqa binary's command line (the original haraqa's
// flags, with its defaults, and ours) onto a server configuration. Usage
// and the flag package's errors go to stderr, which also receives the
// logs of the Logger it sets. With -h it returns flag.ErrHelp.
func ParseFlags(args []string, stderr io.Writer) (Config, error) {
	c := DefaultConfig()
	var f cliFlags
	fs := newFlagSet(&c, &f, stderr)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.Storage.Volumes = fs.Args()
	if err := c.applyFlags(&f, fs.Usage, stderr); err != nil {
		return c, err
	}
	return c, nil
}

// cliFlags are the flags that map onto no Config field as they are.
type cliFlags struct {
	httpPort, tcpPort       uint
	listen, logLevel, peers string

	cluster, clusterJoin                              bool
	clusterPort                                       uint
	replicas, minInsync                               int
	lagTime, ackTimeout, memberTimeout, leaderBalance time.Duration
	lagBytes                                          int64
	clusterTokenFile, clusterCA                       string
}

// newFlagSet defines the haraqa binary's flags: onto c's fields, or f's.
func newFlagSet(c *Config, f *cliFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("haraqa", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.UintVar(&f.httpPort, "http", 4353, "HTTP port: REST API, API docs, Prometheus metrics, health checks")
	fs.UintVar(&f.tcpPort, "tcp", 14353, "binary protocol port")
	fs.StringVar(&f.listen, "listen", "0.0.0.0", "address to listen on")
	fs.BoolVar(&c.Storage.Cache, "cache", true, "keep segment files open between reads")
	fs.BoolVar(&c.HTTP.CORS, "cors", true, "send CORS headers on the HTTP port: pages of any origin may read (GET, HEAD)")
	fs.Func("cors-origins", "comma-separated origins (scheme://host[:port], or *) whose pages may also POST, PUT, PATCH and DELETE on the HTTP port; others are refused 403 (default none)", func(v string) (err error) { c.HTTP.CORSOrigins, err = httpapi.ParseOrigins(v); return err })
	fs.BoolVar(&c.HTTP.Docs, "docs", true, "serve the API docs on the HTTP port")
	fs.BoolVar(&c.HTTP.Prometheus, "prometheus", true, "serve Prometheus metrics on the HTTP port")
	fs.BoolVar(&c.HTTP.Pprof, "pprof", false, "serve Go runtime profiles at /debug/pprof/ on the HTTP port")
	fs.IntVar(&c.Storage.Entries, "entries", 5000, "messages per segment file before a new one starts")
	fs.IntVar(&c.Broker.DefaultLimit, "limit", -1, "default consume limit in messages; -1: no limit beyond the byte bound")
	fs.Int64Var(&c.Ballast, "ballast", 0, "GC ballast in bytes (address space only, but counted toward -memory-limit; 0 to disable)")
	fs.Int64Var(&c.MemoryLimit, "memory-limit", -1, "the Go runtime's soft memory limit in bytes (as GOMEMLIMIT); -1: -max-buffered-bytes and a quarter plus 128 MiB, unless GOMEMLIMIT is set; 0: the runtime's own")
	fs.TextVar(&c.Storage.Fsync, "fsync", c.Storage.Fsync, "when to fsync: always (before every ack, group-committed), interval, never")
	fs.DurationVar(&c.Storage.FsyncInterval, "fsync-interval", time.Second, "fsync period with -fsync interval")
	fs.IntVar(&c.Broker.MaxFrameSize, "max-frame", c.Broker.MaxFrameSize, "largest request frame in bytes")
	fs.IntVar(&c.Broker.MaxConsumeBytes, "max-consume-bytes", 4<<20, "largest consume response in batch bytes")
	fs.Int64Var(&c.Storage.MinFreeBytes, "min-free-bytes", c.Storage.MinFreeBytes, "refuse produces while a volume has less free space; -1: 2% of the volume, at most 64 MiB; 0: no floor")
	fs.IntVar(&c.Broker.MaxConns, "max-conns", c.Broker.MaxConns, "most descriptors the binary protocol connections hold: one per connection, 3 per TLS connection; the default is three eighths of the descriptor limit less 64, at most 65536. A cluster member's connection (a token with the replication right on every topic) counts only until its hello")
	fs.IntVar(&c.Broker.MaxConnsPerAddr, "max-conns-per-addr", c.Broker.MaxConnsPerAddr, "most binary protocol connections from one client IP address (0: no bound); a cluster member's connection counts only until its hello")
	fs.IntVar(&c.Broker.MaxControlRate, "max-control-rate", c.Broker.MaxControlRate, "control requests a second per binary protocol connection, every request but produce, consume, import and hello, in bursts of a tenth of a second's worth; past it the connection is not read until the next is due (0: no bound)")
	fs.IntVar(&c.MaxHTTPConns, "max-http-conns", c.MaxHTTPConns, "most open HTTP connections, keep-alives included; one more is answered 503; the default is an eighth of the descriptor limit less 64, at most 65536")
	fs.IntVar(&c.Storage.MaxOpenFiles, "max-open-files", c.Storage.MaxOpenFiles, "most segment files held open, read and write together; idle ones are closed past it; the default is half the descriptor limit less 64")
	fs.Int64Var(&c.Broker.MaxBufferedBytes, "max-buffered-bytes", c.Broker.MaxBufferedBytes, "bytes buffered for all connections of both ports together (binary frames and output, HTTP bodies and responses); over it binary connections holding output are not read, those gathering the largest unfinished frames are closed and HTTP requests get 429; the default is a quarter of physical memory, at most 1 GiB; 0: no bound")
	fs.Int64Var(&c.HTTP.MaxBufferedBytes, "max-http-buffered-bytes", -1, "bytes the HTTP port's requests hold at once (bodies, consumes' batches and decoded bodies), within -max-buffered-bytes; a request that does not fit waits up to a second, then gets 429 with Retry-After; -1: a quarter of -max-buffered-bytes, at least 64 MiB")
	fs.IntVar(&c.Storage.DecodeWorkers, "decode-workers", c.Storage.DecodeWorkers, "most compressed batches decoded at once to check them, off the event loops; the default is GOMAXPROCS less one, at least 1")
	fs.DurationVar(&c.Broker.IdleTimeout, "idle-timeout", c.Broker.IdleTimeout, "close binary protocol connections that hold nothing, or only part of a frame, and received nothing this long (0: never)")
	fs.DurationVar(&c.Broker.HelloTimeout, "hello-timeout", c.Broker.HelloTimeout, "with -auth-file: close binary protocol connections that have not said hello with a valid token this long after opening (0: never)")
	fs.IntVar(&c.Broker.MaxPreHelloFrame, "max-prehello-frame", c.Broker.MaxPreHelloFrame, "with -auth-file: largest frame in bytes a binary protocol connection may send before its hello succeeds; a larger one is refused and the connection closed")
	fs.DurationVar(&c.Storage.RetentionAge, "retention-age", 0, "delete segments older than this (0: keep)")
	fs.Int64Var(&c.Storage.RetentionBytes, "retention-bytes", 0, "keep at most about this many bytes per topic (0: no limit)")
	fs.DurationVar(&c.Storage.RetentionCheck, "retention-check", time.Minute, "how often retention runs")
	fs.DurationVar(&c.Storage.ProducerIdle, "producer-idle", c.Storage.ProducerIdle, "how long a topic remembers an idempotent producer after its last batch, to answer a batch sent again with its first offset")
	fs.IntVar(&c.Storage.MaxProducers, "max-producers", c.Storage.MaxProducers, "most idempotent producers a topic remembers, a quarter of them per token; past it idle ones go first, then the oldest of the token holding the most")
	fs.IntVar(&c.Storage.MaxGroupsPerToken, "max-groups-per-token", c.Storage.MaxGroupsPerToken, "most consumer groups one token creates and holds over all topics (committed, or a live lease); past it a new group is refused with limit reached")
	fs.IntVar(&c.Broker.MaxGroupChangeRate, "max-group-change-rate", c.Broker.MaxGroupChangeRate, "with -cluster and -auth-file: group commits, leases, releases and deletions a second per token on the replicated topics this server leads (each a Raft entry), in bursts of a second's worth; past it one is refused with limit reached (HTTP 429) (0: no bound)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.AuthFile, "auth-file", "", "file of token hashes and their rights (see docs/security.md); every request on both ports then needs a token; reread on SIGHUP")
	fs.Float64Var(&c.HTTP.RefusalRate, "http-refusal-rate", c.HTTP.RefusalRate, "refused HTTP requests (401, 403, 429) a second from one client address, a second's worth at once; past it each refusal's answer waits until the next is due, at most 2 s (negative: no bound)")
	fs.Float64Var(&c.HTTP.MaxMetricsRate, "max-metrics-rate", c.HTTP.MaxMetricsRate, "/metrics responses a second, all clients together (a burst of twice as many); one more is answered 429")
	fs.BoolVar(&c.HTTP.AuthMetrics, "auth-metrics", c.HTTP.AuthMetrics, "with -auth-file: /metrics needs a token with the metrics right and shows only the topics it is held on, /docs a valid token; -auth-metrics=false opens both")
	fs.StringVar(&c.TLSCertFile, "tls-cert", "", "PEM certificate (chain) file: both ports speak TLS only, and with -cluster the servers speak TLS to each other, presenting it (it must name this server's -peers host); reloaded on SIGHUP and when the file changes")
	fs.StringVar(&c.TLSKeyFile, "tls-key", "", "PEM private key file of -tls-cert")
	fs.StringVar(&c.TLSClientCAFile, "tls-client-ca", "", "PEM file of the CAs whose client certificates both ports then require (mutual TLS); with -cluster also the default of -cluster-ca")
	fs.StringVar(&f.peers, "peers", "", "comma-separated binary protocol addresses of the servers sharing the topics, this one among them, as clients are given them (host:port, or host:port/httpport when a peer's HTTP port is not -http); the HTTP port then redirects (307) requests for topics that live on another")
	fs.BoolVar(&f.cluster, "cluster", false, "make the -peers one cluster of replicated topics: their metadata in a Raft group on each server's -cluster-port, each topic on -replicas of them, led by one (docs/replication.md); implied by -replicas over 1")
	fs.UintVar(&f.clusterPort, "cluster-port", DefaultClusterPort, "with -cluster: the port of the Raft group and of the commands servers forward to its leader, on -listen; a peer's is taken to be the same unless its -peers entry gives it (host:port/httpport/clusterport)")
	fs.IntVar(&f.replicas, "replicas", 1, "with -cluster: how many servers a new topic lives on; over 1 implies -cluster")
	fs.IntVar(&f.minInsync, "min-insync", 1, "with -cluster: the fewest in-sync replicas a produce with acks=all is taken with (else code not enough replicas) and the high-water mark advances with")
	fs.DurationVar(&f.lagTime, "replica-lag-time", 5*time.Second, "with -cluster: a follower that has not reached its leader's end for this long leaves the in-sync set")
	fs.Int64Var(&f.lagBytes, "replica-lag-bytes", 0, "with -cluster: a follower more than this many bytes of batches behind its leader's end leaves the in-sync set too (0: off, the time bound alone)")
	fs.DurationVar(&f.ackTimeout, "ack-timeout", 10*time.Second, "with -cluster: how long a produce with acks=all waits for its in-sync replicas before it is answered not enough replicas")
	fs.DurationVar(&f.memberTimeout, "member-timeout", 1500*time.Millisecond, "with -cluster: how long the Raft leader's heartbeats to a server may fail before its topics get new leaders")
	fs.DurationVar(&f.leaderBalance, "leader-balance", 30*time.Second, "with -cluster: a topic's first replica (its preferred leader) that has been live and in sync this long while another replica leads takes the lead back, so that leaders spread again after failovers and restarts (0: never)")
	fs.BoolVar(&f.clusterJoin, "cluster-join", false, "with -cluster: join a cluster that exists (its members and this server in -peers) rather than form one; a member adds it with hrqa cluster add")
	fs.StringVar(&f.clusterTokenFile, "cluster-token-file", "", "with -cluster, required: file whose first line is the token this server presents to the others: the members' shared secret, the same file on every server (make one with: head -c 32 /dev/urandom | base64 > cluster.token); with -auth-file, a token of its rules with the replication right on every topic")
	fs.StringVar(&f.clusterCA, "cluster-ca", "", "with -cluster and -tls-cert: PEM file of the CAs that issued the servers' certificates; each server verifies the others' against them, for the host of their -peers entry (default -tls-client-ca if given, else the system's roots; read at start)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: haraqa [flags] VOLUME...\n\n"+
			"Serves topics stored on the volumes (directories). Messages are written to every\n"+
			"volume in the order given and read from the last. Example:\n\n"+
			"  haraqa -tcp 14353 /vol1 /vol2 /vol3\n\nflags:\n")
		fs.PrintDefaults()
	}
	return fs
}

// applyFlags checks the volumes and the flags of f, and sets what follows
// from them in c. usage prints the usage, for a command line without
// volumes; the Logger it sets writes to stderr.
func (c *Config) applyFlags(f *cliFlags, usage func(), stderr io.Writer) error {
	for _, v := range c.Storage.Volumes {
		if v == "true" || v == "false" {
			// "-cache false" sets -cache and makes "false" a volume.
			return fmt.Errorf("volume %q looks like a flag value: write boolean flags as -flag=false", v)
		}
	}
	if len(c.Storage.Volumes) == 0 {
		usage()
		return errors.New("at least one volume is required")
	}
	if f.httpPort > 65535 || f.tcpPort > 65535 {
		return errors.New("ports must be at most 65535")
	}
	clusterPort := 0
	if f.cluster || f.replicas > 1 {
		if f.clusterPort == 0 || f.clusterPort > 65535 {
			return errors.New("-cluster-port must be 1 to 65535")
		}
		clusterPort = int(f.clusterPort)
		c.Cluster = &ClusterConfig{Addr: net.JoinHostPort(f.listen, strconv.Itoa(clusterPort)), Replicas: f.replicas,
			MinInsync: f.minInsync, LagTime: f.lagTime, LagBytes: f.lagBytes, AckTimeout: f.ackTimeout, MemberTimeout: f.memberTimeout,
			LeaderBalance: f.leaderBalance}
		if f.lagBytes < 0 {
			return errors.New("-replica-lag-bytes must not be negative")
		}
		if f.leaderBalance < 0 {
			return errors.New("-leader-balance must not be negative")
		}
		if f.clusterTokenFile != "" {
			tok, err := readToken(f.clusterTokenFile)
			if err != nil {
				return fmt.Errorf("-cluster-token-file: %w", err)
			}
			c.Cluster.Token = tok
		}
		c.Cluster.CAFile = f.clusterCA
		c.Cluster.Join = f.clusterJoin
	} else if f.clusterCA != "" {
		return errors.New("-cluster-ca needs -cluster")
	} else if f.clusterJoin {
		return errors.New("-cluster-join needs -cluster")
	}
	list, err := ParsePeers(f.peers, int(f.httpPort), clusterPort)
	if err != nil {
		return err
	}
	c.Peers = list
	if err := checkPeers(c, f.tcpPort); err != nil {
		return err
	}
	if err := c.checkCluster(); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return fmt.Errorf("-log-level %q: want debug, info, warn or error", f.logLevel)
	}
	c.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	c.Storage.MaxBatchBytes = c.Broker.MaxFrameSize
	c.HTTP.MaxBodyBytes = int64(c.Broker.MaxFrameSize)
	c.HTTP.DefaultLimit = c.Broker.DefaultLimit
	c.HTTP.MaxConsumeBytes = int64(c.Broker.MaxConsumeBytes)
	c.Broker.Addr = net.JoinHostPort(f.listen, strconv.Itoa(int(f.tcpPort)))
	c.HTTPAddr = net.JoinHostPort(f.listen, strconv.Itoa(int(f.httpPort)))
	return nil
}
