package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/storage"
)

// This file: what the member tells of its replicated logs: readiness,
// the cluster status (op 19, GET /cluster) and the figures of /metrics.

// Ready implements service.ClusterView.
func (a viewAPI) Ready() error {
	m := a.m
	if !m.synced.Load() {
		return errors.New("joining its cluster: not in step with the Raft group yet")
	}
	m.mu.Lock()
	var behind []*replicaLog
	for _, t := range m.meta {
		if rl := m.logs[t.Name]; t.Leader != "" && rl != nil && !t.InSync(m.cfg.Self) {
			behind = append(behind, rl)
		}
	}
	m.mu.Unlock()
	failed := 0
	for _, rl := range behind {
		if rl.copyFailed() {
			failed++
		}
	}
	switch {
	case failed > 0:
		return fmt.Errorf("%d replicated topics' copies here turned read-only after a failed write or fsync: restart the server once its disk is sound", failed)
	case len(behind) > 0:
		return fmt.Errorf("catching up: not in the in-sync set of %d replicated topics", len(behind))
	}
	return nil
}

// GroupStats implements service.ClusterView.
func (a viewAPI) GroupStats() map[string][]service.GroupOffset {
	m := a.m
	m.mu.Lock()
	var led []string
	for name, t := range m.meta {
		if t.Leader == m.cfg.Self {
			led = append(led, name)
		}
	}
	m.mu.Unlock()
	out := map[string][]service.GroupOffset{}
	g := raftGroups{m}
	for _, name := range led {
		if groups, err := g.ListGroups(name); err == nil && len(groups) > 0 {
			out[name] = groups
		}
	}
	return out
}

// ReplicaStatus is a replica's position as its leader sees it.
type ReplicaStatus struct {
	ID       string `json:"id"`
	Next     int64  `json:"next"`      // the follower's next offset at its last fetch
	Lag      int64  `json:"lag"`       // messages behind the leader's end
	InSync   bool   `json:"in_sync"`   // in the in-sync set
	CaughtUp string `json:"caught_up"` // how long ago it last reached the leader's end
}

// TopicStatus is a replicated topic as this member sees it.
type TopicStatus struct {
	cluster.Topic
	ReplicaCount int             `json:"replica_count"` // len(Replicas), also when the members are hidden
	InSyncCount  int             `json:"in_sync_count"` // len(ISR), likewise
	HighWater    int64           `json:"high_water"`
	Next         int64           `json:"next"`                // this replica's next offset
	ReadOnly     bool            `json:"read_only,omitempty"` // this replica's copy turned read-only (copyFailed)
	Repairing    bool            `json:"repairing,omitempty"` // this replica's copy had a range unreadable on every volume at the start, and is not back in sync yet
	Followers    []ReplicaStatus `json:"followers,omitzero"`  // on the leader
}

// Status is the cluster status of op 19 and GET /cluster, which the
// ports encode as JSON (package client/admin decodes it into its typed
// status, field for field).
type Status struct {
	Self   string `json:"self"`
	InStep bool   `json:"in_step"` // caught up with the Raft group since it started: serving
	// MembersHidden: the caller may not see the members
	// (service.StatusView): RaftLeader is empty, Members absent, and
	// the topics name no replica but their leader.
	MembersHidden bool           `json:"members_hidden,omitempty"`
	RaftLeader    string         `json:"raft_leader"`
	Members       []MemberStatus `json:"members,omitempty"`
	// DownUnknown: why the members' liveness is not known (no Raft
	// leader, or it did not answer); Down is then false for every member.
	DownUnknown string        `json:"down_unknown,omitempty"`
	Topics      []TopicStatus `json:"topics"`
}

// MemberStatus is a member with its liveness as the Raft leader sees it.
type MemberStatus struct {
	cluster.Member
	// Down: no heartbeat from it within the member timeout; DownSince:
	// when it was last heard from (RFC 3339).
	Down      bool   `json:"down,omitempty"`
	DownSince string `json:"down_since,omitempty"`
}

// statusDownTimeout bounds the question to the Raft leader of which
// members are down (cluster.Node.Down).
const statusDownTimeout = 2 * time.Second

// Status implements service.ClusterView: the cluster status of op 19,
// the topics and members v shows.
func (a viewAPI) Status(v service.StatusView) json.Marshaler {
	m := a.m
	n := m.node.Load()
	if n == nil {
		return json.RawMessage(`{"error":"the server is joining its cluster"}`)
	}
	st := n.Status()
	out := &Status{Self: st.Self, InStep: m.synced.Load(), Topics: []TopicStatus{}}
	if v.Members {
		out.RaftLeader = st.RaftLeader
		ctx, cancel := context.WithTimeout(context.Background(), statusDownTimeout)
		down, err := n.Down(ctx)
		cancel()
		if err != nil {
			out.DownUnknown = err.Error()
		}
		for _, mb := range st.Members {
			ms := MemberStatus{Member: mb}
			if since, ok := down[mb.ID]; ok && mb.ID != st.Self {
				ms.Down, ms.DownSince = true, since.UTC().Format(time.RFC3339)
			}
			out.Members = append(out.Members, ms)
		}
	} else {
		out.MembersHidden = true
	}
	for _, t := range st.Topics {
		if v.Topic != nil && !v.Topic(t.Name) {
			continue
		}
		out.Topics = append(out.Topics, m.topicStatus(t, v.Members))
	}
	return out
}

// MarshalJSON encodes st with its fields' names.
func (st *Status) MarshalJSON() ([]byte, error) {
	type plain Status // without this method
	return json.Marshal((*plain)(st))
}

// topicStatus returns topic t's row of the status, with its members if
// members: from its log here when this member holds one.
func (m *Manager) topicStatus(t cluster.Topic, members bool) TopicStatus {
	ts := TopicStatus{Topic: t, ReplicaCount: len(t.Replicas), InSyncCount: len(t.ISR)}
	ts.Proposal = "" // the create's ID, internal to the Raft record
	m.mu.Lock()
	rl := m.logs[t.Name]
	ts.Repairing = m.repairing[t.Name]
	m.mu.Unlock()
	var l *storage.Log
	var err error
	if rl != nil {
		l, err = rl.handle()
	} else {
		l, err = m.store.Log(t.Name)
	}
	if err == nil {
		if info, err := l.Info(); err == nil {
			ts.Next = info.Next
			ts.ReadOnly = errors.Is(l.ReadOnly(), storage.ErrReadOnly) // copyFailed
		}
	}
	if rl != nil {
		rl.fillStatus(&ts, members)
	}
	if !members {
		ts.Replicas, ts.ISR, ts.Target, ts.Stepped = nil, nil, nil, nil
	}
	return ts
}

// fillStatus fills in ts, rl's row of the status, its high-water mark
// and, on its leader and if members, its followers' positions.
func (rl *replicaLog) fillStatus(ts *TopicStatus, members bool) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	ts.HighWater = rl.hw
	if !members || !rl.leading() {
		return
	}
	for _, id := range ts.Replicas {
		if f := rl.fol[id]; f != nil {
			ts.Followers = append(ts.Followers, ReplicaStatus{ID: id, Next: f.leo, Lag: max(0, ts.Next-f.leo),
				InSync: ts.InSync(id), CaughtUp: time.Since(f.caughtUp).Round(time.Millisecond).String()})
		}
	}
}

// Stats implements service.ClusterView.
func (a viewAPI) Stats() service.ReplicationStats {
	m := a.m
	st := service.ReplicationStats{LeaderChanges: m.stats.leaderChanges.Load(), ISRChanges: m.stats.isrChanges.Load(),
		Truncations: m.stats.truncations.Load(), FetchedBytes: m.stats.fetchedBytes.Load(), Repairs: m.stats.repairs.Load()}
	m.mu.Lock()
	for name, t := range m.meta {
		if t.IsReplica(m.cfg.Self) && t.Leader == "" {
			st.Offline++
		}
		if m.repairing[name] {
			st.Repairing++
		}
	}
	m.mu.Unlock()
	logs := m.held()
	slices.SortFunc(logs, func(a, b *replicaLog) int { return strings.Compare(a.name, b.name) })
	for _, rl := range logs {
		st.Topics = append(st.Topics, rl.statsRow())
	}
	return st
}

// statsRow returns rl's figures for /metrics: its role and sets and, on
// its leader, each follower's lag in messages and in bytes.
func (rl *replicaLog) statsRow() service.ReplicaTopicStats {
	rl.mu.Lock()
	ts := service.ReplicaTopicStats{Topic: rl.name, Leader: rl.leading(), Replicas: len(rl.meta.Replicas),
		InSync: len(rl.meta.ISR), Epoch: rl.meta.Epoch}
	var fols []service.FollowerLag
	if ts.Leader {
		for _, id := range rl.meta.Replicas {
			if f := rl.fol[id]; f != nil {
				fols = append(fols, service.FollowerLag{ID: id, Messages: f.leo})
			}
		}
	}
	rl.mu.Unlock()
	if !ts.Leader {
		return ts
	}
	l, err := rl.handle()
	var info storage.TopicInfo
	if err == nil {
		info, err = l.Info()
	}
	for i := range fols {
		from := fols[i].Messages
		fols[i].Messages = max(0, info.Next-from)
		if err == nil && fols[i].Messages > 0 {
			if r, rerr := l.Peek(from, 0, 1<<62); rerr == nil {
				fols[i].Bytes = r.Bytes
				r.Release()
			}
		}
	}
	ts.Followers = fols
	return ts
}
