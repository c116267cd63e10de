package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/haraqa/haraqa/broker/auth"
	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/broker/replica"
	"github.com/haraqa/haraqa/client"
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
	// Token is what this server presents to the others, on their cluster
	// and binary ports: with -auth-file it must hold the replication
	// right on every topic (-cluster-token-file).
	Token string
	// Listener, if set, is the cluster port's listener (tests).
	Listener net.Listener
}

// DefaultClusterPort is the cluster port's default (-cluster-port).
const DefaultClusterPort = 14355

// startCluster opens the member's Raft node and starts the replica
// manager, whose service calls the broker was given (s.repl). It runs
// once the binary port serves, so that followers can fetch at once.
func (s *Server) startCluster() error {
	cc := s.cfg.Cluster
	self := -1
	var peers []cluster.Member
	for i, p := range s.cfg.Peers {
		peers = append(peers, cluster.Member{ID: p.Addr, Raft: p.Raft, HTTP: p.HTTP})
		if p.Addr == s.selfAddr() {
			self = i
		}
	}
	if self < 0 {
		return fmt.Errorf("%w: this server (%s) is not in -peers", ErrInvalidConfig, s.selfAddr())
	}
	var authorize func(string) bool
	if s.auth != nil {
		a := s.auth
		authorize = func(tok string) bool {
			g, err := a.Authenticate("cluster", tok)
			return err == nil && g.AllowAll(auth.Replication)
		}
	}
	node, err := cluster.Open(cluster.Config{
		Self: peers[self], Peers: peers, Dir: filepath.Join(s.cfg.Storage.Volumes[0], "cluster"),
		Listener: cc.Listener, Token: cc.Token, Authorize: authorize,
		MemberTimeout: cc.MemberTimeout, OnChange: func(cluster.Command) { s.repl.Poke() },
		Logger: s.log.With("part", "cluster"),
	})
	if err != nil {
		return err
	}
	s.node = node
	s.repl.Start(node)
	s.log.Info("cluster member", "id", peers[self].ID, "cluster_port", peers[self].Raft, "members", len(peers),
		"replicas", cc.Replicas, "min_insync", cc.MinInsync)
	return nil
}

// newReplicas returns the replica manager of the cluster configuration.
func (s *Server) newReplicas() *replica.Manager {
	cc := s.cfg.Cluster
	opts := []client.Option{client.WithClientName("haraqa-replica"), client.WithAutoCreate(false)}
	if cc.Token != "" {
		opts = append(opts, client.WithToken(cc.Token))
	}
	return replica.New(s.store, replica.Config{
		Self: s.selfAddr(), Replicas: cc.Replicas, MinInsync: cc.MinInsync,
		LagTime: cc.LagTime, AckTimeout: cc.AckTimeout,
		Lease: min(cc.memberTimeout()/2, cluster.DefaultMemberTimeout/2),
		Dial: func(addr string) (*client.Client, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return client.Dial(ctx, addr, opts...)
		},
		Logger: s.log.With("part", "replica"),
	})
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
	case c.TLSCertFile != "" || c.TLS != nil:
		return fmt.Errorf("%w: a cluster does not work with TLS yet: its servers speak plaintext to each other", ErrInvalidConfig)
	case c.AuthFile != "" && cc.Token == "":
		return fmt.Errorf("%w: with -auth-file a cluster needs -cluster-token-file: a token with the replication right on every topic, which each server presents to the others", ErrInvalidConfig)
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
