package service

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// This file: the topic admin calls. Create, delete and truncate sync
// directories and remove files: they may wait on the disk.

// TopicInfo is a topic's offsets and size.
type TopicInfo = storage.TopicInfo

// CreateTopic creates topic (the admin right). It may wait on the disk.
func (s *Service) CreateTopic(c Caller, topic string) error {
	if err := s.Allow(c, protocol.OpCreateTopic, topic); err != nil {
		return err
	}
	if s.admin != nil {
		existed, err := s.admin.Create(topic)
		var nl *NotLeaderError
		switch {
		case existed:
			return fmt.Errorf("%w: %q", storage.ErrTopicExists, topic)
		case errors.As(err, &nl):
			return nil // created in the cluster; it lives on its replicas
		}
		return err
	}
	return s.store.CreateTopic(topic)
}

// SetReplicas creates topic on n replicas, or changes its replication
// factor to n (the admin right): on a cluster, where its new replicas
// copy its log and the members it leaves delete theirs once they have
// (the move goes on after the answer: hrqa cluster status shows it).
// Without a cluster n must be 1, and an existing topic is left as it is.
// created tells whether the topic was created. It may wait on the Raft
// group.
func (s *Service) SetReplicas(c Caller, topic string, n int) (created bool, err error) {
	if err := s.Allow(c, protocol.OpTopicReplicas, topic); err != nil {
		return false, err
	}
	if s.admin == nil {
		if n != 1 {
			return false, fmt.Errorf("%w: a topic on %d replicas needs a cluster of servers (-cluster)", protocol.ErrInvalidArgument, n)
		}
		err := s.store.CreateTopic(topic)
		if errors.Is(err, storage.ErrTopicExists) {
			return false, nil
		}
		return err == nil, err
	}
	created, err = s.admin.SetReplicas(topic, n)
	if nl := (*NotLeaderError)(nil); errors.As(err, &nl) {
		return created, nil // created in the cluster; it lives on its replicas
	}
	return created, err
}

// DeleteTopic deletes topic and its groups (the admin right). It may wait
// on the disk.
func (s *Service) DeleteTopic(c Caller, topic string) error {
	if err := s.Allow(c, protocol.OpDeleteTopic, topic); err != nil {
		return err
	}
	if s.admin != nil && s.repl.Replicated(topic) {
		return s.admin.Delete(topic)
	}
	return s.store.DeleteTopic(topic)
}

// Info returns topic's offsets and size (any right on it).
func (s *Service) Info(c Caller, topic string) (TopicInfo, error) {
	if err := s.Allow(c, protocol.OpTopicInfo, topic); err != nil {
		return TopicInfo{}, err
	}
	l, err := s.store.Log(topic)
	if err != nil {
		return TopicInfo{}, err
	}
	return l.Info()
}

// HasTopic reports whether this server holds topic. It checks no right:
// it decides only where a request is served (peers).
func (s *Service) HasTopic(topic string) bool { return s.store.HasTopic(topic) }

// ListTopics returns the names of the topics that start with prefix and,
// when regex is not empty, match it, of those c holds some right on. A
// regex is compiled and matched on the filter workers (Config.FilterWorkers;
// past their queue the error has CodeLimitReached): with one, ListTopics
// blocks, so never call it so on an event loop. An invalid regex is
// protocol.ErrInvalidArgument.
func (s *Service) ListTopics(c Caller, prefix, regex string) ([]string, error) {
	if s.auth != nil && c.grant == nil {
		return nil, ErrUnauthenticated
	}
	names := s.store.ListTopics(prefix)
	if s.auth != nil {
		names = c.grant.Filter(names)
	}
	if regex == "" {
		return names, nil
	}
	return s.filters.keep(regex, names)
}

// Truncate makes topic's offsets before `before` unreadable, deleting the
// segment files that hold only those (the admin right), and returns the
// topic's info after it. before must be within [0, next]: negative is
// protocol.ErrInvalidArgument, past the end ErrOffsetOutOfRange, on both
// ports. A replicated topic is truncated by its leader (else a
// *NotLeaderError) on every replica, up to its high-water mark at most,
// which is then its end here. It may wait on the disk.
func (s *Service) Truncate(c Caller, topic string, before int64) (TopicInfo, error) {
	l, info, replicated, err := s.truncateInfo(c, topic)
	if err != nil {
		return info, err
	}
	if before < 0 {
		return info, fmt.Errorf("%w: truncate before %d: an offset must not be negative", protocol.ErrInvalidArgument, before)
	}
	if before > info.Next {
		return info, fmt.Errorf("%w: truncate before %d: the topic's offsets are [%d, %d]", storage.ErrOffsetOutOfRange, before, info.Oldest, info.Next)
	}
	if replicated {
		err = s.admin.Truncate(topic, before)
	} else {
		err = l.Truncate(before)
	}
	if err != nil {
		return info, err
	}
	return l.Info()
}

// TruncateTime truncates topic before the first message appended at or
// after t (the admin right), and returns the topic's info after it: on
// every replica of a replicated topic, as Truncate. It may wait on the
// disk.
func (s *Service) TruncateTime(c Caller, topic string, t time.Time) (TopicInfo, error) {
	l, info, replicated, err := s.truncateInfo(c, topic)
	if err != nil {
		return info, err
	}
	if replicated {
		var before int64
		if before, err = l.OffsetAt(t); err == nil {
			err = s.admin.Truncate(topic, min(before, info.Next))
		}
	} else {
		err = l.TruncateTime(t)
	}
	if err != nil {
		return info, err
	}
	return l.Info()
}

// truncateInfo checks a truncation of topic: the admin right and, for a
// replicated topic, that this server leads it. It returns the topic's
// log and info, whose end for a replicated topic is its high-water mark,
// and whether it is replicated.
func (s *Service) truncateInfo(c Caller, topic string) (*storage.Log, TopicInfo, bool, error) {
	if err := s.Allow(c, protocol.OpTruncate, topic); err != nil {
		return nil, TopicInfo{}, false, err
	}
	hw := int64(-1)
	replicated := false
	if s.admin != nil {
		var err error
		if hw, replicated, err = s.admin.Truncatable(topic); err != nil {
			return nil, TopicInfo{}, true, err
		}
	}
	l, err := s.store.Log(topic)
	if err != nil {
		return nil, TopicInfo{}, replicated, err
	}
	info, err := l.Info()
	if replicated {
		info.Next = min(info.Next, hw)
	}
	return l, info, replicated, err
}

// OffsetAt returns the first offset of topic appended at or after t (the
// consume right). It reads batch headers from the disk.
func (s *Service) OffsetAt(c Caller, topic string, t time.Time) (int64, error) {
	if err := s.Allow(c, protocol.OpOffsetAt, topic); err != nil {
		return 0, err
	}
	l, err := s.store.Log(topic)
	if err != nil {
		return 0, err
	}
	return l.OffsetAt(t)
}

// ValidTopic returns nil if name is a valid topic name, else an error of
// CodeInvalidTopic that names it and says why. Every call checks names
// (storage refuses an invalid one); a port may call it first to refuse
// early.
func ValidTopic(name string) error {
	err := protocol.ValidTopic(name)
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w %q: %s", storage.ErrInvalidTopic, name, strings.TrimPrefix(err.Error(), protocol.ErrInvalidTopic.Error()+": "))
}
