package admin

import (
	"encoding/json"
	"fmt"
	"time"
)

// This file: the cluster status a server sends (protocol op 19, GET
// /cluster), as typed values. The JSON names are the server's (package
// broker/replica builds the status), so json.Marshal of a ClusterStatus
// gives back the server's JSON.

// ClusterStatus is one server's view of its cluster.
type ClusterStatus struct {
	// Self is the member ID (binary address) of the server that answered.
	Self string `json:"self"`
	// InStep: the server caught up with the Raft group since it started,
	// and serves its replicated topics.
	InStep bool `json:"in_step"`
	// MembersHidden: the token may not see the members (it needs the
	// replication or admin right on every topic): RaftLeader is empty,
	// Members absent, and the topics name no replica but their leader
	// (ReplicaCount and InSyncCount still count them).
	MembersHidden bool `json:"members_hidden,omitempty"`
	// RaftLeader is the member that leads the cluster's Raft group.
	RaftLeader string   `json:"raft_leader"`
	Members    []Member `json:"members,omitempty"`
	// DownUnknown: why the members' liveness is not known (no Raft
	// leader, or it did not answer); Member.Down is then false for all.
	DownUnknown string `json:"down_unknown,omitempty"`
	// Topics are the replicated topics the token may see, by name.
	Topics []Topic `json:"topics"`
	// Error, if set, is why the server has no status to give yet (it is
	// joining its cluster); the other fields are then empty.
	Error string `json:"error,omitempty"`
}

// Member is a server of the cluster, with its liveness as the Raft
// leader sees it.
type Member struct {
	// ID is the member's binary address (host:port), as clients spell
	// it: the name placement hashes.
	ID string `json:"id"`
	// Raft is the address of its cluster port (host:port).
	Raft string `json:"raft"`
	// HTTP is the base URL of its HTTP port.
	HTTP string `json:"http"`
	// Leaving: the member is being removed; its topics move away.
	Leaving bool `json:"leaving,omitempty"`
	// Down: no heartbeat from it within the member timeout; DownSince:
	// when it was last heard from (seconds resolution).
	Down      bool      `json:"down,omitempty"`
	DownSince time.Time `json:"down_since,omitzero"`
}

// Topic is a replicated topic as the answering server sees it.
type Topic struct {
	Name string `json:"name"`
	// Replicas are the members holding the topic, in placement order
	// (the first is the preferred leader).
	Replicas []string `json:"replicas"`
	// Leader takes the topic's produces; "" while none can lead.
	Leader string `json:"leader"`
	// Epoch is the leader epoch: 1 at creation, one more on every
	// leader change.
	Epoch int64 `json:"epoch"`
	// ISR is the in-sync set, the leader first: the replicas that hold
	// everything acknowledged with acks=all.
	ISR []string `json:"isr"`
	// Version counts the topic's changes of leader or in-sync set.
	Version int64 `json:"version"`
	// Target, while the topic moves (a member joined or is leaving, or
	// SetReplicas), is the replicas it moves to.
	Target []string `json:"target,omitempty"`
	// Start is where every replica's log begins at the latest (an admin
	// truncation).
	Start int64 `json:"start,omitempty"`
	// Stepped are the members that left the in-sync set because their
	// copy may lack acknowledged batches, with where their logs ended.
	Stepped map[string]LogEnd `json:"stepped,omitempty"`
	// Proposal is the ID of the create that recorded the topic.
	Proposal string `json:"proposal,omitempty"`
	// ReplicaCount and InSyncCount are len(Replicas) and len(ISR), also
	// when the members are hidden.
	ReplicaCount int `json:"replica_count"`
	InSyncCount  int `json:"in_sync_count"`
	// HighWater is the topic's high-water mark as the answering server
	// knows it: consumers read below it.
	HighWater int64 `json:"high_water"`
	// Next is where the answering server's copy ends (its next offset).
	Next int64 `json:"next"`
	// ReadOnly: the answering server's copy turned read-only after a
	// failed write (it needs a restart).
	ReadOnly bool `json:"read_only,omitempty"`
	// Repairing: the answering server's copy had a range unreadable on
	// every volume at its start, and is not back in sync yet.
	Repairing bool `json:"repairing,omitempty"`
	// Followers, on the topic's leader (and with the members shown),
	// are its replicas' positions.
	Followers []Follower `json:"followers,omitzero"`
}

// LogEnd is where a replica's log of a topic ended: the last leader epoch
// it held batches of, and its next offset.
type LogEnd struct {
	Topic string `json:"topic,omitempty"`
	Epoch int64  `json:"epoch"`
	End   int64  `json:"end"`
}

// Follower is a replica's position as the topic's leader sees it.
type Follower struct {
	ID     string // its member ID
	Next   int64  // its next offset at its last fetch
	Lag    int64  // messages behind the leader's end
	InSync bool   // in the in-sync set
	// CaughtUp is how long before the status it last reached the
	// leader's end (milliseconds resolution).
	CaughtUp time.Duration
}

// followerJSON is Follower as the server sends it: CaughtUp as a
// duration string ("1.5s").
type followerJSON struct {
	ID       string `json:"id"`
	Next     int64  `json:"next"`
	Lag      int64  `json:"lag"`
	InSync   bool   `json:"in_sync"`
	CaughtUp string `json:"caught_up"`
}

// MarshalJSON encodes f as the server does.
func (f Follower) MarshalJSON() ([]byte, error) {
	return json.Marshal(followerJSON{ID: f.ID, Next: f.Next, Lag: f.Lag, InSync: f.InSync, CaughtUp: f.CaughtUp.String()})
}

// UnmarshalJSON decodes a follower as the server sends it.
func (f *Follower) UnmarshalJSON(b []byte) error {
	var j followerJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*f = Follower{ID: j.ID, Next: j.Next, Lag: j.Lag, InSync: j.InSync}
	if j.CaughtUp != "" {
		d, err := time.ParseDuration(j.CaughtUp)
		if err != nil {
			return fmt.Errorf("follower %s: caught_up: %w", j.ID, err)
		}
		f.CaughtUp = d
	}
	return nil
}
