package protocol

import (
	"fmt"
)

// This file: replica wait (op 24), a follower's wait on many topics of
// one leader at once (see doc.go, "Replication").

// MaxReplicaWaitTopics bounds the topics of one replica wait request: a
// follower that follows more from one leader waits on several
// connections.
const MaxReplicaWaitTopics = 4096

// replicaWaitEntryMin is the smallest topic entry of a replica wait
// request: epoch, offset and high water (int64s), flags, and a topic of
// one byte with its length.
const replicaWaitEntryMin = 8 + 8 + 8 + 1 + 2 + 1

// ReplicaWaitLeave, in a replica wait topic's flags: the follower fetches
// the topic no more on this connection, and the leader drops it from the
// topic's in-sync set at once, as when the connection closes.
const ReplicaWaitLeave uint8 = 1

// ReplicaWaitTopic is one topic of a replica wait request.
type ReplicaWaitTopic struct {
	// Epoch is the leader epoch the follower follows the topic under.
	Epoch int64
	// Offset is the follower's next offset: it holds everything before
	// it, which the leader counts as replicated, as a replica fetch's.
	Offset int64
	// HighWater is the leader's high-water mark as the follower last
	// heard it: a higher one makes the topic ready.
	HighWater int64
	// Flags: ReplicaWaitLeave or 0.
	Flags uint8
	// Topic is the topic's name.
	Topic []byte
}

// ReplicaWaitRequest is a follower's wait for any of the topics it
// follows from one leader to have something for it.
type ReplicaWaitRequest struct {
	// MaxWaitMs bounds how long the leader holds the request when no
	// topic is ready; 0: answer at once.
	MaxWaitMs int32
	// Follower is the follower's member ID.
	Follower []byte
	// Topics are 1 to MaxReplicaWaitTopics topics.
	Topics []ReplicaWaitTopic
}

// AppendReplicaWaitRequest appends a replica wait request frame.
func AppendReplicaWaitRequest(dst []byte, corrID uint32, r ReplicaWaitRequest) []byte {
	start := len(dst)
	dst = appendRequestHeader(dst, OpReplicaWait, corrID)
	dst = appendU32(dst, uint32(r.MaxWaitMs))
	dst = appendString(dst, string(r.Follower))
	dst = appendU32(dst, uint32(len(r.Topics)))
	for _, t := range r.Topics {
		dst = appendI64(dst, t.Epoch)
		dst = appendI64(dst, t.Offset)
		dst = appendI64(dst, t.HighWater)
		dst = append(dst, t.Flags)
		dst = appendString(dst, string(t.Topic))
	}
	return finishFrame(dst, start)
}

// ParseReplicaWaitRequest parses the payload of a replica wait request:
// a follower, and 1 to MaxReplicaWaitTopics topics, each a valid name
// with an epoch >= 1, an offset and a high-water mark >= 0 and known
// flags. The count is checked against the bytes before anything is
// allocated. Follower and the topic names alias payload.
func ParseReplicaWaitRequest(payload []byte) (ReplicaWaitRequest, error) {
	r := reader{b: payload}
	req := ReplicaWaitRequest{MaxWaitMs: r.i32(), Follower: r.str()}
	n := r.u32()
	if r.err != nil {
		return ReplicaWaitRequest{}, r.err
	}
	if n == 0 || n > MaxReplicaWaitTopics || uint64(n)*replicaWaitEntryMin > uint64(len(r.b)) {
		return ReplicaWaitRequest{}, fmt.Errorf("%w: replica wait: %d topics in %d bytes, 1 to %d topics", ErrInvalidArgument, n, len(r.b), MaxReplicaWaitTopics)
	}
	if len(req.Follower) == 0 || req.MaxWaitMs < 0 {
		return ReplicaWaitRequest{}, fmt.Errorf("%w: replica wait: follower of %d bytes, max wait %d ms", ErrInvalidArgument, len(req.Follower), req.MaxWaitMs)
	}
	req.Topics = make([]ReplicaWaitTopic, 0, n)
	for range n {
		req.Topics = append(req.Topics, ReplicaWaitTopic{Epoch: r.i64(), Offset: r.i64(), HighWater: r.i64(), Flags: r.u8(), Topic: r.str()})
	}
	if err := r.end(); err != nil {
		return ReplicaWaitRequest{}, err
	}
	for i, t := range req.Topics {
		if t.Epoch < 1 || t.Offset < 0 || t.HighWater < 0 || t.Flags&^ReplicaWaitLeave != 0 {
			return ReplicaWaitRequest{}, fmt.Errorf("%w: replica wait: topic %d: epoch %d, offset %d, high water %d, flags %#x",
				ErrInvalidArgument, i, t.Epoch, t.Offset, t.HighWater, t.Flags)
		}
		if err := validTopic(t.Topic); err != nil {
			return ReplicaWaitRequest{}, err
		}
	}
	return req, nil
}

// ReplicaWaitReady is a ready topic of a replica wait's answer.
type ReplicaWaitReady struct {
	// Index is the topic's position in the request.
	Index uint32
	// Fetch: the leader's log holds the follower's offset (or starts
	// past it), or a replica fetch of the topic would fail: the follower
	// fetches it to learn which. Without it only the high-water mark
	// moved.
	Fetch bool
	// HighWater is the leader's high-water mark of the topic; -1 with
	// Fetch when a fetch would fail.
	HighWater int64
}

// replicaWaitReadySize is the size of one ready topic in a replica wait
// response: index, flags, high water.
const replicaWaitReadySize = 4 + 1 + 8

// ReplicaWaitFetch, in a ready topic's flags: ReplicaWaitReady.Fetch.
const ReplicaWaitFetch uint8 = 1

// AppendReplicaWaitResponse appends the answer to a replica wait request:
// its ready topics, by ascending position in the request.
func AppendReplicaWaitResponse(dst []byte, corrID uint32, ready []ReplicaWaitReady) []byte {
	start := len(dst)
	dst = appendResponseHeader(dst, OpReplicaWait, CodeOK, corrID)
	dst = appendU32(dst, uint32(len(ready)))
	for _, r := range ready {
		dst = appendU32(dst, r.Index)
		if r.Fetch {
			dst = append(dst, ReplicaWaitFetch)
		} else {
			dst = append(dst, 0)
		}
		dst = appendI64(dst, r.HighWater)
	}
	return finishFrame(dst, start)
}

// ParseReplicaWaitResponse parses the payload of a replica wait response:
// at most MaxReplicaWaitTopics ready topics, by strictly ascending
// position, each below asked (the topics of the request), with known
// flags and a high-water mark >= 0 (or -1 with the fetch flag). It
// allocates the slice it returns.
func ParseReplicaWaitResponse(payload []byte, asked int) ([]ReplicaWaitReady, error) {
	r := reader{b: payload}
	n := r.u32()
	if r.err != nil {
		return nil, r.err
	}
	if n > MaxReplicaWaitTopics || uint64(n) > uint64(max(asked, 0)) || uint64(n)*replicaWaitReadySize != uint64(len(r.b)) {
		return nil, fmt.Errorf("%w: replica wait: %d ready topics in %d bytes, of %d asked", ErrInvalidArgument, n, len(r.b), asked)
	}
	ready := make([]ReplicaWaitReady, 0, n)
	for range n {
		i, flags, hw := r.u32(), r.u8(), r.i64()
		if int64(i) >= int64(asked) || len(ready) > 0 && i <= ready[len(ready)-1].Index {
			return nil, fmt.Errorf("%w: replica wait: ready topic %d of %d asked, out of order or range", ErrInvalidArgument, i, asked)
		}
		fetch := flags == ReplicaWaitFetch
		if flags&^ReplicaWaitFetch != 0 || hw < -1 || hw == -1 && !fetch {
			return nil, fmt.Errorf("%w: replica wait: ready topic %d: flags %#x, high water %d", ErrInvalidArgument, i, flags, hw)
		}
		ready = append(ready, ReplicaWaitReady{Index: i, Fetch: fetch, HighWater: hw})
	}
	return ready, r.end()
}
