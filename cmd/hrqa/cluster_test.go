package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	hserver "github.com/haraqa/haraqa/broker/server"
	"github.com/haraqa/haraqa/client/admin"
)

// TestClusterStatus: a one-server cluster's status, as text and JSON; a
// server without -cluster says it is in none.
func TestClusterStatus(t *testing.T) {
	bin := oneServerCluster(t, nil)
	deadline := time.Now().Add(20 * time.Second)
	for hrqa(t, bin, "", "topics", "create", "orders").code != 0 {
		if time.Now().After(deadline) {
			t.Fatal("topics create never succeeded")
		}
		time.Sleep(50 * time.Millisecond)
	}
	ok(t, bin, "", "produce", "orders", "a", "b")
	out := ok(t, bin, "", "cluster", "status")
	for _, want := range []string{"raft leader  " + bin, "in step      true", "orders", "1/1"} {
		if !strings.Contains(out, want) {
			t.Fatalf("cluster status lacks %q:\n%s", want, out)
		}
	}
	var st admin.ClusterStatus
	if err := json.Unmarshal([]byte(ok(t, bin, "", "cluster", "status", "-format", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Topics) != 1 || st.Topics[0].Leader != bin || st.Topics[0].HighWater != 2 {
		t.Fatalf("%+v", st)
	}
	ok(t, bin, "", "topics", "replicas", "audit", "1")
	if out := ok(t, bin, "", "cluster", "status"); !strings.Contains(out, "audit") {
		t.Fatalf("cluster status lacks the topic created on one replica:\n%s", out)
	}
	fails(t, bin, "", "not enough members", "topics", "replicas", "audit", "2")
	if r := hrqa(t, bin, "", "topics", "replicas", "audit", "two"); r.code != 2 || !strings.Contains(r.stderr, "not a number of replicas") {
		t.Fatalf("topics replicas audit two: %+v, want a usage error", r)
	}
	plain, _ := server(t)
	fails(t, plain, "", "not in a cluster", "cluster", "status")
	fails(t, plain, "", "needs a cluster", "topics", "replicas", "audit", "2")
	ok(t, plain, "", "topics", "replicas", "audit", "1")
	ok(t, plain, "", "produce", "audit", "a")
}

// oneServerCluster starts a one-server cluster, its configuration passed
// through setup if given, and returns its binary address.
func oneServerCluster(t *testing.T, setup func(*hserver.Config)) string {
	t.Helper()
	port := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	cl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bin := fmt.Sprintf("127.0.0.1:%d", port())
	peers, err := hserver.ParsePeers(bin+"/1/"+fmt.Sprint(cl.Addr().(*net.TCPAddr).Port), 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := hserver.DefaultConfig(t.TempDir())
	cfg.Broker.Addr, cfg.HTTPAddr, cfg.Peers = bin, "", peers
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Cluster = &hserver.ClusterConfig{Addr: cl.Addr().String(), Replicas: 1, MinInsync: 1, Listener: cl,
		Token: "hrqa-test-cluster-secret-0123456789"}
	if setup != nil {
		setup(&cfg)
	}
	s, err := hserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return bin
}

// TestClusterStatusMembersHidden: with tokens, a tenant's cluster status
// lists its own topics and says that the members are hidden, rather than
// show an empty cluster; the cluster's token sees them.
func TestClusterStatusMembersHidden(t *testing.T) {
	hash := func(tok string) string { h := sha256.Sum256([]byte(tok)); return hex.EncodeToString(h[:]) }
	authFile := filepath.Join(t.TempDir(), "auth")
	lines := hash("cluster-tok") + " replication *\n" + hash("root") + " admin *\n" + hash("tenant") + " consume app.*\n"
	if err := os.WriteFile(authFile, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := oneServerCluster(t, func(cfg *hserver.Config) { cfg.AuthFile, cfg.Cluster.Token = authFile, "cluster-tok" })
	deadline := time.Now().Add(20 * time.Second)
	for _, topic := range []string{"app.orders", "hr.payroll"} {
		for hrqa(t, bin, "", "-token", "root", "topics", "create", topic).code != 0 {
			if time.Now().After(deadline) {
				t.Fatal("topics create never succeeded")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	out := ok(t, bin, "", "-token", "tenant", "cluster", "status")
	for _, want := range []string{"raft leader  (hidden)", "members      (hidden): the token needs the replication or admin right", "app.orders", "1/1"} {
		if !strings.Contains(out, want) {
			t.Fatalf("a tenant's cluster status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hr.payroll") || strings.Contains(out, "MEMBER") {
		t.Fatalf("a tenant's cluster status shows another tenant's topic or the members:\n%s", out)
	}
	out = ok(t, bin, "", "-token", "cluster-tok", "cluster", "status")
	for _, want := range []string{"raft leader  " + bin, "MEMBER", "app.orders", "hr.payroll"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the cluster token's status lacks %q:\n%s", want, out)
		}
	}
}

// TestClusterMemberState: a live member's STATE is member (the line ends
// with it), a down one's says down and since when.
func TestClusterMemberState(t *testing.T) {
	since := time.Now().Add(-90 * time.Second).UTC()
	for _, c := range []struct {
		m    admin.Member
		want string
	}{
		{admin.Member{ID: "a:1"}, "member"},
		{admin.Member{ID: "a:1", Leaving: true}, "leaving"},
		{admin.Member{ID: "a:1", Down: true, DownSince: since.Truncate(time.Second)}, "down since " + since.Local().Format(time.DateTime) + " (1m3"},
		{admin.Member{ID: "a:1", Leaving: true, Down: true}, "leaving, down since (unknown)"},
	} {
		if got := memberState(c.m); got != c.want && !(c.m.Down && strings.HasPrefix(got, c.want) && strings.HasSuffix(got, "s ago)")) {
			t.Errorf("%+v: state %q, want %q", c.m, got, c.want)
		}
	}
}
