// Package service is the one request path of a haraqa server. Both of its
// ports translate their requests into these calls: the binary protocol
// (package broker, from frames on the event loops) and HTTP (package
// httpapi, from REST requests). A call names its Caller, whose right on
// the topic (and, for a group call, on the group: AllowGroup) it checks;
// it validates what it is given, applies the rules (a produce that may
// create its topic, truncation bounds, a read past the end) and calls
// storage. Every error it returns maps to one
// protocol.Code (Code), which the binary port sends and from which the
// HTTP port derives its status, so a rule, a right or an error code is
// written once, here.
//
// A new op is added in one place: its call here (with the right it needs
// in RightOf), then its translation on each port that serves it.
//
// What the ports keep is what is theirs: framing, ordering, flushing and
// the consume pump's sendfile on the binary port; parameters, headers,
// status lines and the websocket watch on HTTP.
package service

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/haraqa/haraqa/broker/auth"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// Config configures a Service.
type Config struct {
	// Auth, when set, makes every call need a Caller authenticated with a
	// token (Authenticate) that holds the call's right on its topic (see
	// package auth). Nil (the default): no tokens, everything allowed. The
	// Authorizer stays the caller's, who may Reload it.
	Auth *auth.Authorizer
	// FilterWorkers bounds the list-topics regex filters compiled or
	// matched at once (default DefaultFilterWorkers(): half the CPUs, at
	// least 1; 0 means that default too). Up to 64 more per worker wait
	// for one; past that a filter is refused with CodeLimitReached.
	FilterWorkers int
	// Replication, when set (every field), is the cluster this server is
	// a member of (package broker/replica): writes to a replicated topic are taken
	// only by its leader, produces with acks=all answered once its
	// in-sync replicas have them, and reads stop at its high-water mark.
	Replication Replication
	// ClusterSecret is the cluster members' shared secret
	// (-cluster-token-file). Without Auth, a caller that presents it holds
	// the replication right, which the server-to-server and membership
	// calls need (RightOf: ops 17, 18, 20, 21 and 23, and
	// OpClusterMember), and nobody else does: every other call stays open
	// to all. With Auth it plays no part here (the members present a token
	// of the rules with the replication right). "": no cluster.
	ClusterSecret string
	// MaxGroupChangeRate bounds, per token, the group changes on
	// replicated topics this server leads (commits, leases, releases and
	// deletions: each a Raft entry on every member), in changes a second
	// with bursts of a second's worth (DefaultMaxGroupChangeRate is the
	// server's default; 0, this struct's zero: no bound). Past it a
	// change is refused with CodeLimitReached naming the limit (HTTP
	// 429). Only with Auth: without tokens every caller is the same one,
	// trusted alike, as -max-groups-per-token.
	MaxGroupChangeRate int
}

// DefaultMaxGroupChangeRate is the server's default
// Config.MaxGroupChangeRate: a consumer commits or renews its lease a few
// times a second, so a thousand a second leaves a token hundreds of
// them on one server, while a tenant committing in a loop (40,960
// commits in 16 s grew every member's Raft log by 26 MiB and held
// another tenant's commits behind its own) is held to that.
const DefaultMaxGroupChangeRate = 1000

// DefaultFilterWorkers is the default Config.FilterWorkers: half of
// GOMAXPROCS, at least 1.
func DefaultFilterWorkers() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// Service serves the requests of both ports over a storage.Store, which
// stays the caller's: the service never closes it. Its methods are safe
// for concurrent use; those that may wait on the disk say so.
type Service struct {
	store   *storage.Store
	auth    *auth.Authorizer
	filters *filters
	secret  string // Config.ClusterSecret

	// Config.Replication, by audience: all nil without a cluster.
	repl      Replicas
	replGroup ReplicaGroups
	followers Followers
	admin     ClusterAdmin
	view      ClusterView

	groupRate      int           // Config.MaxGroupChangeRate
	groupChangeLim *auth.Limiter // nil: no bound; keyed by Caller.Owner
}

// New returns the service of store.
func New(store *storage.Store, cfg Config) *Service {
	if cfg.FilterWorkers <= 0 {
		cfg.FilterWorkers = DefaultFilterWorkers()
	}
	r := cfg.Replication
	s := &Service{store: store, auth: cfg.Auth, filters: newFilters(cfg.FilterWorkers), secret: cfg.ClusterSecret,
		repl: r.Replicas, replGroup: r.Groups, followers: r.Followers, admin: r.Admin, view: r.View}
	if r := cfg.MaxGroupChangeRate; r > 0 && cfg.Auth != nil && cfg.Replication.Replicas != nil {
		s.groupRate = r
		s.groupChangeLim = auth.NewLimiter(auth.Limits{Burst: r, Every: time.Second / time.Duration(r)})
	}
	return s
}

// Replicated reports whether topic is a replicated topic of this
// server's cluster.
func (s *Service) Replicated(topic string) bool { return s.repl != nil && s.repl.Replicated(topic) }

// MayWaitForReplicas reports whether a produce to topic may wait for
// followers: topic is replicated, or, in a cluster, this server does not
// hold it and a produce that creates it creates a replicated topic. Such
// a produce never runs on an event loop.
func (s *Service) MayWaitForReplicas(topic string) bool {
	return s.repl != nil && (s.repl.Replicated(topic) || !s.store.HasTopic(topic))
}

// FsyncAlways reports whether appends fsync before they return (and so
// should not run on an event loop).
func (s *Service) FsyncAlways() bool { return s.store.FsyncPolicy() == storage.FsyncAlways }

// A Caller is who makes a request: the rights of the token it presented.
// The zero Caller has presented none, which is enough when the service
// checks no tokens.
type Caller struct {
	grant *auth.Grant
	// member: the caller presented Config.ClusterSecret to a service
	// without Auth.
	member bool
	conn   string // the port's name for the connection (WithConn)
}

// WithConn returns c naming the connection it calls on, key (unique
// among the connections of both ports): the tenant of a Caller without a
// token.
func (c Caller) WithConn(key string) Caller {
	c.conn = key
	return c
}

// Tenant names who c's work is shared out by, fairly among tenants (the
// decodes of compressed batches, storage.AppendOptions.Tenant): its
// token, or without one the connection it calls on (WithConn).
func (c Caller) Tenant() string {
	if o := c.Owner(); o != "" {
		return "token " + o
	}
	return c.conn
}

// Owner names c's token for what is kept per token (see auth.Grant.Owner):
// "" for the zero Caller, and so for every caller of a service that checks
// no tokens, which trusts them all alike.
func (c Caller) Owner() string { return c.grant.Owner() }

// The refusals of authentication.
var (
	// ErrUnauthenticated: a call from a Caller that presented no valid
	// token, on a service that checks them.
	ErrUnauthenticated = &protocol.Error{Code: protocol.CodeUnauthenticated,
		Message: "this server needs a token: send a hello with one first"}
	// ErrBadToken: Authenticate with a token the rules do not hold, or none.
	ErrBadToken = &protocol.Error{Code: protocol.CodeUnauthenticated,
		Message: "the token is not valid on this server"}
	// ErrAuthLimited: Authenticate from an address that failed too often;
	// the token was not checked.
	ErrAuthLimited = &protocol.Error{Code: protocol.CodeLimitReached,
		Message: "too many failed authentications from this address: wait and retry"}
)

// ChecksTokens reports whether calls need an authenticated Caller.
func (s *Service) ChecksTokens() bool { return s.auth != nil }

// Authenticate returns the Caller of token, presented from the address
// remote. Without Config.Auth every token, none included, gives the zero
// Caller. Its errors: ErrBadToken (no token, or one the rules do not
// hold) and ErrAuthLimited (a token the rules do not hold that failed too
// often from remote's host: see auth.Limiter). A valid token is never
// refused, whatever other tokens did from remote; a missing token counts
// as no failure.
func (s *Service) Authenticate(remote, token string) (Caller, error) {
	if s.auth == nil {
		// A wrong secret is no error: without Auth every other call is
		// open, and the calls that need the secret refuse the caller.
		return Caller{member: s.secret != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.secret)) == 1}, nil
	}
	g, err := s.auth.Authenticate(remote, token)
	switch {
	case err == nil:
		return Caller{grant: g}, nil
	case errors.Is(err, auth.ErrTooManyFailures):
		return Caller{}, ErrAuthLimited
	}
	return Caller{}, ErrBadToken
}

// Authenticated reports whether c may make calls: it presented a valid
// token, or the service checks none.
func (s *Service) Authenticated(c Caller) bool { return s.auth == nil || c.grant != nil }

// HasRight reports whether c holds r on some topic (auth.Metrics for
// /metrics, say). Without Config.Auth it is always true.
func (s *Service) HasRight(c Caller, r auth.Right) bool {
	if s.auth == nil {
		return s.openTo(c, r)
	}
	return c.grant != nil && c.grant.Has(r)
}

// HasRightOnAll reports whether c holds r on every topic and every group
// (auth.Grant.AllowAll: a rule of r on "*" without group patterns), as a
// page showing the whole server asks (pprof: auth.Admin). Without
// Config.Auth it is always true.
func (s *Service) HasRightOnAll(c Caller, r auth.Right) bool {
	if s.auth == nil {
		return s.openTo(c, r)
	}
	return c.grant.AllowAll(r)
}

// IsMember reports whether c is another member of the cluster: with
// Config.Auth its token holds the replication right on every topic (the
// cluster's token), without it c presented Config.ClusterSecret. A
// service of no cluster has no members.
func (s *Service) IsMember(c Caller) bool {
	if s.auth == nil {
		return s.secret != "" && c.member
	}
	return c.grant.AllowAll(auth.Replication)
}

// openTo reports whether, without Config.Auth, c holds r: every right
// but the replication right of a cluster's members, which needs
// Config.ClusterSecret.
func (s *Service) openTo(c Caller, r auth.Right) bool {
	return r != auth.Replication || s.secret == "" || c.member
}

// AllowGroup returns nil if c may do op on topic (Allow) and use group
// there (auth.Grant.AllowGroup: the rule's group patterns match it, or it
// has none), else ErrUnauthenticated or an error of CodeForbidden naming
// the group and the topic (client input only). Every group call checks it.
func (s *Service) AllowGroup(c Caller, op protocol.Op, topic, group string) error {
	if err := s.Allow(c, op, topic); err != nil || s.auth == nil {
		return err
	}
	if c.grant.AllowGroup(group) {
		return nil
	}
	return &protocol.Error{Code: protocol.CodeForbidden,
		Message: fmt.Sprintf("%s on group %q of topic %q: the token's group patterns do not match the group", op, group, topic)}
}

// allowsGroup reports whether c may see group in a list (ListGroups).
func (s *Service) allowsGroup(c Caller, group string) bool {
	return s.auth == nil || c.grant.AllowGroup(group)
}

// Allow returns nil if c may do op on topic, else ErrUnauthenticated (no
// token) or an error of CodeForbidden naming both (client
// input only). Without Config.Auth everything is allowed. Every call
// below checks it; a port may call it first to refuse early.
func (s *Service) Allow(c Caller, op protocol.Op, topic string) error {
	if s.auth == nil {
		if !s.openTo(c, RightOf(op)) {
			return &protocol.Error{Code: protocol.CodeForbidden,
				Message: fmt.Sprintf("%s needs the cluster's secret (the servers' -cluster-token-file), given as the token", op)}
		}
		return nil
	}
	if c.grant == nil {
		return ErrUnauthenticated
	}
	right := RightOf(op)
	if c.grant.Allow(right, topic) {
		return nil
	}
	return &protocol.Error{Code: protocol.CodeForbidden,
		Message: fmt.Sprintf("%s on topic %q needs %s, which the token does not hold", op, topic, rightName(right))}
}

// RightOf is the right op needs on its topic.
func RightOf(op protocol.Op) auth.Right {
	switch op {
	case protocol.OpProduce:
		return auth.Produce
	case protocol.OpConsume, protocol.OpOffsetAt, protocol.OpCommitOffset, protocol.OpFetchOffset, protocol.OpGroupLease,
		protocol.OpListGroups, protocol.OpDeleteGroup:
		return auth.Consume // a group is a consumer's position
	case protocol.OpCreateTopic, protocol.OpDeleteTopic, protocol.OpTruncate, protocol.OpImport, protocol.OpTopicReplicas:
		return auth.Admin // import: it writes at chosen offsets and times
	case protocol.OpReplicaFetch, protocol.OpReplicaWait, protocol.OpEpochEnd, protocol.OpProducerOwners, protocol.OpLogEnds:
		return auth.Replication // only a cluster's servers copy a log
	case protocol.OpClusterMember:
		return auth.Replication // on "*": the cluster's token (membershipTopic)
	}
	return auth.Any // topic info; list topics filters by it
}

func rightName(r auth.Right) string {
	if r == auth.Any {
		return "some right"
	}
	return "the " + r.String() + " right"
}
