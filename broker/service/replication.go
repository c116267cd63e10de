package service

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// This file: what the service asks of a cluster about replicated topics
// (package broker/replica implements it), so that both ports apply one
// rule: writes go to the leader, reads stop at the high-water mark.

// Replication is a cluster's view of its replicated topics, split by
// who asks: the produces and reads (Replicas), the group calls
// (ReplicaGroups), the followers' requests on a leader (Followers), the
// admin calls (ClusterAdmin) and readiness and metrics (ClusterView).
// Either every field is set (broker/replica's Manager.Replication) or
// none is: a server of no cluster. A topic the cluster does not know is
// served as on a single server.
type Replication struct {
	Replicas  Replicas
	Groups    ReplicaGroups
	Followers Followers
	Admin     ClusterAdmin
	View      ClusterView
}

// Replicas answers the data path: each produce and each read asks it one
// question before it touches the store.
type Replicas interface {
	// Replicated reports whether the cluster knows topic.
	Replicated(topic string) bool
	// Producing answers a produce to topic before it is appended:
	// whether topic is replicated, and nil when this server takes the
	// produce (it leads topic, or topic is not replicated) and, if
	// acksAll, topic's in-sync set holds at least the minimum; else a
	// *NotLeaderError or an error of CodeNotEnoughReplicas.
	Producing(topic string, acksAll bool) (replicated bool, err error)
	// Appended tells of a batch this server appended to topic, whose
	// messages end before end; fn hears once the batch is committed as
	// acksAll asks: nil, or why it is not (leadership lost, the in-sync
	// replicas did not confirm in time). For acks=leader and topics not
	// replicated fn runs before Appended returns. fn must not block.
	Appended(topic string, end int64, acksAll bool, fn func(error))
	// Readable returns the offset reads of topic stop before (its
	// high-water mark) and whether topic is replicated, or why this
	// server may not serve its reads (a *NotLeaderError).
	Readable(topic string) (highWater int64, replicated bool, err error)
	// WatchReadable calls fn once topic's high-water mark passes offset
	// (or its leadership changes): ok false when topic is not replicated
	// (fn is not kept). fn must not block.
	WatchReadable(topic string, offset int64, fn func()) (cancel func() bool, ok bool)
}

// ReplicaGroups holds the consumer groups of replicated topics.
type ReplicaGroups interface {
	// Groups returns where topic's consumer groups live: nil, nil when
	// topic is not replicated (its groups are the store's); the
	// cluster's, so that a failover keeps every commit and lease, when
	// this server leads it; else why not (a *NotLeaderError): only the
	// leader reads and changes them.
	Groups(topic string) (GroupStore, error)
}

// Followers serves, on a leader, the requests of its followers and of
// the other members.
type Followers interface {
	// Fetch serves a follower's fetch on the leader: it records that
	// follower holds topic's offsets before offset, and returns how to
	// answer it.
	Fetch(topic, follower string, epoch, offset int64) (FetchAnswer, error)
	// FetchGone tells the leader that the connection follower fetched
	// topic on closed.
	FetchGone(topic, follower string)
	// EpochEnd answers a follower's epoch end request (KIP-279).
	EpochEnd(topic string, epoch int64) (found, end int64, err error)
	// ProducerOwners answers a follower's producer owners request on
	// the leader: the owners topic's producers of ids are bound to.
	ProducerOwners(topic string, ids []uint64) (map[uint64]string, error)
	// LogEnds answers a log ends request (op 23), on any replica: where
	// this server's logs of topics end, in their order,
	// protocol.LogEndNone for a topic it does not hold.
	LogEnds(topics []string) []protocol.LogEnd
}

// ClusterAdmin makes the admin changes of a cluster.
type ClusterAdmin interface {
	// Create records a new topic in the cluster, on its default number of
	// replicas (existed: it was there already), and returns once this
	// server can take its writes (nil), or a *NotLeaderError naming the
	// server that leads it.
	Create(topic string) (existed bool, err error)
	// SetReplicas creates topic on n replicas (created true; then as
	// Create), or moves it to n replicas: placed as a new topic's, its
	// new replicas copy its log before the old ones let it go. It returns
	// once the change is recorded; the move goes on in the background.
	SetReplicas(topic string, n int) (created bool, err error)
	// Delete removes topic from the cluster; its replicas delete it.
	Delete(topic string) error
	// Truncatable answers a truncation of topic before it is made:
	// whether topic is replicated and, if it is, its high-water mark,
	// or why this server may not truncate it (a *NotLeaderError).
	Truncatable(topic string) (highWater int64, replicated bool, err error)
	// Truncate drops topic's messages before before, no further than its
	// high-water mark, on every replica: recorded in the cluster by its
	// leader (else a *NotLeaderError), done here before it returns and
	// by each follower as it learns of it.
	Truncate(topic string, before int64) error
	// ChangeMember adds (protocol.MemberAdd) or removes a member.
	ChangeMember(action uint8, entry string) error
}

// ClusterView tells readiness, metrics and status.
type ClusterView interface {
	// Ready returns nil once this member serves its replicated topics:
	// in step with the cluster, and in the in-sync set of every topic it
	// holds that has a leader; else why not (readiness, /readyz).
	Ready() error
	// GroupStats returns the groups of the replicated topics this member
	// leads, by topic, for /metrics.
	GroupStats() map[string][]GroupOffset
	// Status returns the cluster status (op 19, GET /cluster), as much
	// of it as v shows: a value the ports encode as JSON where they
	// answer.
	Status(v StatusView) json.Marshaler
	// Stats returns the replication counters and, for each replicated
	// topic this server holds, its state here, for /metrics.
	Stats() ReplicationStats
}

// StatusView is what a cluster status shows its caller
// (ClusterView.Status, Service.ClusterStatus).
type StatusView struct {
	// Members shows the members: the member list with its addresses
	// (binary, HTTP, cluster port), the Raft leader, and which members
	// hold each topic (its replicas, in-sync set, move target and, on
	// its leader, each follower's lag). Without it the status says that
	// they are hidden (members_hidden), and a topic shows how many
	// replicas it has and how many are in sync, and its leader: the
	// address a not-leader answer names to any caller with a right on
	// the topic anyway.
	Members bool
	// Topic, if set, keeps the topics it returns true for; nil keeps all.
	Topic func(name string) bool
}

// GroupStore holds consumer groups: the store for a topic of this
// server, the cluster for a replicated one (ReplicaGroups.Groups), with
// the same rules and errors.
type GroupStore interface {
	FetchOffset(topic, group string) (GroupOffset, error)
	CommitOffset(topic, group string, c Commit) error
	LeaseFor(owner, topic, group, member string, ttl time.Duration) (GroupOffset, error)
	ReleaseLease(topic, group, member string) (GroupOffset, error)
	DeleteGroup(topic, group string) error
	ListGroups(topic string) ([]GroupOffset, error)
}

// ReplicationStats are a cluster member's replication figures.
type ReplicationStats struct {
	LeaderChanges int64 // topics this server took the lead of
	ISRChanges    int64 // in-sync set changes this server recorded as a leader
	Truncations   int64 // follower logs cut back to their leader's
	FetchedBytes  int64 // batch bytes this server copied as a follower
	// Repairs counts this server's copies cut at a range recovery found
	// corrupted on every volume, to copy the rest from the leader again;
	// Repairing is how many of its copies are under repair now (damaged
	// at the start and not back in the in-sync set yet).
	Repairs, Repairing int64
	// Offline counts the replicated topics this server holds that have
	// no leader: every member of their in-sync set is down (or restarted
	// with a copy that may lack acknowledged batches), and the topic
	// waits for one of them.
	Offline int64
	Topics  []ReplicaTopicStats
}

// ReplicaTopicStats is one replicated topic on this server.
type ReplicaTopicStats struct {
	Topic    string
	Leader   bool  // this server leads it
	Replicas int   // how many servers hold it
	InSync   int   // the in-sync set's size
	Epoch    int64 // the leader epoch
	// On the leader, each follower's lag in messages and bytes (the
	// bytes of the batches it has yet to copy, from the leader's log).
	Followers []FollowerLag
}

// FollowerLag is a follower's lag, as its leader sees it.
type FollowerLag struct {
	ID              string
	Messages, Bytes int64
}

// ReplicationStats returns the cluster's figures (nil without a cluster).
func (s *Service) ReplicationStats() *ReplicationStats {
	if s.view == nil {
		return nil
	}
	st := s.view.Stats()
	return &st
}

// FetchAnswer is how a leader answers a replica fetch.
type FetchAnswer struct {
	HighWater  int64 // the high-water mark after this fetch
	Epoch      int64 // the leader's epoch
	BatchEpoch int64 // the epoch of the batches at the fetch offset
	// Limit bounds the messages read (0: no bound), so that no batch of
	// the next epoch is sent with BatchEpoch's.
	Limit int
	// From is the offset to read from: the fetch's, or the leader's
	// start when the follower's log ends before it.
	From int64
	// Log is the handle on the topic's log the answer was made from, so
	// that the read does not look the topic up again (nil: look it up).
	Log *storage.Log
}

// NotLeaderError refuses a request for a replicated topic on a server
// that does not lead it (or, for a read, is not in its in-sync set).
type NotLeaderError struct {
	Topic string
	// Leader is the leader's binary protocol address ("" when none is
	// known), LeaderHTTP the base URL of its HTTP port.
	Leader, LeaderHTTP string
}

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return fmt.Sprintf("service: topic %q has no leader at the moment: retry shortly", e.Topic)
	}
	return fmt.Sprintf("service: topic %q is led by %s", e.Topic, e.Leader)
}

// WireCode implements Coded.
func (e *NotLeaderError) WireCode() protocol.Code { return protocol.CodeNotLeader }

var _ Coded = (*NotLeaderError)(nil)

// OutcomeUnknownError answers a produce to a replicated topic that was
// appended on this server, as its leader, but that the lead left before
// the batch was committed (the high-water mark passed it): the new leader
// may hold it or not. A client resends it only under its idempotent
// producer id and sequence, which the new leader answers with its first
// offset if it holds it; any other resend may store it twice. Leader and
// LeaderHTTP are the new leader, as for NotLeaderError ("" while none).
type OutcomeUnknownError struct {
	Topic              string
	Leader, LeaderHTTP string
}

func (e *OutcomeUnknownError) Error() string {
	lead := "no leader is elected yet"
	if e.Leader != "" {
		lead = "it is now led by " + e.Leader
	}
	return fmt.Sprintf("service: topic %q: the batch was written but the lead changed before it was committed, so it may or may not be kept (%s); only an idempotent producer may send it again", e.Topic, lead)
}

// WireCode implements Coded.
func (e *OutcomeUnknownError) WireCode() protocol.Code { return protocol.CodeOutcomeUnknown }

var _ Coded = (*OutcomeUnknownError)(nil)
