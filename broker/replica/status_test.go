package replica

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/client/admin"
)

// TestStatusDecodesWhole: every field of the cluster status a server
// sends decodes into package admin's typed status, and encoding that gives
// back the server's JSON byte for byte, so neither side gains a field the
// other does not know.
func TestStatusDecodesWhole(t *testing.T) {
	st := Status{Self: "a:1", InStep: true, MembersHidden: true, RaftLeader: "b:1", DownUnknown: "no leader",
		Members: []MemberStatus{
			{Member: cluster.Member{ID: "a:1", Raft: "a:2", HTTP: "http://a:3"}},
			{Member: cluster.Member{ID: "b:1", Raft: "b:2", HTTP: "https://b:3", Leaving: true}, Down: true,
				DownSince: time.Date(2026, 12, 7, 22, 50, 1, 0, time.UTC).Format(time.RFC3339)},
		},
		Topics: []TopicStatus{{
			Topic: cluster.Topic{Name: "t", Replicas: []string{"a:1", "b:1"}, Leader: "a:1", Epoch: 3, ISR: []string{"a:1"},
				Version: 7, Target: []string{"a:1", "c:1"}, Start: 12, Proposal: "p1",
				Stepped: map[string]cluster.LogEnd{"b:1": {Topic: "t", Epoch: 2, End: 40}}},
			ReplicaCount: 2, InSyncCount: 1, HighWater: 41, Next: 42, ReadOnly: true, Repairing: true,
			Followers: []ReplicaStatus{{ID: "b:1", Next: 30, Lag: 12, InSync: false, CaughtUp: (1500 * time.Millisecond).String()}},
		}},
	}
	b, err := json.Marshal(&st)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var got admin.ClusterStatus
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	if f := got.Topics[0].Followers[0]; f.CaughtUp != 1500*time.Millisecond || f.Lag != 12 {
		t.Fatalf("follower %+v", f)
	}
	if m := got.Members[1]; !m.Down || !m.DownSince.Equal(time.Date(2026, 12, 7, 22, 50, 1, 0, time.UTC)) {
		t.Fatalf("member %+v", m)
	}
	again, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, b) {
		t.Fatalf("encoded again:\n%s\nthe server's:\n%s", again, b)
	}
	// The least status: no member, no topic field but the required.
	b, _ = json.Marshal(Status{Self: "a:1", Topics: []TopicStatus{{Topic: cluster.Topic{Name: "t"}}}})
	var least admin.ClusterStatus
	if err := json.Unmarshal(b, &least); err != nil {
		t.Fatal(err)
	}
	if again, _ := json.Marshal(least); !bytes.Equal(again, b) {
		t.Fatalf("encoded again:\n%s\nthe server's:\n%s", again, b)
	}
}
