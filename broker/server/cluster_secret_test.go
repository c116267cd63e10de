package server_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/peer"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/client/admin"
	"github.com/haraqa/haraqa/protocol"
)

// TestClusterSecretGuardsTheCluster: without -auth-file, the members'
// secret (-cluster-token-file) is the one token the server-to-server and
// membership calls take, on the binary port, the HTTP port and the
// cluster port; every other call stays open to all.
func TestClusterSecretGuardsTheCluster(t *testing.T) {
	tc := startTestCluster(t, 3, 3, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	anon := dialAll(t, tc.addrs)
	if _, err := anon.Produce(ctx, "orders", []byte("open to all")); err != nil {
		t.Fatalf("a produce without a token: %v", err)
	}

	// Binary port: ops 17, 18, 20, 21 and 23 need the secret.
	for _, tok := range []string{"", "not-the-secret"} {
		c := admin.New(dialOneWith(t, tc.addrs[0], client.WithToken(tok)))
		p := dialPeer(t, tc.addrs[0], tok)
		forbidden := func(what string, err error) {
			t.Helper()
			if !(errors.Is(err, client.ErrForbidden) || isCode(err, protocol.CodeForbidden)) || !strings.Contains(err.Error(), "cluster's secret") {
				t.Errorf("%s with token %q: %v, want forbidden, naming the cluster's secret", what, tok, err)
			}
		}
		_, err := p.LogEnds(ctx, []string{"orders"})
		forbidden("log ends", err)
		_, _, err = p.EpochEnd(ctx, "orders", 1)
		forbidden("epoch end", err)
		_, err = p.ProducerOwners(ctx, "orders", []uint64{1})
		forbidden("producer owners", err)
		_, err = p.ReplicaFetch(ctx, peer.ReplicaFetch{Topic: "orders", Follower: tc.addrs[0], Epoch: 1})
		forbidden("replica fetch", err)
		forbidden("add member", c.AddMember(ctx, "10.9.9.9:14353/4353/14355"))
		forbidden("remove member", c.RemoveMember(ctx, tc.addrs[2]))
	}
	member := dialOneWith(t, tc.addrs[0], client.WithToken(testSecret))
	if _, err := dialPeer(t, tc.addrs[0], testSecret).LogEnds(ctx, []string{"orders"}); err != nil {
		t.Errorf("log ends with the secret: %v", err)
	}

	// HTTP port: membership changes need the secret too.
	web := "http://" + tc.cfgs[0].HTTPAddr
	for _, tok := range []string{"", "not-the-secret"} {
		req, _ := http.NewRequestWithContext(ctx, "POST", web+"/cluster/members", strings.NewReader("10.9.9.9:14353/4353/14355"))
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("POST /cluster/members with token %q: %d %s, want 403", tok, resp.StatusCode, body)
		}
		req, _ = http.NewRequestWithContext(ctx, "DELETE", web+"/cluster/members/"+tc.addrs[2], nil)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("DELETE /cluster/members with token %q: %d, want 403", tok, resp.StatusCode)
		}
	}

	// Cluster port: a forwarded member list or a Raft connection without
	// the secret is closed before anything is read past its preamble.
	evil := []byte(`{"op":"members","members":[{"id":"10.9.9.9:1","raft":"10.9.9.9:2","http":"http://evil.example"}]}`)
	for _, tok := range []string{"", "not-the-secret"} {
		for _, kind := range []byte{'F', 'R'} {
			conn, err := net.DialTimeout("tcp", tc.cfgs[0].Cluster.Addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			b.WriteString("HRQC")
			b.WriteByte(kind)
			_ = binary.Write(&b, binary.LittleEndian, uint16(len(tok)))
			b.WriteString(tok)
			_ = binary.Write(&b, binary.LittleEndian, uint32(len(evil)))
			b.Write(evil)
			_, _ = conn.Write(b.Bytes())
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, err := conn.Read(make([]byte, 64))
			conn.Close()
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || n > 0 {
				t.Errorf("cluster port, kind %c, token %q: read %d bytes, %v: want it closed at once", kind, tok, n, err)
			}
		}
	}
	// The members are as they were, and replicated produces go on.
	v := waitView(t, member, "three members", func(v clusterView) bool { return len(v.Members) == 3 })
	for _, m := range v.Members {
		if strings.Contains(m.ID, "10.9.9.9") {
			t.Fatalf("a member the attacker named: %+v", v.Members)
		}
	}
	if _, err := anon.Produce(ctx, "orders", []byte("still served")); err != nil {
		t.Fatalf("a produce after the attempts: %v", err)
	}
}
