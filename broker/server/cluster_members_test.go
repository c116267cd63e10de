package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/server"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/client/admin"
)

// addServer starts one more server, started to join the cluster (it does
// not bootstrap), and returns its -peers entry.
func (tc *testCluster) addServer() string {
	tc.t.Helper()
	bin, web, clu := fixedPort(tc.t), fixedPort(tc.t), fixedPort(tc.t)
	entry := fmt.Sprintf("127.0.0.1:%d/%d/%d", bin, web, clu)
	var entries []string
	for _, c := range tc.cfgs {
		for _, p := range c.Peers {
			e := fmt.Sprintf("%s/%s/%s", p.Addr, strings.TrimPrefix(p.HTTP, "http://127.0.0.1:"), strings.TrimPrefix(p.Raft, "127.0.0.1:"))
			if !slices.Contains(entries, e) {
				entries = append(entries, e)
			}
		}
		break
	}
	peers, err := server.ParsePeers(strings.Join(append(entries, entry), ","), 0)
	if err != nil {
		tc.t.Fatal(err)
	}
	self := peers[len(peers)-1]
	cfg := server.DefaultConfig(tc.t.TempDir())
	cfg.Broker.Addr = self.Addr
	cfg.HTTPAddr = strings.TrimPrefix(self.HTTP, "http://")
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Peers = peers
	cc := *tc.cfgs[0].Cluster
	cc.Addr, cc.Join, cc.Listener = self.Raft, true, nil
	cfg.Cluster = &cc
	tc.cfgs = append(tc.cfgs, cfg)
	tc.addrs = append(tc.addrs, self.Addr)
	tc.servers = append(tc.servers, nil)
	tc.start(len(tc.servers) - 1)
	return entry
}

// viewMember is a member as cluster status lists it.
type viewMember struct {
	ID      string `json:"id"`
	Leaving bool   `json:"leaving"`
}

// clusterView is what cluster status tells of the members and topics.
type clusterView struct {
	Members []viewMember `json:"members"`
	Topics  []struct {
		topicStatus
		Target []string `json:"target"`
	} `json:"topics"`
}

// waitView waits up to 60 s until the status of c satisfies ok.
func waitView(t *testing.T, c *client.Client, what string, ok func(clusterView) bool) clusterView {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var v clusterView
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		b, err := statusJSON(ctx, c)
		cancel()
		if err == nil {
			err = json.Unmarshal(b, &v)
		}
		if err == nil && ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within 60 s: %s: %s %v", what, b, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// placed reports whether every topic of v has r replicas, all in sync,
// where rendezvous hashing over v's members places it, and no move.
func placed(v clusterView, r int) bool {
	var ids []string
	for _, m := range v.Members {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	for _, tp := range v.Topics {
		var want []string
		for _, i := range client.PlaceN(tp.Name, ids, r) {
			want = append(want, ids[i])
		}
		if len(tp.Target) > 0 || len(tp.ISR) != r || len(tp.Replicas) != r {
			return false
		}
		for _, id := range want {
			if !slices.Contains(tp.Replicas, id) {
				return false
			}
		}
	}
	return true
}

// TestClusterMembersJoinAndLeave: a server started to join is added and
// topics move onto it, their logs copied whole; a member removed has its
// topics moved to the others, leaves the member list and deletes its
// copies; producers and readers of every topic see every message.
func TestClusterMembersJoinAndLeave(t *testing.T) {
	tc := startTestCluster(t, 3, 2, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := dialAll(t, tc.addrs, client.WithIdempotence(true))
	var topics []string
	for i := range 16 {
		topics = append(topics, fmt.Sprintf("m%02d", i))
	}
	acked := map[string][]string{}
	produce := func(c *client.Client, n int) {
		t.Helper()
		for _, topic := range topics {
			for range n {
				msg := fmt.Sprintf("%s-%04d", topic, len(acked[topic]))
				if _, err := c.Produce(ctx, topic, []byte(msg)); err != nil {
					t.Fatalf("produce %s: %v", msg, err)
				}
				acked[topic] = append(acked[topic], msg)
			}
		}
	}
	for _, topic := range topics {
		if err := c.CreateTopic(ctx, topic); err != nil {
			t.Fatal(err)
		}
	}
	produce(c, 20)

	entry := tc.addServer()
	newID := tc.addrs[3]
	if err := admin.New(dialOneWith(t, tc.addrs[0], client.WithToken(testSecret))).AddMember(ctx, entry); err != nil {
		t.Fatal(err)
	}
	v := waitView(t, dialOne(t, tc.addrs[1]), "the topics placed over four members", func(v clusterView) bool {
		return len(v.Members) == 4 && placed(v, 2)
	})
	var onNew []string
	for _, tp := range v.Topics {
		if slices.Contains(tp.Replicas, newID) {
			onNew = append(onNew, tp.Name)
		}
	}
	if len(onNew) == 0 {
		t.Fatalf("no topic moved to the new member: %+v", v.Topics)
	}
	t.Logf("%d of %d topics moved onto the new member", len(onNew), len(topics))
	waitInStep(t, dialOne(t, newID))
	for _, topic := range onNew {
		checkTopic(t, dialOne(t, newID), topic, acked[topic])
	}

	// The HTTP port shows the same status.
	var hv clusterView
	if code, body := httpDo(t, "GET", "http://"+tc.cfgs[2].HTTPAddr+"/cluster", ""); code != http.StatusOK || json.Unmarshal(body, &hv) != nil || len(hv.Members) != 4 {
		t.Fatalf("GET /cluster: %d %s", code, body)
	}
	if code, body := httpDo(t, "POST", "http://"+tc.cfgs[2].HTTPAddr+"/cluster/members", ""); code != http.StatusBadRequest {
		t.Fatalf("POST /cluster/members with no entry: %d %s, want 400", code, body)
	}

	// The first member leaves, removed over the HTTP port: its topics go
	// to the others.
	gone := tc.addrs[0]
	if code, body := httpDo(t, "DELETE", "http://"+tc.cfgs[1].HTTPAddr+"/cluster/members/"+gone, ""); code != http.StatusAccepted {
		t.Fatalf("DELETE /cluster/members/%s: %d %s", gone, code, body)
	}
	waitView(t, dialOne(t, tc.addrs[1]), "the member gone and its topics moved", func(v clusterView) bool {
		return len(v.Members) == 3 && !slices.ContainsFunc(v.Members, func(m viewMember) bool { return m.ID == gone }) && placed(v, 2)
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		left, err := dialOne(t, gone).ListTopics(ctx, "")
		if err == nil && len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the removed member still holds %v (%v)", left, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rest := dialAll(t, tc.addrs[1:], client.WithIdempotence(true))
	produce(rest, 5)
	for _, topic := range topics {
		checkTopic(t, rest, topic, acked[topic])
	}
}

// httpDo makes one HTTP request with body and returns its status and body.
func httpDo(t *testing.T, method, url, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testSecret) // membership changes need the members' secret
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}
