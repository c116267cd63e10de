package cluster

import "errors"

var (
	// ErrNotLeader: the request needs the Raft leader (a metadata change)
	// or the topic's leader, and this server is neither. The error's text
	// names the leader when one is known.
	ErrNotLeader = errors.New("cluster: not the leader")
	// ErrNoLeader: no server leads (an election is under way, or the
	// topic's in-sync replicas are all down).
	ErrNoLeader = errors.New("cluster: no leader")
	// ErrStaleEpoch: a change decided under a leader epoch that is no
	// longer the topic's.
	ErrStaleEpoch = errors.New("cluster: stale leader epoch")
	// ErrTopicExists: the topic is already in the cluster's metadata.
	ErrTopicExists = errors.New("cluster: topic exists")
	// ErrTopicNotFound: the topic is not in the cluster's metadata.
	ErrTopicNotFound = errors.New("cluster: topic not found")
	// ErrBadCommand: a metadata change that breaks the State's rules.
	ErrBadCommand = errors.New("cluster: bad command")
	// ErrNotEnoughMembers: fewer members than the replicas asked for.
	ErrNotEnoughMembers = errors.New("cluster: not enough members")
	// ErrTopicMoving: the topic is being moved (a member joined or is
	// leaving, or its replication factor changed); another change waits
	// until the move ends.
	ErrTopicMoving = errors.New("cluster: topic is moving")
	// ErrClosed: the node is shut down.
	ErrClosed = errors.New("cluster: closed")
)
