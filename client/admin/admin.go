package admin

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/client/internal/adminreq"
	"github.com/haraqa/haraqa/protocol"
)

// Client administers the cluster of the servers a *client.Client talks
// to, through that client's connections, token and TLS. It holds no state
// of its own: New is cheap, and the *client.Client stays the caller's to
// close.
type Client struct {
	c *client.Client
}

// New returns an admin client over c.
func New(c *client.Client) *Client { return &Client{c: c} }

// do sends one request (see adminreq.Do).
func (a *Client) do(ctx context.Context, topic string, op protocol.Op, build func(dst []byte, corrID uint32) []byte) ([]byte, error) {
	return adminreq.Do(ctx, a.c, topic, op, build)
}

// ClusterStatus returns the server's view of its cluster (protocol op
// 19; docs/replication.md): members, the Raft leader, and each replicated
// topic's replicas, leader, epoch, in-sync set and, on the server that
// leads it, each replica's lag. A client of several servers asks them in
// turn until one answers. Any valid token may ask; what it shows depends
// on the token's rights (ClusterStatus.MembersHidden). A server not in a
// cluster answers client.ErrInvalidArgument.
func (a *Client) ClusterStatus(ctx context.Context) (ClusterStatus, error) {
	p, err := a.do(ctx, "", protocol.OpClusterStatus, protocol.AppendClusterStatusRequest)
	if err != nil {
		return ClusterStatus{}, err
	}
	var st ClusterStatus
	if err := json.Unmarshal(p, &st); err != nil {
		return ClusterStatus{}, fmt.Errorf("%w: %w", ErrBadStatus, err)
	}
	return st, nil
}

// AddMember adds a server to the cluster, given as in the servers'
// -peers (host:port/http/cluster); the server must have been started
// with -cluster-join. It needs the replication right on every topic (the
// cluster's token), returns once the change is recorded, and leaves the
// moves of topics onto the new member to the cluster: follow them with
// ClusterStatus (Topic.Target).
func (a *Client) AddMember(ctx context.Context, entry string) error {
	return a.member(ctx, protocol.MemberAdd, entry)
}

// RemoveMember removes member id (its binary address, as ClusterStatus
// lists it): its topics move to the others first, then it leaves. It
// needs the same right as AddMember and returns likewise once the change
// is recorded.
func (a *Client) RemoveMember(ctx context.Context, id string) error {
	return a.member(ctx, protocol.MemberRemove, id)
}

func (a *Client) member(ctx context.Context, action uint8, entry string) error {
	_, err := a.do(ctx, "", protocol.OpClusterMember, func(dst []byte, id uint32) []byte {
		return protocol.AppendClusterMemberRequest(dst, id, action, entry)
	})
	return err
}

// SetReplicas creates topic on n replicas of a cluster of servers
// (-cluster), or, when it exists, changes its replication factor to n:
// its new replicas copy its log, join its in-sync set, and then the
// servers it leaves delete their copies. It returns once the change is
// recorded; ClusterStatus shows the move (Topic.Target) until it ends. n
// below the servers' -min-insync, above their number, or while the topic
// moves is client.ErrInvalidArgument; without a cluster only n = 1 is
// taken (a create that leaves an existing topic as it is).
func (a *Client) SetReplicas(ctx context.Context, topic string, n int) error {
	if n < 1 || n > protocol.MaxTopicReplicas {
		return fmt.Errorf("%w: %d replicas, want 1 to %d", client.ErrInvalidArgument, n, protocol.MaxTopicReplicas)
	}
	_, err := a.do(ctx, topic, protocol.OpTopicReplicas, func(dst []byte, id uint32) []byte {
		return protocol.AppendTopicReplicasRequest(dst, id, topic, uint8(n))
	})
	return err
}
