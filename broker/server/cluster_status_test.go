package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/server"
	"github.com/haraqa/haraqa/client"
)

// statusView is the part of a cluster status that rights filter.
type statusView struct {
	MembersHidden bool   `json:"members_hidden"`
	RaftLeader    string `json:"raft_leader"`
	Members       []struct {
		ID   string `json:"id"`
		Raft string `json:"raft"`
	} `json:"members"`
	Topics []struct {
		Name         string   `json:"name"`
		Leader       string   `json:"leader"`
		Replicas     []string `json:"replicas"`
		ISR          []string `json:"isr"`
		ReplicaCount int      `json:"replica_count"`
		InSyncCount  int      `json:"in_sync_count"`
		Followers    []struct {
			ID string `json:"id"`
		} `json:"followers"`
	} `json:"topics"`
}

func (v statusView) topics() []string {
	var names []string
	for _, t := range v.Topics {
		names = append(names, t.Name)
	}
	return names
}

// getCluster is GET /cluster on server i with token.
func getCluster(t *testing.T, tc *testCluster, i int, token string) statusView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+tc.cfgs[i].HTTPAddr+"/cluster", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /cluster as %s: %d %s %v", token, resp.StatusCode, b, err)
	}
	var v statusView
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return v
}

// binaryCluster is op 19 on server i with token.
func binaryCluster(t *testing.T, tc *testCluster, i int, token string) statusView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := statusJSON(ctx, dialOneWith(t, tc.addrs[i], client.WithToken(token)))
	if err != nil {
		t.Fatalf("op 19 as %s: %v", token, err)
	}
	var v statusView
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return v
}

// TestClusterStatusFilteredByRights: GET /cluster and op 19 show a token
// the topics it holds a right on, as the topic list does, and the
// members (the member list, the Raft leader, each topic's replicas,
// in-sync set and followers) only to the replication or admin right on
// every topic; a tenant sees its topic's leader and replica counts, and
// that the members are hidden.
func TestClusterStatusFilteredByRights(t *testing.T) {
	tc := startAuthCluster(t, map[string]string{
		"root":     "admin *",
		"reader":   "consume app.reader",
		"appadmin": "admin app.*",
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root := dialAll(t, tc.addrs, client.WithToken("root"))
	for _, topic := range []string{"app.reader", "app.x", "hr.payroll"} {
		if err := root.CreateTopic(ctx, topic); err != nil {
			t.Fatal(err)
		}
	}
	st := waitTopic(t, dialOneWith(t, tc.addrs[0], client.WithToken("cluster-tok")), "hr.payroll", "in sync on three replicas",
		func(st topicStatus) bool { return len(st.ISR) == 3 })
	leader := tc.index(st.Leader) // its status holds the followers' lag

	for _, tok := range []string{"root", "cluster-tok"} {
		for name, v := range map[string]statusView{"GET /cluster": getCluster(t, tc, leader, tok), "op 19": binaryCluster(t, tc, leader, tok)} {
			if v.MembersHidden || len(v.Members) != 3 || v.RaftLeader == "" || len(v.Topics) != 3 {
				t.Fatalf("%s as %s: %+v, want every member and topic", name, tok, v)
			}
		}
	}
	for tok, want := range map[string][]string{"reader": {"app.reader"}, "appadmin": {"app.reader", "app.x"}} {
		for i := range tc.addrs {
			for name, v := range map[string]statusView{"GET /cluster": getCluster(t, tc, i, tok), "op 19": binaryCluster(t, tc, i, tok)} {
				if !v.MembersHidden || len(v.Members) != 0 || v.RaftLeader != "" {
					t.Fatalf("%s on server %d as %s shows the members: %+v", name, i, tok, v)
				}
				if !slices.Equal(v.topics(), want) {
					t.Fatalf("%s on server %d as %s: topics %v, want %v", name, i, tok, v.topics(), want)
				}
				for _, ts := range v.Topics {
					if len(ts.Replicas) != 0 || len(ts.ISR) != 0 || len(ts.Followers) != 0 || ts.ReplicaCount != 3 || ts.Leader == "" {
						t.Fatalf("%s on server %d as %s: topic %+v, want its leader and counts only", name, i, tok, ts)
					}
				}
			}
		}
		topics, err := dialAll(t, tc.addrs, client.WithToken(tok)).ListTopics(ctx, "")
		if err != nil || !slices.Equal(topics, want) {
			t.Fatalf("list topics as %s: %v %v, want %v as the status shows", tok, topics, err, want)
		}
	}
}

// TestClusterGroupChangeRate: a tenant committing a group of a replicated
// topic in a loop is refused past -max-group-change-rate (code 15 naming
// the flag on the binary port, 429 over HTTP), while another tenant's
// commits on the same servers go through.
func TestClusterGroupChangeRate(t *testing.T) {
	const rate = 5
	tc := startAuthCluster(t, map[string]string{"root": "admin *", "flood": "consume flood", "quiet": "consume quiet"},
		func(_ int, cfg *server.Config) { cfg.Broker.MaxGroupChangeRate = rate })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root := dialAll(t, tc.addrs, client.WithToken("root"))
	for _, topic := range []string{"flood", "quiet"} {
		if err := root.CreateTopic(ctx, topic); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := root.Produce(ctx, topic, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	status := dialOneWith(t, tc.addrs[0], client.WithToken("cluster-tok"))
	leaderOf := func(topic string) string {
		return waitTopic(t, status, topic, "in sync", func(st topicStatus) bool { return len(st.ISR) == 3 && st.HighWater == 3 }).Leader
	}
	floodLeader, quietLeader := leaderOf("flood"), leaderOf("quiet")
	flood := dialOneWith(t, floodLeader, client.WithToken("flood"))
	quiet := dialOneWith(t, quietLeader, client.WithToken("quiet"))

	// floodUntilRefused commits until the flood token is refused, after
	// a burst of a second's worth when its bucket is full.
	floodUntilRefused := func(full bool) {
		t.Helper()
		for i := range 10 * rate {
			err := flood.CommitOffset(ctx, "g", "flood", 1)
			if err == nil {
				continue
			}
			if !errors.Is(err, client.ErrLimitReached) || !strings.Contains(err.Error(), "-max-group-change-rate") {
				t.Fatalf("commit %d: %v, want limit reached naming -max-group-change-rate", i, err)
			}
			if full && i < rate {
				t.Fatalf("refused after %d commits, want a burst of %d first", i, rate)
			}
			return
		}
		t.Fatalf("%d commits in a row taken at %d a second", 10*rate, rate)
	}
	floodUntilRefused(true)
	for i := range rate {
		if err := quiet.CommitOffset(ctx, "q", "quiet", int64(i%3)); err != nil {
			t.Fatalf("another token's commit %d while the first is refused: %v", i, err)
		}
	}

	// Over HTTP: a consume with a group commits, refused 429.
	httpAddr := tc.cfgs[tc.index(floodLeader)].HTTPAddr
	var last string
	for range 10 {
		floodUntilRefused(false)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/topics/flood", nil)
		req.Header.Set("Authorization", "Bearer flood")
		req.Header.Set("X-Consumer-Group", "h")
		req.Header.Set("X-Limit", "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests && strings.Contains(string(b), "-max-group-change-rate") {
			return
		}
		last = fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	t.Fatalf("an HTTP consume with a group after the token's commits were refused: %s, want 429", last)
}
