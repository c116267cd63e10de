package service

import (
	"encoding/json"
	"fmt"

	"github.com/haraqa/haraqa/broker/auth"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// This file: consume, the read and the watch a long poll parks on.

// ReadResult is what a Read found: spans of whole batches in segment
// files, held open until Release (storage's).
type ReadResult = storage.ReadResult

// File is a segment file a ReadResult's span is in.
type File = storage.File

// Read returns the span of whole batches of topic that covers the messages
// [offset, offset+limit) (limit <= 0: any), at most maxBytes of batches
// but the first (the consume right). A negative offset counts back from
// the end (-1: the last message); one before the oldest kept and one past
// the end are ErrOffsetOutOfRange, on both ports. The result's Offset is
// the offset resolved; with no batch there (at the end) the caller may
// Watch and read again. The result must be released.
func (s *Service) Read(c Caller, topic string, offset int64, limit int, maxBytes int64) (*ReadResult, error) {
	if err := s.Allow(c, protocol.OpConsume, topic); err != nil {
		return nil, err
	}
	if s.repl != nil {
		hw, replicated, err := s.repl.Readable(topic)
		if err != nil {
			return nil, err
		}
		if replicated {
			return s.readCommitted(topic, offset, limit, maxBytes, hw)
		}
	}
	l, err := s.store.Log(topic)
	if err != nil {
		return nil, err
	}
	r, err := l.Read(offset, limit, maxBytes)
	if err != nil {
		return nil, err
	}
	if r.Offset > r.End {
		r.Release()
		return nil, fmt.Errorf("%w: topic %q: offset %d is past the end (%d)", storage.ErrOffsetOutOfRange, topic, r.Offset, r.End)
	}
	return r, nil
}

// Watch calls fn once topic's next offset is past offset, or the topic is
// deleted or the store closes (the consume right): at once if that is so
// already, else on the goroutine that appended, and fn must not block.
// cancel removes fn if it has not run yet and reports whether it did so.
func (s *Service) Watch(c Caller, topic string, offset int64, fn func()) (cancel func() bool, err error) {
	if err := s.Allow(c, protocol.OpConsume, topic); err != nil {
		return nil, err
	}
	if s.repl != nil {
		if cancel, ok := s.repl.WatchReadable(topic, offset, fn); ok {
			return cancel, nil
		}
	}
	l, err := s.store.Log(topic)
	if err != nil {
		return nil, err
	}
	return l.Watch(offset, fn)
}

// readCommitted is Read of a replicated topic: only the offsets below
// its high-water mark hw, which every in-sync replica holds, are read; a
// negative offset counts back from hw, and the result's End is hw.
func (s *Service) readCommitted(topic string, offset int64, limit int, maxBytes, hw int64) (*ReadResult, error) {
	if offset == hw {
		return &ReadResult{Offset: offset, First: offset, Next: offset, End: hw}, nil
	}
	l, err := s.store.Log(topic)
	if err != nil {
		return nil, err
	}
	if offset < 0 {
		info, err := l.Info()
		if err != nil {
			return nil, err
		}
		offset = max(hw+offset, info.Oldest)
	}
	if offset >= hw {
		if offset > hw {
			// Past what consumers may see. Within what this replica
			// holds, it is waited for: a reader that moved from the old
			// leader to a new one, whose mark has yet to catch up.
			info, err := l.Info()
			if err != nil {
				return nil, err
			}
			if offset > info.Next {
				return nil, fmt.Errorf("%w: topic %q: offset %d is past the end (%d)", storage.ErrOffsetOutOfRange, topic, offset, hw)
			}
		}
		return &ReadResult{Offset: offset, First: offset, Next: offset, End: hw}, nil
	}
	n := hw - offset
	if limit > 0 {
		n = min(n, int64(limit))
	}
	r, err := l.Read(offset, int(min(n, 1<<31-1)), maxBytes)
	if err != nil {
		return nil, err
	}
	r.End = min(r.End, hw)
	return r, nil
}

// ReplicaRead serves a follower's fetch on the leader (the replication
// right): it records the follower's offset and reads from it (from the
// leader's start when the follower's log ends before it: the answer's
// From), never past the start of the next leader epoch. It returns the answer's fields
// with the read. The result must be released.
func (s *Service) ReplicaRead(c Caller, topic, follower string, epoch, offset, maxBytes int64) (*ReadResult, FetchAnswer, error) {
	if err := s.Allow(c, protocol.OpReplicaFetch, topic); err != nil {
		return nil, FetchAnswer{}, err
	}
	if s.followers == nil {
		return nil, FetchAnswer{}, &NotLeaderError{Topic: topic}
	}
	ans, err := s.followers.Fetch(topic, follower, epoch, offset)
	if err != nil {
		return nil, ans, err
	}
	l, err := s.fetchedLog(topic, ans)
	if err != nil {
		return nil, ans, err
	}
	r, err := l.ReadReplica(ans.From, ans.Limit, maxBytes)
	if err != nil {
		return nil, ans, err
	}
	return r, ans, nil
}

// ReplicaPoll serves one topic of a follower's replica wait (op 24) on
// the leader (the replication right): it records the follower's offset,
// as a fetch does (Followers.Fetch), and returns the topic's high-water
// mark and whether the follower should fetch it: the leader's log holds
// offset (or starts past it), or a fetch would fail and tell it why
// (then hw is -1).
func (s *Service) ReplicaPoll(c Caller, topic, follower string, epoch, offset int64) (hw int64, fetch bool) {
	if s.Allow(c, protocol.OpReplicaWait, topic) != nil || s.followers == nil {
		return -1, true
	}
	ans, err := s.followers.Fetch(topic, follower, epoch, offset)
	if err != nil {
		return -1, true
	}
	if ans.From > offset {
		return ans.HighWater, true
	}
	l, err := s.fetchedLog(topic, ans)
	if err != nil {
		return -1, true
	}
	info, err := l.Info()
	if err != nil {
		return -1, true
	}
	return ans.HighWater, info.Next > offset
}

// fetchedLog returns the handle on topic's log a follower's fetch was
// answered from (ans.Log), looking it up only if the answer has none.
func (s *Service) fetchedLog(topic string, ans FetchAnswer) (*storage.Log, error) {
	if ans.Log != nil {
		return ans.Log, nil
	}
	return s.store.Log(topic)
}

// ReplicaGone tells the replication that the connection a follower
// fetched topic on closed (the replication right).
func (s *Service) ReplicaGone(c Caller, topic, follower string) {
	if s.followers == nil || s.Allow(c, protocol.OpReplicaFetch, topic) != nil {
		return
	}
	s.followers.FetchGone(topic, follower)
}

// ReplicaWatch calls fn once topic's log (not its high-water mark) grows
// past offset: a follower's fetch parks on it (the replication right).
func (s *Service) ReplicaWatch(c Caller, topic string, offset int64, fn func()) (cancel func() bool, err error) {
	if err := s.Allow(c, protocol.OpReplicaFetch, topic); err != nil {
		return nil, err
	}
	l, err := s.store.Log(topic)
	if err != nil {
		return nil, err
	}
	return l.Watch(offset, fn)
}

// ReplicaWatchHighWater calls fn once topic's high-water mark passes hw
// (the replication right): a parked follower's fetch is answered then, so
// that the follower's own mark follows the leader's.
func (s *Service) ReplicaWatchHighWater(c Caller, topic string, hw int64, fn func()) (cancel func() bool, err error) {
	if err := s.Allow(c, protocol.OpReplicaFetch, topic); err != nil {
		return nil, err
	}
	if s.repl != nil {
		if cancel, ok := s.repl.WatchReadable(topic, hw, fn); ok {
			return cancel, nil
		}
	}
	return func() bool { return false }, nil
}

// EpochEnd answers a follower's epoch end request (the replication
// right).
func (s *Service) EpochEnd(c Caller, topic string, epoch int64) (found, end int64, err error) {
	if err := s.Allow(c, protocol.OpEpochEnd, topic); err != nil {
		return 0, 0, err
	}
	if s.followers == nil {
		return 0, 0, &NotLeaderError{Topic: topic}
	}
	return s.followers.EpochEnd(topic, epoch)
}

// ProducerOwners answers a follower's producer owners request (the
// replication right): the owners this server, leading topic, binds
// those of ids to.
func (s *Service) ProducerOwners(c Caller, topic string, ids []uint64) (map[uint64]string, error) {
	if err := s.Allow(c, protocol.OpProducerOwners, topic); err != nil {
		return nil, err
	}
	if s.followers == nil {
		return nil, &NotLeaderError{Topic: topic}
	}
	return s.followers.ProducerOwners(topic, ids)
}

// LogEnds answers a log ends request (the replication right on each
// topic): where this server's logs of topics end.
func (s *Service) LogEnds(c Caller, topics []string) ([]protocol.LogEnd, error) {
	for _, t := range topics {
		if err := s.Allow(c, protocol.OpLogEnds, t); err != nil {
			return nil, err
		}
	}
	if s.followers == nil {
		return nil, fmt.Errorf("%w: this server is not in a cluster (-cluster)", protocol.ErrInvalidArgument)
	}
	return s.followers.LogEnds(topics), nil
}

// MembershipTopic is the topic a cluster member request is allowed on:
// it needs the replication right on every topic, the cluster's token.
const MembershipTopic = "*"

// ClusterMember adds a server to the cluster (protocol.MemberAdd, entry
// in the -peers form) or removes one (protocol.MemberRemove, entry its
// ID). It returns once the change is recorded; the topics move after.
func (s *Service) ClusterMember(c Caller, action uint8, entry string) error {
	if err := s.Allow(c, protocol.OpClusterMember, MembershipTopic); err != nil {
		return err
	}
	if s.admin == nil {
		return fmt.Errorf("%w: this server is not in a cluster (-cluster)", protocol.ErrInvalidArgument)
	}
	return s.admin.ChangeMember(action, entry)
}

// ClusterStatus returns the cluster status (any valid token), filtered
// as topic lists are (statusView), for the port to encode as JSON;
// without a cluster, an error of CodeInvalidArgument.
func (s *Service) ClusterStatus(c Caller) (json.Marshaler, error) {
	if !s.Authenticated(c) {
		return nil, ErrUnauthenticated
	}
	if s.view == nil {
		return nil, fmt.Errorf("%w: this server is not in a cluster (-cluster)", protocol.ErrInvalidArgument)
	}
	return s.view.Status(s.statusView(c)), nil
}

// statusView is what a cluster status shows c. The topics are those c
// holds some right on, as ListTopics keeps, or the replication right
// (a member's token, which copies their logs). The members are shown to a
// caller with the replication or the admin right on every topic
// (HasRightOnAll): the member list is the cluster's, not a topic's, so
// the bar is the one membership changes use (the right on "*"); a token
// with admin on "app.*" administers a tenant, not the cluster, and a
// token with replication on some topics only is no member. Without
// Config.Auth everything is shown.
func (s *Service) statusView(c Caller) StatusView {
	if s.auth == nil {
		return StatusView{Members: true}
	}
	g := c.grant
	return StatusView{
		Members: s.HasRightOnAll(c, auth.Replication) || s.HasRightOnAll(c, auth.Admin),
		Topic:   func(name string) bool { return g.Allow(auth.Any, name) || g.Allow(auth.Replication, name) },
	}
}

// DecodeBody decodes the body of bt, a batch of a ReadResult, into dst's
// memory when it is large enough; a compressed body is decoded on the
// store's decode threads, which yield to the event loops, in c's turn
// among the tenants (Caller.Tenant). The caller bounds bt.RawSize first.
func (s *Service) DecodeBody(c Caller, bt *protocol.Batch, dst []byte) ([]byte, error) {
	return s.store.DecodeBody(c.Tenant(), bt, dst)
}
