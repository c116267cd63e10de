package server

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/broker/auth"
	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/broker/peer"
	"github.com/haraqa/haraqa/broker/replica"
)

// ClusterConfig configures a server's part of a cluster of replicated
// topics (Config.Cluster).
type ClusterConfig struct {
	// Addr is the cluster port's listening address, host:port (the
	// -cluster-port flag on -listen). Its Raft traffic and the commands
	// forwarded to the Raft leader go there.
	Addr string
	// Replicas is how many servers a new topic lives on (-replicas,
	// default 1); MinInsync the fewest in-sync replicas a produce with
	// acks=all is taken with (-min-insync, default 1).
	Replicas, MinInsync int
	// LagTime, AckTimeout, MemberTimeout: see package replica and
	// cluster (-replica-lag-time, -ack-timeout, -member-timeout).
	LagTime, AckTimeout, MemberTimeout time.Duration
	// LeaderBalance: how long a topic's first replica must have been in
	// sync before its leader hands the lead back to it (-leader-balance;
	// 0: never; package replica's Config.LeaderBalance).
	LeaderBalance time.Duration
	// LagBytes: a follower this many bytes behind leaves the in-sync set
	// too (-replica-lag-bytes; 0, the default: off).
	LagBytes int64
	// Token is what this server presents to the others, on their cluster
	// and binary ports (-cluster-token-file), required: without
	// -auth-file, the members' shared secret (at least MinClusterSecret
	// bytes), the one token the cluster port and the server-to-server and
	// membership ops take; with -auth-file, a token of its rules holding
	// the replication right on every topic.
	Token string
	// CAFile is a PEM file of the certificate authorities that issue the
	// servers' certificates (-cluster-ca). With TLSCertFile the servers
	// speak TLS to each other, on the cluster port and on a follower's
	// fetch from its leader's binary port, each presenting its
	// certificate and verifying the other's against these CAs, for the
	// host of the other's -peers entry (docs/replication.md, "TLS").
	// Default "": TLSClientCAFile if set, else the system's roots. Read
	// once, at Start.
	CAFile string
	// Join: this server joins a cluster that exists rather than form one
	// with -peers (-cluster-join): it waits until a member adds it
	// (hrqa cluster add). Its -peers name the members and itself.
	Join bool
	// FetchBytes is the most batch bytes a follower asks its leader for
	// in one fetch (default replica.DefaultFetchBytes, 4 MiB; no flag).
	FetchBytes int32
	// FetchWait is how long a leader may hold a follower's wait when no
	// topic has anything for it (default replica.DefaultFetchWait, 500
	// ms; no flag).
	FetchWait time.Duration
	// Listener, if set, is the cluster port's listener (tests).
	Listener net.Listener
}

// DefaultClusterPort is the cluster port's default (-cluster-port).
const DefaultClusterPort = 14355

// MinClusterSecret is the shortest members' secret taken without
// -auth-file: 16 bytes (`head -c 32 /dev/urandom | base64` gives 44).
const MinClusterSecret = 16

// startCluster opens the member's Raft node and starts the replica
// manager, whose service calls the broker was given (s.repl). It runs
// once the binary port serves, so that followers can fetch at once.
func (s *Server) startCluster() error {
	cc := s.cfg.Cluster
	self := -1
	var peers []cluster.Member
	for i, p := range s.cfg.Peers {
		web := p.HTTP
		if s.tls != nil {
			// Every member's HTTP port speaks TLS: redirects name https.
			web = "https://" + strings.TrimPrefix(web, "http://")
		}
		peers = append(peers, cluster.Member{ID: p.Addr, Raft: p.Raft, HTTP: web})
		if p.Addr == s.selfAddr() {
			self = i
		}
	}
	if self < 0 {
		return fmt.Errorf("%w: this server (%s) is not in -peers", ErrInvalidConfig, s.selfAddr())
	}
	// The cluster port takes only members: with -auth-file a token with
	// the replication right on every topic, else the members' secret.
	secret := []byte(cc.Token)
	authorize := func(tok string) bool {
		return subtle.ConstantTimeCompare([]byte(tok), secret) == 1
	}
	if s.auth != nil {
		a := s.auth
		authorize = func(tok string) bool {
			g, err := a.Authenticate("cluster", tok)
			return err == nil && g.AllowAll(auth.Replication)
		}
	}
	var serverTLS, clientTLS *tls.Config
	if s.certs != nil {
		pt, err := s.startPeerTLS()
		if err != nil {
			return err
		}
		serverTLS, clientTLS = pt.serverConfig(), pt.clientConfig()
	}
	node, err := cluster.Open(cluster.Config{
		Self: peers[self], Peers: peers, Dir: filepath.Join(s.cfg.Storage.Volumes[0], "cluster"),
		Listener: cc.Listener, ServerTLS: serverTLS, ClientTLS: clientTLS, Token: cc.Token, Authorize: authorize, Join: cc.Join,
		MemberTimeout: cc.MemberTimeout, OnChange: func(cluster.Command) { s.repl.Poke() }, LogEnds: s.repl.LogEndsOf,
		Logger: s.log.With("part", "cluster"),
	})
	if err != nil {
		return portInUse(err, "-cluster-port", "", peers[self].Raft)
	}
	s.node = node
	s.repl.Start(node)
	s.log.Info("cluster member", "id", peers[self].ID, "cluster_port", peers[self].Raft, "members", len(peers),
		"replicas", cc.Replicas, "min_insync", cc.MinInsync, "tls", serverTLS != nil)
	return nil
}

// startPeerTLS reads the CAs the members' certificates are verified
// against and puts the servers' TLS to each other in force. mu must be
// held, and s.certs set.
func (s *Server) startPeerTLS() (*peerTLS, error) {
	caFile := s.cfg.Cluster.CAFile
	if caFile == "" {
		caFile = s.cfg.TLSClientCAFile
	}
	hosts := make([]string, 0, len(s.cfg.Peers))
	for _, p := range s.cfg.Peers {
		if h, _, err := net.SplitHostPort(p.Addr); err == nil {
			hosts = append(hosts, h)
		}
	}
	pt, err := newPeerTLS(s.certs, caFile, hosts)
	if err != nil {
		return nil, err
	}
	s.certs.peers.Store(pt)
	ca := caFile
	if ca == "" {
		ca = "the system's roots"
	}
	s.log.Info("cluster TLS: members verified", "ca", ca, "hosts", strings.Join(pt.hosts, ","))
	return pt, nil
}

// newReplicas returns the replica manager of the cluster configuration.
func (s *Server) newReplicas() *replica.Manager {
	cc := s.cfg.Cluster
	// No retries on a broken connection (a peer.Conn never retries):
	// the follower's loop does, and a dial that retried a dead leader
	// held up following the next one (a replicated log's apply in
	// broker/replica waits for the loop to stop).
	opts := peer.Options{Name: "haraqa-replica", Token: cc.Token}
	return replica.New(s.store, replica.Config{
		Self: s.selfAddr(), Replicas: cc.Replicas, MinInsync: cc.MinInsync,
		LagTime: cc.LagTime, LagBytes: cc.LagBytes, AckTimeout: cc.AckTimeout, FetchBytes: cc.FetchBytes, FetchWait: cc.FetchWait,
		LeaderBalance: cc.LeaderBalance,
		Lease:         min(cc.memberTimeout()/2, cluster.DefaultMemberTimeout/2),
		Dial:          s.dialMember(opts),
		ParseMember:   s.parseMember,
		Logger:        s.log.With("part", "replica"),
	})
}

// parseMember reads a server's -peers entry, as hrqa cluster add sends
// it, as a member: its HTTP and cluster ports default to this server's.
func (s *Server) parseMember(entry string) (cluster.Member, error) {
	port := func(addr string) int {
		_, p, _ := net.SplitHostPort(addr)
		n, _ := strconv.Atoi(p)
		return n
	}
	peers, err := ParsePeers(entry, port(s.cfg.HTTPAddr), port(s.cfg.Cluster.Addr))
	if err != nil {
		return cluster.Member{}, err
	}
	if len(peers) != 1 {
		return cluster.Member{}, fmt.Errorf("%w: %d servers given, one wanted", ErrInvalidConfig, len(peers))
	}
	p := peers[0]
	web := p.HTTP
	if s.tls != nil {
		web = "https://" + strings.TrimPrefix(web, "http://")
	}
	return cluster.Member{ID: p.Addr, Raft: p.Raft, HTTP: web}, nil
}

// dialMember returns the replica manager's Dial: a connection to another
// member's binary port with opts, over TLS when this server has
// certificate files (startPeerTLS sets it up before the first dial). A
// TLS refusal either way is logged as a warning, at most once every
// peerWarnEvery: it keeps a follower out of the in-sync set, and an
// unreachable leader is only the follower's debug log.
func (s *Server) dialMember(opts peer.Options) func(ctx context.Context, addr string) (*peer.Conn, error) {
	certs := s.certs // set by startTLS, before this; mu is held
	var lastWarn atomic.Int64
	return func(ctx context.Context, addr string) (*peer.Conn, error) {
		o := opts
		if certs != nil {
			pt := certs.peers.Load()
			if pt == nil {
				return nil, fmt.Errorf("%w: the cluster's TLS is not set up yet", ErrState)
			}
			o.TLS = pt.clientConfig()
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c, err := peer.Dial(ctx, addr, o)
		if err != nil && isTLSRefusal(err) {
			if now := time.Now().UnixNano(); now-lastWarn.Load() >= int64(peerWarnEvery) {
				lastWarn.Store(now)
				s.log.Warn("cluster TLS: the connection to a leader's binary port failed on a certificate: this follower cannot fetch from it",
					"leader", addr, "err", err)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("server: dialing the member %s: %w", addr, err)
		}
		return c, nil
	}
}

// peerWarnEvery spaces the warnings of refused member connections: a
// follower retries its leader all the time.
const peerWarnEvery = 10 * time.Second

// isTLSRefusal reports whether err is a TLS handshake that failed on a
// certificate: this side's check of the other's, or the other's alert.
func isTLSRefusal(err error) bool {
	var cv *tls.CertificateVerificationError
	var op *net.OpError
	return errors.As(err, &cv) || errors.As(err, &op) && op.Op == "remote error"
}

func (cc *ClusterConfig) memberTimeout() time.Duration {
	if cc.MemberTimeout > 0 {
		return cc.MemberTimeout
	}
	return cluster.DefaultMemberTimeout
}

// selfAddr is this server's member ID: its binary address as -peers
// spells it.
func (s *Server) selfAddr() string { return s.cfg.Broker.Addr }

// checkCluster checks a cluster configuration.
func (c *Config) checkCluster() error {
	cc := c.Cluster
	if cc == nil {
		return nil
	}
	switch {
	case len(c.Peers) == 0:
		return fmt.Errorf("%w: a cluster needs -peers: every server, this one among them", ErrInvalidConfig)
	case cc.Replicas < 1 || cc.Replicas > len(c.Peers):
		return fmt.Errorf("%w: -replicas %d: want 1 to the %d servers of -peers", ErrInvalidConfig, cc.Replicas, len(c.Peers))
	case cc.MinInsync < 1 || cc.MinInsync > cc.Replicas:
		return fmt.Errorf("%w: -min-insync %d: want 1 to -replicas (%d)", ErrInvalidConfig, cc.MinInsync, cc.Replicas)
	case c.TLS != nil && c.TLSCertFile == "":
		return fmt.Errorf("%w: a cluster's servers speak TLS to each other with certificate files (-tls-cert, -tls-key), not a TLS configuration alone", ErrInvalidConfig)
	case cc.CAFile != "" && c.TLSCertFile == "":
		return fmt.Errorf("%w: -cluster-ca needs -tls-cert and -tls-key: without them the servers speak plaintext to each other", ErrInvalidConfig)
	case cc.Token == "" && c.AuthFile != "":
		return fmt.Errorf("%w: with -auth-file a cluster needs -cluster-token-file: a token with the replication right on every topic, which each server presents to the others", ErrInvalidConfig)
	case cc.Token == "":
		return fmt.Errorf("%w: a cluster needs -cluster-token-file: the members' shared secret, the same file on every server; make one with `head -c 32 /dev/urandom | base64 > cluster.token`", ErrInvalidConfig)
	case len(cc.Token) < MinClusterSecret && c.AuthFile == "":
		return fmt.Errorf("%w: the -cluster-token-file secret is %d bytes: want at least %d (`head -c 32 /dev/urandom | base64 > cluster.token`)", ErrInvalidConfig, len(cc.Token), MinClusterSecret)
	case !slices.ContainsFunc(c.Peers, func(p Peer) bool { return p.Raft != "" }):
		return fmt.Errorf("%w: the peers have no cluster ports", ErrInvalidConfig)
	}
	return nil
}

// readToken reads a token file: its first line.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok, _, _ := bytesCutLine(b)
	if tok == "" {
		return "", errors.New("the token file is empty")
	}
	return tok, nil
}

func bytesCutLine(b []byte) (string, string, bool) {
	for i, c := range b {
		if c == '\n' || c == '\r' {
			return string(b[:i]), string(b[i:]), true
		}
	}
	return string(b), "", false
}
