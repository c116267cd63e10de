package protocol

import (
	"encoding/binary"
	"fmt"
)

// This file: the ops servers speak to each other for replicated topics,
// and the cluster status op (see doc.go, "Replication").

// ReplicaFetchRequest is a follower's read of its leader's log.
type ReplicaFetchRequest struct {
	// Offset is the follower's next offset: it holds everything before
	// it, which the leader counts as replicated.
	Offset int64
	// MaxBytes bounds the batch bytes (but the first batch); <= 0: the
	// server's default.
	MaxBytes int32
	// MaxWaitMs holds the request at the end of the log until a batch
	// comes or the wait ends.
	MaxWaitMs int32
	// Epoch is the leader epoch the follower follows under: a leader at
	// another epoch answers CodeFencedEpoch.
	Epoch int64
	// Topic is the topic, Follower the follower's member ID.
	Topic    []byte
	Follower []byte
}

// AppendReplicaFetchRequest appends a replica fetch request frame.
func AppendReplicaFetchRequest(dst []byte, corrID uint32, r ReplicaFetchRequest) []byte {
	start := len(dst)
	dst = appendRequestHeader(dst, OpReplicaFetch, corrID)
	dst = appendI64(dst, r.Offset)
	dst = appendU32(dst, uint32(r.MaxBytes))
	dst = appendU32(dst, uint32(r.MaxWaitMs))
	dst = appendI64(dst, r.Epoch)
	dst = appendString(dst, string(r.Topic))
	dst = appendString(dst, string(r.Follower))
	return finishFrame(dst, start)
}

// ParseReplicaFetchRequest parses the payload of a replica fetch request.
// Topic and Follower alias payload.
func ParseReplicaFetchRequest(payload []byte) (ReplicaFetchRequest, error) {
	r := reader{b: payload}
	req := ReplicaFetchRequest{Offset: r.i64(), MaxBytes: r.i32(), MaxWaitMs: r.i32(), Epoch: r.i64(), Topic: r.str(), Follower: r.str()}
	if err := r.end(); err != nil {
		return ReplicaFetchRequest{}, err
	}
	if req.Offset < 0 || req.Epoch < 1 || len(req.Follower) == 0 {
		return ReplicaFetchRequest{}, ErrMalformed
	}
	return req, validTopic(req.Topic)
}

// ReplicaFetchResponse is the payload of a successful replica fetch.
type ReplicaFetchResponse struct {
	// StartOffset is the request's offset.
	StartOffset int64
	// NextOffset is the leader's next offset.
	NextOffset int64
	// HighWater is the leader's high-water mark: the offsets below it are
	// on every in-sync replica, and consumers may read them.
	HighWater int64
	// Epoch is the leader epoch the leader leads under.
	Epoch int64
	// BatchEpoch is the leader epoch under which the batches were
	// written (a response never holds batches of two epochs); 0 with no
	// batches.
	BatchEpoch int64
	// Batches are whole batches from StartOffset on, as Consume's.
	Batches []byte
}

// ReplicaFetchResponseHeaderSize is the size of a replica fetch
// response before its batches, the frame header included.
const ReplicaFetchResponseHeaderSize = HeaderSize + 44

// AppendReplicaFetchResponseHeader appends the first
// ReplicaFetchResponseHeaderSize bytes of a replica fetch response whose
// batches, batchesSize bytes, the caller sends right after.
func AppendReplicaFetchResponseHeader(dst []byte, corrID uint32, r ReplicaFetchResponse, batchesSize int) []byte {
	start := len(dst)
	dst = appendResponseHeader(dst, OpReplicaFetch, CodeOK, corrID)
	dst = appendI64(dst, r.StartOffset)
	dst = appendI64(dst, r.NextOffset)
	dst = appendI64(dst, r.HighWater)
	dst = appendI64(dst, r.Epoch)
	dst = appendI64(dst, r.BatchEpoch)
	dst = appendU32(dst, uint32(batchesSize))
	dst = finishFrame(dst, start)
	return addFrameLength(dst, start, batchesSize)
}

// ParseReplicaFetchResponse parses the payload of a successful replica
// fetch response, checking the batch headers as ParseConsumeResponse
// does (not their CRCs).
func ParseReplicaFetchResponse(payload []byte) (ReplicaFetchResponse, error) {
	r := reader{b: payload}
	resp := ReplicaFetchResponse{StartOffset: r.i64(), NextOffset: r.i64(), HighWater: r.i64(), Epoch: r.i64(), BatchEpoch: r.i64()}
	size := r.u32()
	resp.Batches = r.rest()
	if r.err != nil {
		return ReplicaFetchResponse{}, r.err
	}
	if uint64(size) != uint64(len(resp.Batches)) {
		return ReplicaFetchResponse{}, errBatchesSize
	}
	for b := resp.Batches; len(b) > 0; {
		_, n, err := ParseBatch(b)
		if err != nil {
			return ReplicaFetchResponse{}, err
		}
		b = b[n:]
	}
	return resp, nil
}

// AppendEpochEndRequest appends an epoch end request: where the leader's
// log of epoch (or of the largest epoch below it that it holds) ends.
func AppendEpochEndRequest(dst []byte, corrID uint32, topic string, epoch int64) []byte {
	start := len(dst)
	dst = appendRequestHeader(dst, OpEpochEnd, corrID)
	dst = appendI64(dst, epoch)
	dst = appendString(dst, topic)
	return finishFrame(dst, start)
}

// ParseEpochEndRequest parses the payload of an epoch end request.
func ParseEpochEndRequest(payload []byte) (topic []byte, epoch int64, err error) {
	r := reader{b: payload}
	epoch, topic = r.i64(), r.str()
	if err := r.end(); err != nil {
		return nil, 0, err
	}
	return topic, epoch, validTopic(topic)
}

// AppendEpochEndResponse appends the answer to an epoch end request: the
// largest epoch at most the one asked that the leader holds (-1: none)
// and the offset its log of it ends at.
func AppendEpochEndResponse(dst []byte, corrID uint32, epoch, end int64) []byte {
	start := len(dst)
	dst = appendResponseHeader(dst, OpEpochEnd, CodeOK, corrID)
	dst = appendI64(dst, epoch)
	dst = appendI64(dst, end)
	return finishFrame(dst, start)
}

// ParseEpochEndResponse parses the payload of an epoch end response.
func ParseEpochEndResponse(payload []byte) (epoch, end int64, err error) {
	r := reader{b: payload}
	epoch, end = r.i64(), r.i64()
	return epoch, end, r.end()
}

// AppendClusterStatusRequest appends a cluster status request (empty).
func AppendClusterStatusRequest(dst []byte, corrID uint32) []byte {
	start := len(dst)
	dst = appendRequestHeader(dst, OpClusterStatus, corrID)
	return finishFrame(dst, start)
}

// AppendClusterStatusResponse appends a cluster status response: the
// server's view of the cluster as JSON (its fields: docs/replication.md).
func AppendClusterStatusResponse(dst []byte, corrID uint32, status []byte) []byte {
	start := len(dst)
	dst = appendResponseHeader(dst, OpClusterStatus, CodeOK, corrID)
	dst = append(dst, status...)
	return finishFrame(dst, start)
}

// MaxOwnerQuery bounds the producer ids of one producer owners request.
const MaxOwnerQuery = 1024

// AppendProducerOwnersRequest appends a producer owners request: which
// owners (token hashes) the leader of topic binds the producers ids to.
// A follower asks it for the idempotent producers its copy of the log
// holds bound to none.
func AppendProducerOwnersRequest(dst []byte, corrID uint32, topic string, ids []uint64) []byte {
	start := len(dst)
	dst = appendRequestHeader(dst, OpProducerOwners, corrID)
	dst = appendString(dst, topic)
	dst = appendU32(dst, uint32(len(ids)))
	for _, id := range ids {
		dst = binary.LittleEndian.AppendUint64(dst, id)
	}
	return finishFrame(dst, start)
}

// ParseProducerOwnersRequest parses the payload of a producer owners
// request: at most MaxOwnerQuery ids.
func ParseProducerOwnersRequest(payload []byte) (topic []byte, ids []uint64, err error) {
	r := reader{b: payload}
	topic = r.str()
	n := r.u32()
	if r.err == nil && (n > MaxOwnerQuery || uint64(n)*8 != uint64(len(r.b))) {
		return nil, nil, fmt.Errorf("%w: %d producer ids in %d bytes, at most %d ids", ErrInvalidArgument, n, len(r.b), MaxOwnerQuery)
	}
	for range n {
		ids = append(ids, uint64(r.i64()))
	}
	if err := r.end(); err != nil {
		return nil, nil, err
	}
	return topic, ids, validTopic(topic)
}

// AppendProducerOwnersResponse appends the answer to a producer owners
// request: a count, then each bound producer's id and owner (a string of
// at most 255 bytes). Producers the leader binds to none are left out.
func AppendProducerOwnersResponse(dst []byte, corrID uint32, owners map[uint64]string) []byte {
	start := len(dst)
	dst = appendResponseHeader(dst, OpProducerOwners, CodeOK, corrID)
	dst = appendU32(dst, uint32(len(owners)))
	for id, owner := range owners {
		dst = binary.LittleEndian.AppendUint64(dst, id)
		dst = appendString(dst, owner)
	}
	return finishFrame(dst, start)
}

// ParseProducerOwnersResponse parses the payload of a producer owners
// response; a producer id named twice is refused.
func ParseProducerOwnersResponse(payload []byte) (map[uint64]string, error) {
	r := reader{b: payload}
	n := r.u32()
	if r.err == nil && n > MaxOwnerQuery {
		return nil, fmt.Errorf("%w: %d producer owners, at most %d", ErrInvalidArgument, n, MaxOwnerQuery)
	}
	out := make(map[uint64]string, n)
	for range n {
		id := uint64(r.i64())
		owner := r.str()
		if r.err == nil && len(owner) > 255 {
			return nil, fmt.Errorf("%w: an owner of %d bytes, at most 255", ErrInvalidArgument, len(owner))
		}
		if _, dup := out[id]; dup && r.err == nil {
			return nil, fmt.Errorf("%w: producer %d named twice", ErrInvalidArgument, id)
		}
		out[id] = string(owner)
	}
	return out, r.end()
}

// MaxLogEndsQuery bounds the topics of one log ends request.
const MaxLogEndsQuery = 1024

// LogEnd is where a server's log of a topic ends (op 23): the last leader
// epoch it holds batches of (0: none recorded) and its next offset. Both
// are -1 when the server does not hold the topic (LogEndNone).
type LogEnd struct {
	Epoch, Next int64
}

// LogEndNone answers a log ends request for a topic the server does not
// hold.
var LogEndNone = LogEnd{Epoch: -1, Next: -1}

// logEndSize is the size of one topic's answer: epoch and next, int64s.
const logEndSize = 16

// AppendLogEndsRequest appends a log ends request: where the server's
// logs of topics end. The cluster's controller asks it of the in-sync
// replicas of topics whose leader died, to elect the one holding the most.
func AppendLogEndsRequest(dst []byte, corrID uint32, topics []string) []byte {
	start := len(dst)
	dst = appendRequestHeader(dst, OpLogEnds, corrID)
	dst = appendU32(dst, uint32(len(topics)))
	for _, t := range topics {
		dst = appendString(dst, t)
	}
	return finishFrame(dst, start)
}

// ParseLogEndsRequest parses the payload of a log ends request: 1 to
// MaxLogEndsQuery valid topic names. The names alias payload.
func ParseLogEndsRequest(payload []byte) ([][]byte, error) {
	r := reader{b: payload}
	n := r.u32()
	// Each name takes at least 3 bytes (its length and one byte): checked
	// before the slice is allocated.
	if r.err == nil && (n == 0 || n > MaxLogEndsQuery || uint64(n)*3 > uint64(len(r.b))) {
		return nil, fmt.Errorf("%w: %d topics in %d bytes, 1 to %d topics", ErrInvalidArgument, n, len(r.b), MaxLogEndsQuery)
	}
	topics := make([][]byte, 0, n)
	for range n {
		topics = append(topics, r.str())
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	for _, t := range topics {
		if err := validTopic(t); err != nil {
			return nil, err
		}
	}
	return topics, nil
}

// AppendLogEndsResponse appends the answer to a log ends request: a
// count, then each topic's end, in the order asked.
func AppendLogEndsResponse(dst []byte, corrID uint32, ends []LogEnd) []byte {
	start := len(dst)
	dst = appendResponseHeader(dst, OpLogEnds, CodeOK, corrID)
	dst = appendU32(dst, uint32(len(ends)))
	for _, e := range ends {
		dst = appendI64(dst, e.Epoch)
		dst = appendI64(dst, e.Next)
	}
	return finishFrame(dst, start)
}

// ParseLogEndsResponse parses the payload of a log ends response: at
// most MaxLogEndsQuery ends, each LogEndNone or two values >= 0.
func ParseLogEndsResponse(payload []byte) ([]LogEnd, error) {
	r := reader{b: payload}
	n := r.u32()
	if r.err == nil && (n > MaxLogEndsQuery || uint64(n)*logEndSize != uint64(len(r.b))) {
		return nil, fmt.Errorf("%w: %d log ends in %d bytes, at most %d", ErrInvalidArgument, n, len(r.b), MaxLogEndsQuery)
	}
	if r.err != nil {
		return nil, r.err
	}
	ends := make([]LogEnd, 0, n)
	for range n {
		e := LogEnd{Epoch: r.i64(), Next: r.i64()}
		if e != LogEndNone && (e.Epoch < 0 || e.Next < 0) {
			return nil, fmt.Errorf("%w: a log end at epoch %d, offset %d", ErrInvalidArgument, e.Epoch, e.Next)
		}
		ends = append(ends, e)
	}
	return ends, r.end()
}

// The actions of a cluster member request.
const (
	MemberAdd    uint8 = 1 // add a server: its -peers entry, host:port/http/cluster
	MemberRemove uint8 = 2 // remove a member: its ID (binary address)
	// MaxMemberEntry bounds the entry of a cluster member request.
	MaxMemberEntry = 1024
)

// AppendClusterMemberRequest appends a cluster member request: add a
// server to the cluster (MemberAdd, entry in the -peers form) or remove
// one (MemberRemove, entry its member ID).
func AppendClusterMemberRequest(dst []byte, corrID uint32, action uint8, entry string) []byte {
	start := len(dst)
	dst = appendRequestHeader(dst, OpClusterMember, corrID)
	dst = append(dst, action)
	dst = appendString(dst, entry)
	return finishFrame(dst, start)
}

// ParseClusterMemberRequest parses the payload of a cluster member
// request: an entry of at most MaxMemberEntry bytes.
func ParseClusterMemberRequest(payload []byte) (action uint8, entry []byte, err error) {
	r := reader{b: payload}
	action, entry = r.u8(), r.str()
	if err := r.end(); err != nil {
		return 0, nil, err
	}
	if action != MemberAdd && action != MemberRemove || len(entry) == 0 || len(entry) > MaxMemberEntry {
		return 0, nil, fmt.Errorf("%w: cluster member action %d with an entry of %d bytes", ErrInvalidArgument, action, len(entry))
	}
	return action, entry, nil
}

// MaxTopicReplicas bounds the replication factor a topic replicas request
// asks for.
const MaxTopicReplicas = 255

// AppendTopicReplicasRequest appends a topic replicas request: create
// topic on n replicas, or, when it exists, move it to n replicas (its
// replication factor).
func AppendTopicReplicasRequest(dst []byte, corrID uint32, topic string, n uint8) []byte {
	start := len(dst)
	dst = appendRequestHeader(dst, OpTopicReplicas, corrID)
	dst = append(dst, n)
	dst = appendString(dst, topic)
	return finishFrame(dst, start)
}

// ParseTopicReplicasRequest parses the payload of a topic replicas
// request: at least one replica.
func ParseTopicReplicasRequest(payload []byte) (topic []byte, n uint8, err error) {
	r := reader{b: payload}
	n, topic = r.u8(), r.str()
	if err := r.end(); err != nil {
		return nil, 0, err
	}
	if n == 0 {
		return topic, n, fmt.Errorf("%w: a topic on 0 replicas", ErrInvalidArgument)
	}
	return topic, n, validTopic(topic)
}
