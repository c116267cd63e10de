package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/broker/peer"
	"github.com/haraqa/haraqa/broker/server"
	"github.com/haraqa/haraqa/client"
)

// writePEM writes b to a new file in t's temporary directory.
func writePEM(t *testing.T, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	brokertest.WriteFile(t, path, b)
	return path
}

// dialOneTLS is dialOne over TLS with cfg.
func dialOneTLS(t *testing.T, addr string, cfg *tls.Config) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.WithRetries(0, 0), client.WithTLS(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestClusterTLSReplicatesAndFailsOver: with certificate files the
// servers speak TLS to each other (-cluster-ca naming their CA): a topic
// created through a server that forwards the command to the Raft leader,
// produced with acks=all over TLS is on all three replicas, a follower's
// HTTPS port redirects to the leader's https URL, and with the leader
// stopped the new leader serves every acknowledged message and takes
// more.
func TestClusterTLSReplicatesAndFailsOver(t *testing.T) {
	ca := brokertest.NewCA(t, "cluster-ca")
	caFile := writePEM(t, "ca.pem", ca.PEM)
	tc := startTestCluster(t, 3, 3, 2, func(i int, cfg *server.Config) {
		cfg.Cluster.AckTimeout = 10 * time.Second
		cfg.TLSCertFile, cfg.TLSKeyFile = ca.Server(t).Write(t, t.TempDir(), "srv")
		cfg.Cluster.CAFile = caFile
	})
	clientTLS := &tls.Config{RootCAs: ca.Pool}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, a := range tc.addrs {
		waitInStep(t, dialOneTLS(t, a, clientTLS))
	}
	// Created through a server that does not lead the Raft group: the
	// command is forwarded to the one that does, over the cluster port.
	raftLeader := raftLeaderOf(t, dialOneTLS(t, tc.addrs[0], clientTLS))
	via := tc.addrs[(tc.index(raftLeader)+1)%3]
	const topic = "orders"
	if err := dialOneTLS(t, via, clientTLS).CreateTopic(ctx, topic); err != nil {
		t.Fatalf("create through %s, the Raft leader being %s: %v", via, raftLeader, err)
	}
	c := dialAll(t, tc.addrs, client.WithIdempotence(true), client.WithTLS(clientTLS))
	var acked []string
	produce := producing(t, ctx, c, topic, &acked)
	produce(100)
	st := waitTopic(t, dialOneTLS(t, tc.addrs[0], clientTLS), topic, "100 messages on three replicas", func(st topicStatus) bool {
		return len(st.Replicas) == 3 && st.Leader != "" && len(st.ISR) == 3 && st.HighWater == 100
	})
	for _, a := range tc.addrs {
		checkTopic(t, dialOneTLS(t, a, clientTLS), topic, acked)
	}

	// A follower's HTTPS port sends writes to the leader's, over https.
	follower := tc.addrs[(tc.index(st.Leader)+1)%3]
	waitTopic(t, dialOneTLS(t, follower, clientTLS), topic, "the follower knows the leader", func(st topicStatus) bool { return st.Leader != "" })
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+tc.cfgs[tc.index(follower)].HTTPAddr+"/topics/"+topic, strings.NewReader("x"))
	req.Header.Set("X-Sizes", "1")
	hc := httpsClient(ca)
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := "https://" + tc.cfgs[tc.index(st.Leader)].HTTPAddr + "/topics/" + topic; resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != want {
		t.Fatalf("HTTPS produce to a follower: %d, Location %q, want 307 to %s", resp.StatusCode, resp.Header.Get("Location"), want)
	}

	old := st.Leader
	tc.stop(tc.index(old))
	produce(100)
	var live []string
	for _, a := range tc.addrs {
		if a != old {
			live = append(live, a)
		}
	}
	waitTopic(t, dialOneTLS(t, live[0], clientTLS), topic, "a new leader", func(st topicStatus) bool {
		return st.Leader != old && st.Leader != "" && st.Epoch >= 2
	})
	for _, a := range live { // the new leader among them
		checkTopic(t, dialOneTLS(t, a, clientTLS), topic, acked)
	}
}

// raftLeaderOf is the member that leads the Raft group, as c's server
// sees it.
func raftLeaderOf(t *testing.T, c *client.Client) string {
	t.Helper()
	type leader struct {
		RaftLeader string `json:"raft_leader"`
	}
	return waitStatus(t, c, "a Raft leader", func(st leader) bool { return st.RaftLeader != "" }).RaftLeader
}

// syncBuffer is a bytes.Buffer for a logger written from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestClusterTLSRefusesOtherCA: with mutual TLS (-tls-client-ca, which
// the servers then verify each other against too), a server whose
// certificate another CA issued cannot join: the others' cluster ports
// refuse its Raft connections, it never gets in step, and the leaders'
// binary ports refuse its fetches; the two others go on with acks=all.
// The cluster port itself accepts only a certificate of the CA naming a
// -peers host, and no plaintext.
func TestClusterTLSRefusesOtherCA(t *testing.T) {
	ca, other := brokertest.NewCA(t, "cluster-ca"), brokertest.NewCA(t, "other-ca")
	caFile := writePEM(t, "ca.pem", ca.PEM)
	const rogue = 2
	logs := make([]*syncBuffer, 3)
	tc := startTestCluster(t, 3, 2, 2, func(i int, cfg *server.Config) {
		cfg.Cluster.AckTimeout = 10 * time.Second
		issuer := ca
		if i == rogue {
			issuer = other
		}
		cfg.TLSCertFile, cfg.TLSKeyFile = issuer.Server(t).Write(t, t.TempDir(), "srv")
		cfg.TLSClientCAFile = caFile
		logs[i] = &syncBuffer{}
		cfg.Logger = slog.New(slog.NewTextHandler(logs[i], &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	me := ca.Issue(t, "app", time.Now().Add(-time.Hour), time.Now().Add(time.Hour)).TLS(t)
	clientTLS := &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{me}}
	good := tc.addrs[:rogue]
	for _, a := range good {
		waitInStep(t, dialOneTLS(t, a, clientTLS))
	}

	// A topic placed on the two good servers takes acks=all from them.
	ids := slices.Sorted(slices.Values(tc.addrs))
	topic := ""
	for i := 0; topic == ""; i++ {
		name := fmt.Sprintf("t%d", i)
		if place := client.PlaceN(name, ids, 2); !slices.Contains(place, slices.Index(ids, tc.addrs[rogue])) {
			topic = name
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dialAll(t, good, client.WithTLS(clientTLS), client.WithIdempotence(true))
	if err := c.CreateTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	var acked []string
	for i := range 20 {
		msg := fmt.Sprintf("m%d", i)
		if _, err := c.Produce(ctx, topic, []byte(msg)); err != nil {
			t.Fatalf("produce %s: %v", msg, err)
		}
		acked = append(acked, msg)
	}
	st := waitTopic(t, dialOneTLS(t, good[0], clientTLS), topic, "in sync on both good servers", func(st topicStatus) bool {
		return len(st.ISR) == 2 && st.HighWater == 20
	})

	// The rogue, trusting the cluster's CA but holding a certificate of
	// another, is refused: the good servers log its handshakes, it is not
	// in step, and knows no topic.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs[0].String()+logs[1].String(), "cluster port: TLS handshake failed") {
		if time.Now().After(deadline) {
			t.Fatalf("no refused handshake logged within 20 s: %s\n%s", logs[0], logs[1])
		}
		time.Sleep(20 * time.Millisecond)
	}
	rc := dialOneTLS(t, tc.addrs[rogue], &tls.Config{RootCAs: other.Pool, Certificates: []tls.Certificate{me}})
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	b, err := statusJSON(sctx, rc)
	scancel()
	var rs struct {
		InStep bool          `json:"in_step"`
		Topics []topicStatus `json:"topics"`
	}
	if err == nil {
		err = json.Unmarshal(b, &rs)
	}
	if err != nil || rs.InStep || len(rs.Topics) != 0 {
		t.Fatalf("the rogue's cluster status: %s %v, want not in step and no topic", b, err)
	}

	// Its fetch from the leader's binary port is refused; a member's
	// certificate is taken.
	rogueCert, err := tls.LoadX509KeyPair(tc.cfgs[rogue].TLSCertFile, tc.cfgs[rogue].TLSKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	defer dcancel()
	if rf, err := peer.Dial(dctx, st.Leader,
		peer.Options{TLS: &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{rogueCert}}}); err == nil {
		_, err = rf.ReplicaFetch(dctx, peer.ReplicaFetch{Topic: topic, Follower: tc.addrs[rogue], Epoch: st.Epoch})
		rf.Close()
		t.Fatalf("the rogue's fetch from the leader: connected (%v)", err)
	}

	// The cluster port, directly: a member's certificate is served; one
	// of another CA, one of the CA for another name, and plaintext are not.
	clusterAddr := tc.cfgs[0].Cluster.Addr
	member := ca.Server(t).TLS(t)
	if err := forwardOnce(clusterAddr, &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{member}}); err != nil {
		t.Fatalf("a member's certificate on the cluster port: %v", err)
	}
	elsewhere := ca.Issue(t, "elsewhere", time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "elsewhere.example").TLS(t)
	for what, cert := range map[string]tls.Certificate{"another CA's": rogueCert, "another name's": elsewhere, "a client's": me} {
		if err := forwardOnce(clusterAddr, &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{cert}}); err == nil {
			t.Errorf("%s certificate on the cluster port: served", what)
		}
	}
	if err := forwardOnce(clusterAddr, nil); err == nil {
		t.Error("plaintext on the cluster port: served")
	}
	for _, a := range good {
		checkTopic(t, dialOneTLS(t, a, clientTLS), topic, acked)
	}
}

// forwardOnce sends one forwarded command (an empty one) to a cluster
// port, over TLS with cfg (nil: plaintext), and reads its answer.
func forwardOnce(addr string, cfg *tls.Config) error {
	var conn io.ReadWriteCloser
	var err error
	if cfg != nil {
		cfg = cfg.Clone()
		cfg.ServerName = "127.0.0.1"
		conn, err = tls.Dial("tcp", addr, cfg)
	} else {
		conn, err = net.Dial("tcp", addr)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	if nc, ok := conn.(interface{ SetDeadline(time.Time) error }); ok {
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	}
	msg := binary.LittleEndian.AppendUint16([]byte("HRQCF"), uint16(len(testSecret))) // a forwarded command
	msg = append(msg, testSecret...)
	msg = binary.LittleEndian.AppendUint32(msg, 2)
	msg = append(msg, "{}"...)
	if _, err := conn.Write(msg); err != nil {
		return err
	}
	var h [4]byte
	if _, err := io.ReadFull(conn, h[:]); err != nil {
		return err
	}
	if n := binary.LittleEndian.Uint32(h[:]); n > 1<<20 {
		return errors.New("an answer too long")
	}
	return nil
}

// TestClusterTLSConfig: what a cluster with TLS refuses, at New and at
// Start.
func TestClusterTLSConfig(t *testing.T) {
	ca := brokertest.NewCA(t, "cluster-ca")
	self := fmt.Sprintf("127.0.0.1:%d", fixedPort(t))
	peers, err := server.ParsePeers(fmt.Sprintf("%s/%d/%d", self, fixedPort(t), fixedPort(t)), 0)
	if err != nil {
		t.Fatal(err)
	}
	config := func() server.Config {
		cfg := testConfig(t, 1)
		cfg.Broker.Addr, cfg.HTTPAddr, cfg.Peers = self, "", peers
		cfg.Cluster = &server.ClusterConfig{Addr: peers[0].Raft, Replicas: 1, MinInsync: 1, Token: testSecret}
		return cfg
	}
	cfg := config()
	cfg.TLS = brokertest.ServerTLS(t, ca.Server(t))
	if _, err := server.New(cfg); !errors.Is(err, server.ErrInvalidConfig) {
		t.Errorf("a cluster with Config.TLS and no files: %v, want ErrInvalidConfig", err)
	}
	cfg = config()
	cfg.Cluster.CAFile = writePEM(t, "ca.pem", ca.PEM)
	if _, err := server.New(cfg); !errors.Is(err, server.ErrInvalidConfig) {
		t.Errorf("a cluster CA without TLS files: %v, want ErrInvalidConfig", err)
	}
	cfg = config()
	cfg.TLSCertFile, cfg.TLSKeyFile = ca.Server(t).Write(t, t.TempDir(), "srv")
	cfg.Cluster.CAFile = writePEM(t, "ca.pem", []byte("not a certificate"))
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); !errors.Is(err, server.ErrTLSFiles) || !strings.Contains(err.Error(), "cluster CA") {
		t.Errorf("a cluster CA file without a certificate: Start: %v, want ErrTLSFiles naming the cluster CA", err)
	}
}
