package server_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/broker/server"
	"github.com/haraqa/haraqa/client"
)

const ioTimeout = 10 * time.Second

// peerServer is one server of a -peers list, on loopback.
type peerServer struct {
	*brokertest.Server
	url string // its HTTP port's base URL
}

// startPeers starts n servers on fixed loopback ports, each given the
// same -peers list (host:tcp/http entries, the ports differing) in
// Config.Peers, and returns them with the list's binary addresses.
func startPeers(t *testing.T, n int) ([]*peerServer, []string) {
	t.Helper()
	// Ports outside the ephemeral range (fixedPort): one free a moment
	// ago from 127.0.0.1:0 could be taken meanwhile by another test's
	// outgoing connection.
	var ports []int
	for len(ports) < 2*n {
		if p := fixedPort(t); !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	var entries, addrs []string
	for i := range n {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", ports[2*i]))
		entries = append(entries, fmt.Sprintf("%s/%d", addrs[i], ports[2*i+1]))
	}
	peers, err := server.ParsePeers(strings.Join(entries, ","), 0)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]*peerServer, n)
	for i := range n {
		cfg := brokertest.Config(t.TempDir())
		cfg.Broker.Addr = addrs[i]
		cfg.HTTPAddr = fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])
		cfg.Peers = peers
		s, err := brokertest.StartConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		out[i] = &peerServer{Server: s, url: "http://" + cfg.HTTPAddr}
	}
	return out, addrs
}

// placedOn returns a topic name that placement puts on server i of addrs.
func placedOn(t *testing.T, prefix string, i int, addrs []string) string {
	t.Helper()
	for n := range 1000 {
		if name := fmt.Sprintf("%s%d", prefix, n); client.Place(name, addrs) == i {
			return name
		}
	}
	t.Fatalf("no name placed on server %d", i)
	return ""
}

// request does one HTTP request; follow says whether redirects are
// followed (http.Client keeps a 307's method and body).
func request(t *testing.T, follow bool, method, url, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := &http.Client{Timeout: ioTimeout}
	if !follow {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func wantStatus(t *testing.T, what string, resp *http.Response, body string, code int) {
	t.Helper()
	if resp.StatusCode != code {
		t.Fatalf("%s: status %d (%q), want %d", what, resp.StatusCode, body, code)
	}
}

// TestPeersRedirect: three servers given the same -peers list. A request
// for a topic on another server answers 307 to it (found by asking the
// peers, or, for a create or produce of a missing topic, by placement),
// following it works, and a server's own topics are served where they are.
func TestPeersRedirect(t *testing.T) {
	s, addrs := startPeers(t, 3)

	// A create on server 0 of a topic placed on server 1 goes there.
	t1 := placedOn(t, "one", 1, addrs)
	resp, body := request(t, false, "PUT", s[0].url+"/topics/"+t1, "")
	wantStatus(t, "create "+t1+" on server 0", resp, body, http.StatusTemporaryRedirect)
	if got, want := resp.Header.Get("Location"), s[1].url+"/topics/"+t1; got != want {
		t.Fatalf("Location %q, want %q", got, want)
	}
	resp, body = request(t, true, "PUT", s[0].url+"/topics/"+t1, "")
	wantStatus(t, "create "+t1+" through server 0", resp, body, http.StatusCreated)
	if !s[1].Store.HasTopic(t1) || s[0].Store.HasTopic(t1) {
		t.Fatalf("%s should be on server 1 only", t1)
	}

	// Server 2 finds it on server 1: produce and consume through it.
	resp, body = request(t, false, "GET", s[2].url+"/topics/"+t1+"?id=0&limit=2", "")
	wantStatus(t, "consume "+t1+" on server 2", resp, body, http.StatusTemporaryRedirect)
	if got, want := resp.Header.Get("Location"), s[1].url+"/topics/"+t1+"?id=0&limit=2"; got != want {
		t.Fatalf("Location %q, want %q", got, want)
	}
	resp, body = request(t, true, "POST", s[2].url+"/topics/"+t1, "helloabc", "X-Sizes", "5:3")
	wantStatus(t, "produce "+t1+" through server 2", resp, body, http.StatusOK)
	resp, body = request(t, true, "GET", s[0].url+"/topics/"+t1+"?id=0", "")
	wantStatus(t, "consume "+t1+" through server 0", resp, body, http.StatusOK)
	if body != "helloabc" {
		t.Fatalf("consume through server 0: %q", body)
	}

	// A topic a server has is served there, wherever placement puts it.
	own := placedOn(t, "own", 2, addrs)
	if err := s[0].Store.CreateTopic(own); err != nil {
		t.Fatal(err)
	}
	resp, body = request(t, false, "POST", s[0].url+"/topics/"+own, "x", "X-Sizes", "1")
	wantStatus(t, "produce to server 0's own topic", resp, body, http.StatusOK)

	// A produce of a missing topic placed elsewhere is redirected there,
	// one placed here is served here (404: produce does not create).
	t2 := placedOn(t, "two", 2, addrs)
	resp, body = request(t, false, "POST", s[0].url+"/topics/"+t2, "x", "X-Sizes", "1")
	wantStatus(t, "produce of missing "+t2, resp, body, http.StatusTemporaryRedirect)
	if got := resp.Header.Get("Location"); got != s[2].url+"/topics/"+t2 {
		t.Fatalf("Location %q", got)
	}
	t0 := placedOn(t, "zero", 0, addrs)
	resp, body = request(t, false, "POST", s[0].url+"/topics/"+t0, "x", "X-Sizes", "1")
	wantStatus(t, "produce of missing "+t0+" placed here", resp, body, http.StatusNotFound)
	resp, body = request(t, false, "PUT", s[0].url+"/topics/"+t0, "")
	wantStatus(t, "create of "+t0+" placed here", resp, body, http.StatusCreated)
	// A consume of a topic no server has is this server's 404.
	resp, body = request(t, false, "GET", s[0].url+"/topics/nowhere?id=0", "")
	wantStatus(t, "consume of a topic on no server", resp, body, http.StatusNotFound)
}

// TestPeerDown: with a peer down, a request for a topic this server does
// not have fails at once with 503 naming the peer, unless another peer
// has it; a peer that accepts but never answers costs one lookup timeout,
// then fails at once too.
func TestPeerDown(t *testing.T) {
	s, addrs := startPeers(t, 3)
	t1 := placedOn(t, "one", 1, addrs)
	if err := s[1].Store.CreateTopic(t1); err != nil {
		t.Fatal(err)
	}
	if err := s[2].Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, body := request(t, false, "GET", s[0].url+"/topics/missing?id=0", "")
	wantStatus(t, "consume with server 2 down", resp, body, http.StatusServiceUnavailable)
	if !strings.Contains(body, addrs[2]) || !strings.Contains(body, "peer unavailable") {
		t.Fatalf("503 body %q should name %s", body, addrs[2])
	}
	if took := time.Since(start); took > server.PeerTimeout {
		t.Fatalf("a refused peer took %v", took)
	}
	resp, body = request(t, false, "GET", s[0].url+"/topics/"+t1, "")
	wantStatus(t, "consume of a topic on a live peer, another down", resp, body, http.StatusTemporaryRedirect)

	// A black hole: accepts, never answers.
	hole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hole.Close()
	go func() {
		for {
			c, err := hole.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	peers := []server.Peer{{Addr: addrs[0], HTTP: s[0].url}, {Addr: hole.Addr().String(), HTTP: "http://127.0.0.1:1"}}
	l, closeLocator := server.NewPeerLocator(peers, addrs[0], slog.New(slog.DiscardHandler))
	defer closeLocator()
	for i, limit := range []time.Duration{server.PeerTimeout + time.Second, 100 * time.Millisecond} {
		start := time.Now()
		_, _, err := l.Locate(t.Context(), "missing", false)
		if err == nil || !strings.Contains(err.Error(), hole.Addr().String()) {
			t.Fatalf("lookup %d with a silent peer: %v, want an error naming it", i, err)
		}
		if took := time.Since(start); took > limit {
			t.Fatalf("lookup %d with a silent peer took %v, want at most %v", i, took, limit)
		}
	}
}

// TestIsSelf: the server's own -peers entry is told by port and host.
func TestIsSelf(t *testing.T) {
	host, _ := os.Hostname()
	for _, tc := range []struct {
		peer, listen string
		want         bool
	}{
		{"127.0.0.1:14353", "127.0.0.1:14353", true},
		{"127.0.0.1:14354", "127.0.0.1:14353", false},
		{"localhost:14353", "0.0.0.0:14353", true},
		{"127.0.0.1:14353", "0.0.0.0:14353", true},
		{"[::1]:14353", "[::]:14353", true},
		{host + ":14353", "0.0.0.0:14353", true},
		{host + ".haraqa.default.svc.cluster.local:14353", "0.0.0.0:14353", true},
		{"192.0.2.7:14353", "0.0.0.0:14353", false},
		{"192.0.2.7:14353", "127.0.0.1:14353", false},
		{"localhost:14353", "127.0.0.1:14353", true},
		{"bad", "0.0.0.0:14353", false},
	} {
		if got := server.IsSelf(tc.peer, tc.listen); got != tc.want {
			t.Errorf("isSelf(%q, %q) = %v, want %v", tc.peer, tc.listen, got, tc.want)
		}
	}
}

// TestPeersClosedAtShutdown: the connections a server opened to its peers
// to look topics up are closed when it shuts down.
func TestPeersClosedAtShutdown(t *testing.T) {
	s, _ := startPeers(t, 2)
	resp, body := request(t, false, "GET", s[0].url+"/topics/missing?id=0", "")
	wantStatus(t, "consume of a topic on no server", resp, body, http.StatusNotFound)
	if n := s[1].Broker.Stats().Connections; n != 1 {
		t.Fatalf("server 1 has %d connections after server 0 asked it for a topic, want 1", n)
	}
	if err := s[0].Close(); err != nil {
		t.Fatal(err)
	}
	waitConnections(t, s[1].Broker, 0)
}

// waitConnections waits for b to hold n connections.
func waitConnections(t *testing.T, b *broker.Broker, n int64) {
	t.Helper()
	deadline := time.Now().Add(ioTimeout)
	for b.Stats().Connections != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections after %s, want %d", b.Stats().Connections, ioTimeout, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPeersConfig: New refuses a Locator given beside Config.Peers.
func TestPeersConfig(t *testing.T) {
	peers := []server.Peer{{Addr: "127.0.0.1:1", HTTP: "http://127.0.0.1:2"}}
	cfg := brokertest.Config(t.TempDir())
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.Peers = peers
	cfg.HTTP.Peers, _ = server.NewPeerLocator(peers, cfg.Broker.Addr, cfg.Logger)
	if _, err := server.New(cfg); !errors.Is(err, server.ErrInvalidConfig) || !strings.Contains(err.Error(), "HTTP.Peers") {
		t.Fatalf("New with Peers and HTTP.Peers: %v, want ErrInvalidConfig naming HTTP.Peers", err)
	}
}
