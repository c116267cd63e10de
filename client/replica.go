package client

import (
	"context"
	"fmt"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// This file: what servers of a cluster ask each other (a follower of its
// leader), and the cluster's status. ReplicaFetch and EpochEnd need a
// token with the replication right.

// ReplicaFetch is what a follower asks its leader.
type ReplicaFetch struct {
	Topic    string
	Follower string        // the follower's member ID
	Epoch    int64         // the leader epoch it follows under
	Offset   int64         // its next offset: it holds everything before
	MaxBytes int32         // bound on batch bytes (but the first); <= 0: the server's
	Wait     time.Duration // how long the leader may hold the request at its end
	// Buf, if not nil, is a buffer the answer is read into when it fits
	// (its capacity); it is left holding the buffer the answer was read
	// into, which the answer's Batches share until its next use. A
	// follower that passes the same one to every fetch allocates only
	// when an answer outgrows it.
	Buf *[]byte
}

// ReplicaFetched is the leader's answer: ReplicaFetchResponse, whose
// Batches the caller owns.
type ReplicaFetched = protocol.ReplicaFetchResponse

// ReplicaFetch reads the leader's log for a follower. It is for servers:
// the batches are returned as stored, stamps included, for the follower
// to store as they are.
func (c *Client) ReplicaFetch(ctx context.Context, f ReplicaFetch) (ReplicaFetched, error) {
	if c.cl != nil {
		return ReplicaFetched{}, fmt.Errorf("%w: replica fetch", ErrSeveralServers)
	}
	p, err := c.doOn(ctx, &c.main, protocol.OpReplicaFetch, f.Wait, true, f.Buf, func(dst []byte, id uint32) []byte {
		return protocol.AppendReplicaFetchRequest(dst, id, protocol.ReplicaFetchRequest{
			Offset: f.Offset, MaxBytes: f.MaxBytes, MaxWaitMs: int32(f.Wait / time.Millisecond),
			Epoch: f.Epoch, Topic: []byte(f.Topic), Follower: []byte(f.Follower)})
	})
	if err != nil {
		return ReplicaFetched{}, err
	}
	r, err := protocol.ParseReplicaFetchResponse(p)
	if err != nil {
		return ReplicaFetched{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return r, nil
}

// ReplicaWait is a follower's wait on the topics it follows from one
// leader (protocol op 24).
type ReplicaWait struct {
	Follower string        // the follower's member ID
	Wait     time.Duration // how long the leader may hold it when no topic is ready
	// Topics: 1 to protocol.MaxReplicaWaitTopics, each with the
	// follower's epoch, next offset and the high-water mark it knows.
	Topics []protocol.ReplicaWaitTopic
}

// ReplicaWait waits until any of w's topics has something for the
// follower (batches past its offset, a high-water mark past the one it
// knows, or an error a fetch would tell) or the wait ends, and returns
// those that are ready, by ascending position in w.Topics: with Fetch,
// to fetch (ReplicaFetch), else only their high-water mark moved. Each
// topic counts on the leader as a fetch of it at its offset. It is for
// servers.
func (c *Client) ReplicaWait(ctx context.Context, w ReplicaWait) ([]protocol.ReplicaWaitReady, error) {
	if c.cl != nil {
		return nil, fmt.Errorf("%w: replica wait", ErrSeveralServers)
	}
	if len(w.Topics) == 0 || len(w.Topics) > protocol.MaxReplicaWaitTopics {
		return nil, fmt.Errorf("%w: %d topics, 1 to %d", ErrInvalidArgument, len(w.Topics), protocol.MaxReplicaWaitTopics)
	}
	p, err := c.do(ctx, protocol.OpReplicaWait, w.Wait, true, func(dst []byte, id uint32) []byte {
		return protocol.AppendReplicaWaitRequest(dst, id, protocol.ReplicaWaitRequest{
			MaxWaitMs: int32(w.Wait / time.Millisecond), Follower: []byte(w.Follower), Topics: w.Topics})
	})
	if err != nil {
		return nil, err
	}
	ready, err := protocol.ParseReplicaWaitResponse(p, len(w.Topics))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return ready, nil
}

// EpochEnd asks a topic's leader where its log of epoch ends (KIP-279):
// the largest epoch at most epoch that it holds (-1: none) and the
// offset its log of that epoch ends at. It is for servers.
func (c *Client) EpochEnd(ctx context.Context, topic string, epoch int64) (found, end int64, err error) {
	if c.cl != nil {
		return 0, 0, fmt.Errorf("%w: epoch end", ErrSeveralServers)
	}
	p, err := c.do(ctx, protocol.OpEpochEnd, 0, true, func(dst []byte, id uint32) []byte {
		return protocol.AppendEpochEndRequest(dst, id, topic, epoch)
	})
	if err != nil {
		return 0, 0, err
	}
	return protocol.ParseEpochEndResponse(p)
}

// ProducerOwners asks a topic's leader which owners (token hashes) it
// binds the idempotent producers ids to (at most
// protocol.MaxOwnerQuery); producers bound to none are left out. It is
// for servers.
func (c *Client) ProducerOwners(ctx context.Context, topic string, ids []uint64) (map[uint64]string, error) {
	if c.cl != nil {
		return nil, fmt.Errorf("%w: producer owners", ErrSeveralServers)
	}
	if len(ids) > protocol.MaxOwnerQuery {
		return nil, fmt.Errorf("%w: %d producer ids, at most %d", ErrInvalidArgument, len(ids), protocol.MaxOwnerQuery)
	}
	p, err := c.do(ctx, protocol.OpProducerOwners, 0, true, func(dst []byte, id uint32) []byte {
		return protocol.AppendProducerOwnersRequest(dst, id, topic, ids)
	})
	if err != nil {
		return nil, err
	}
	return protocol.ParseProducerOwnersResponse(p)
}

// LogEnds asks a server where its logs of topics (1 to
// protocol.MaxLogEndsQuery) end: for each, in order, the last leader
// epoch it holds batches of and its next offset, protocol.LogEndNone for
// a topic it does not hold. It is for servers (the cluster's controller
// asks it before it elects a leader).
func (c *Client) LogEnds(ctx context.Context, topics []string) ([]protocol.LogEnd, error) {
	if c.cl != nil {
		return nil, fmt.Errorf("%w: log ends", ErrSeveralServers)
	}
	if len(topics) == 0 || len(topics) > protocol.MaxLogEndsQuery {
		return nil, fmt.Errorf("%w: %d topics, 1 to %d", ErrInvalidArgument, len(topics), protocol.MaxLogEndsQuery)
	}
	p, err := c.do(ctx, protocol.OpLogEnds, 0, true, func(dst []byte, id uint32) []byte {
		return protocol.AppendLogEndsRequest(dst, id, topics)
	})
	if err != nil {
		return nil, err
	}
	ends, err := protocol.ParseLogEndsResponse(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if len(ends) != len(topics) {
		return nil, fmt.Errorf("%w: %d log ends for %d topics", ErrCorrupt, len(ends), len(topics))
	}
	return ends, nil
}

// AddMember adds a server to the cluster, given as in the servers'
// -peers (host:port/http/cluster); the server must have been started
// with -cluster-join. RemoveMember removes member id (its binary
// address): its topics move to the others first. Both need the
// replication right on every topic (the cluster's token), return once
// the change is recorded, and leave the moves to the cluster: follow
// them with ClusterStatus.
func (c *Client) AddMember(ctx context.Context, entry string) error {
	return c.clusterMember(ctx, protocol.MemberAdd, entry)
}

// RemoveMember: see AddMember.
func (c *Client) RemoveMember(ctx context.Context, id string) error {
	return c.clusterMember(ctx, protocol.MemberRemove, id)
}

func (c *Client) clusterMember(ctx context.Context, action uint8, entry string) error {
	if c.cl != nil {
		return c.cl.anyServer(ctx, func(s *Client) error { return s.clusterMember(ctx, action, entry) })
	}
	_, err := c.do(ctx, protocol.OpClusterMember, 0, true, func(dst []byte, id uint32) []byte {
		return protocol.AppendClusterMemberRequest(dst, id, action, entry)
	})
	return err
}

// SetReplicas creates topic on n replicas of a cluster of servers
// (-cluster), or, when it exists, changes its replication factor to n:
// its new replicas copy its log, join its in-sync set, and then the
// servers it leaves delete their copies. It returns once the change is
// recorded; ClusterStatus shows the move (its target) until it ends. n
// below the servers' -min-insync, above their number, or while the topic
// moves is ErrInvalidArgument; without a cluster only n = 1 is taken (a
// create that leaves an existing topic as it is).
func (c *Client) SetReplicas(ctx context.Context, topic string, n int) error {
	if n < 1 || n > protocol.MaxTopicReplicas {
		return fmt.Errorf("%w: %d replicas, want 1 to %d", ErrInvalidArgument, n, protocol.MaxTopicReplicas)
	}
	if c.cl != nil {
		return c.cl.onTopic(ctx, topic, true, func(s *Client) error { return s.SetReplicas(ctx, topic, n) })
	}
	_, err := c.do(ctx, protocol.OpTopicReplicas, 0, true, func(dst []byte, id uint32) []byte {
		return protocol.AppendTopicReplicasRequest(dst, id, topic, uint8(n))
	})
	return err
}

// ClusterStatus returns the server's view of its cluster as JSON (see
// docs/replication.md): members, the Raft leader, and each replicated
// topic's replicas, leader, epoch, in-sync set and, on the server that
// leads it, each replica's lag.
func (c *Client) ClusterStatus(ctx context.Context) ([]byte, error) {
	if c.cl != nil {
		var out []byte
		err := c.cl.anyServer(ctx, func(s *Client) (err error) { out, err = s.ClusterStatus(ctx); return err })
		return out, err
	}
	return c.do(ctx, protocol.OpClusterStatus, 0, true, func(dst []byte, id uint32) []byte {
		return protocol.AppendClusterStatusRequest(dst, id)
	})
}
