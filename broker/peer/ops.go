package peer

import (
	"context"
	"fmt"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// This file: the requests a server sends another. ReplicaFetch,
// ReplicaWait, EpochEnd, ProducerOwners and LogEnds need a token with the
// replication right (the cluster's secret) where the server checks tokens.

// Ping checks the server answers.
func (c *Conn) Ping(ctx context.Context) error {
	_, err := c.do(ctx, protocol.OpPing, 0, nil, protocol.AppendPingRequest)
	return err
}

// TopicInfo returns a topic's offsets and size on the server;
// a *protocol.Error of CodeTopicNotFound when it has no such topic.
func (c *Conn) TopicInfo(ctx context.Context, topic string) (protocol.TopicInfoResponse, error) {
	p, err := c.do(ctx, protocol.OpTopicInfo, 0, nil, func(dst []byte, id uint32) []byte {
		return protocol.AppendTopicInfoRequest(dst, id, topic)
	})
	if err != nil {
		return protocol.TopicInfoResponse{}, err
	}
	r, err := protocol.ParseTopicInfoResponse(p)
	if err != nil {
		return protocol.TopicInfoResponse{}, badAnswer(protocol.OpTopicInfo, err)
	}
	return r, nil
}

// ReplicaFetch is what a follower asks its leader (protocol op 17).
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

// ReplicaFetch reads the leader's log for a follower: the batches as
// stored, stamps included, for the follower to store as they are. The
// answer's Batches borrow from *f.Buf when it is given, else the caller
// owns them.
func (c *Conn) ReplicaFetch(ctx context.Context, f ReplicaFetch) (protocol.ReplicaFetchResponse, error) {
	p, err := c.do(ctx, protocol.OpReplicaFetch, f.Wait, f.Buf, func(dst []byte, id uint32) []byte {
		return protocol.AppendReplicaFetchRequest(dst, id, protocol.ReplicaFetchRequest{
			Offset: f.Offset, MaxBytes: f.MaxBytes, MaxWaitMs: int32(f.Wait / time.Millisecond),
			Epoch: f.Epoch, Topic: []byte(f.Topic), Follower: []byte(f.Follower)})
	})
	if err != nil {
		return protocol.ReplicaFetchResponse{}, err
	}
	r, err := protocol.ParseReplicaFetchResponse(p)
	if err != nil {
		return protocol.ReplicaFetchResponse{}, badAnswer(protocol.OpReplicaFetch, err)
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
// those that are ready, by ascending position in w.Topics: with Fetch, to
// fetch (ReplicaFetch), else only their high-water mark moved. Each topic
// counts on the leader as a fetch of it at its offset.
func (c *Conn) ReplicaWait(ctx context.Context, w ReplicaWait) ([]protocol.ReplicaWaitReady, error) {
	if len(w.Topics) == 0 || len(w.Topics) > protocol.MaxReplicaWaitTopics {
		return nil, fmt.Errorf("peer: replica wait: %w: %d topics, 1 to %d", protocol.ErrInvalidArgument, len(w.Topics), protocol.MaxReplicaWaitTopics)
	}
	p, err := c.do(ctx, protocol.OpReplicaWait, w.Wait, nil, func(dst []byte, id uint32) []byte {
		return protocol.AppendReplicaWaitRequest(dst, id, protocol.ReplicaWaitRequest{
			MaxWaitMs: int32(w.Wait / time.Millisecond), Follower: []byte(w.Follower), Topics: w.Topics})
	})
	if err != nil {
		return nil, err
	}
	ready, err := protocol.ParseReplicaWaitResponse(p, len(w.Topics))
	if err != nil {
		return nil, badAnswer(protocol.OpReplicaWait, err)
	}
	return ready, nil
}

// EpochEnd asks a topic's leader where its log of epoch ends (protocol op
// 18, KIP-279): the largest epoch at most epoch that it holds (-1: none)
// and the offset its log of that epoch ends at.
func (c *Conn) EpochEnd(ctx context.Context, topic string, epoch int64) (found, end int64, err error) {
	p, err := c.do(ctx, protocol.OpEpochEnd, 0, nil, func(dst []byte, id uint32) []byte {
		return protocol.AppendEpochEndRequest(dst, id, topic, epoch)
	})
	if err != nil {
		return 0, 0, err
	}
	if found, end, err = protocol.ParseEpochEndResponse(p); err != nil {
		return 0, 0, badAnswer(protocol.OpEpochEnd, err)
	}
	return found, end, nil
}

// ProducerOwners asks a topic's leader which owners (token hashes) it
// binds the idempotent producers ids to (at most protocol.MaxOwnerQuery);
// producers bound to none are left out.
func (c *Conn) ProducerOwners(ctx context.Context, topic string, ids []uint64) (map[uint64]string, error) {
	if len(ids) > protocol.MaxOwnerQuery {
		return nil, fmt.Errorf("peer: producer owners: %w: %d producer ids, at most %d", protocol.ErrInvalidArgument, len(ids), protocol.MaxOwnerQuery)
	}
	p, err := c.do(ctx, protocol.OpProducerOwners, 0, nil, func(dst []byte, id uint32) []byte {
		return protocol.AppendProducerOwnersRequest(dst, id, topic, ids)
	})
	if err != nil {
		return nil, err
	}
	owners, err := protocol.ParseProducerOwnersResponse(p)
	if err != nil {
		return nil, badAnswer(protocol.OpProducerOwners, err)
	}
	return owners, nil
}

// LogEnds asks a server where its logs of topics (1 to
// protocol.MaxLogEndsQuery) end: for each, in order, the last leader
// epoch it holds batches of and its next offset, protocol.LogEndNone for
// a topic it does not hold. The cluster's controller asks it before it
// elects a leader.
func (c *Conn) LogEnds(ctx context.Context, topics []string) ([]protocol.LogEnd, error) {
	if len(topics) == 0 || len(topics) > protocol.MaxLogEndsQuery {
		return nil, fmt.Errorf("peer: log ends: %w: %d topics, 1 to %d", protocol.ErrInvalidArgument, len(topics), protocol.MaxLogEndsQuery)
	}
	p, err := c.do(ctx, protocol.OpLogEnds, 0, nil, func(dst []byte, id uint32) []byte {
		return protocol.AppendLogEndsRequest(dst, id, topics)
	})
	if err != nil {
		return nil, err
	}
	ends, err := protocol.ParseLogEndsResponse(p)
	if err != nil {
		return nil, badAnswer(protocol.OpLogEnds, err)
	}
	if len(ends) != len(topics) {
		return nil, badAnswer(protocol.OpLogEnds, fmt.Errorf("%w: %d log ends for %d topics", protocol.ErrMalformed, len(ends), len(topics)))
	}
	return ends, nil
}
