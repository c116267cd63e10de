package server_test

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/server"
	"github.com/haraqa/haraqa/storage"
)

// TestParseFlagsErrors covers the command lines that ParseFlags refuses:
// each error, and what reaches stderr.
func TestParseFlagsErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args    []string
		err     string // in the error
		stderr  string // in what was written to stderr
		errHelp bool
	}{
		{args: nil, err: "at least one volume is required", stderr: "usage: haraqa [flags] VOLUME..."},
		{args: []string{"-tcp", "1"}, err: "at least one volume is required", stderr: "usage: haraqa"},
		{args: []string{"-bogus", dir}, err: "-bogus", stderr: "flag provided but not defined: -bogus"},
		{args: []string{"-tcp", "70000", dir}, err: "ports must be at most 65535"},
		{args: []string{"-http", "65536", dir}, err: "ports must be at most 65535"},
		{args: []string{"-log-level", "loud", dir}, err: `-log-level "loud": want debug, info, warn or error`},
		{args: []string{"-fsync", "sometimes", dir}, err: "sometimes"},
		{args: []string{"-cache", "false", dir}, err: `volume "false" looks like a flag value: write boolean flags as -flag=false`},
		{args: []string{"-h"}, errHelp: true, stderr: "usage: haraqa"},
	} {
		var out bytes.Buffer
		_, err := server.ParseFlags(tc.args, &out)
		switch {
		case tc.errHelp:
			if !errors.Is(err, flag.ErrHelp) {
				t.Errorf("ParseFlags(%q): %v, want flag.ErrHelp", tc.args, err)
			}
		case err == nil || !strings.Contains(err.Error(), tc.err):
			t.Errorf("ParseFlags(%q): error %v, want one holding %q", tc.args, err, tc.err)
		}
		if !strings.Contains(out.String(), tc.stderr) {
			t.Errorf("ParseFlags(%q): stderr %q should hold %q", tc.args, out.String(), tc.stderr)
		}
	}
}

// TestParseFlagsDefaults pins the defaults of the original haraqa's flags
// and how flags reach the parts of the configuration.
func TestParseFlagsDefaults(t *testing.T) {
	c, err := server.ParseFlags([]string{"/vol1", "/vol2"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case c.Broker.Addr != "0.0.0.0:14353" || c.HTTPAddr != "0.0.0.0:4353":
		t.Errorf("addresses %s and %s, want 0.0.0.0:14353 and 0.0.0.0:4353", c.Broker.Addr, c.HTTPAddr)
	case strings.Join(c.Storage.Volumes, ",") != "/vol1,/vol2":
		t.Errorf("volumes %q", c.Storage.Volumes)
	case c.Storage.Entries != 5000 || !c.Storage.Cache || c.Broker.DefaultLimit != -1 || c.HTTP.DefaultLimit != -1:
		t.Errorf("entries %d, cache %v, limits %d %d", c.Storage.Entries, c.Storage.Cache, c.Broker.DefaultLimit, c.HTTP.DefaultLimit)
	case !c.HTTP.CORS || !c.HTTP.Docs || !c.HTTP.Prometheus || c.HTTP.Pprof:
		t.Errorf("HTTP %+v", c.HTTP)
	case c.Storage.FsyncInterval != time.Second || c.Storage.RetentionCheck != time.Minute || c.MemoryLimit != -1 || c.Ballast != 0:
		t.Errorf("fsync interval %v, retention check %v, memory limit %d, ballast %d", c.Storage.FsyncInterval, c.Storage.RetentionCheck, c.MemoryLimit, c.Ballast)
	case c.Logger == nil:
		t.Error("no logger")
	}

	c, err = server.ParseFlags([]string{"-listen", "127.0.0.1", "-tcp", "1", "-http", "2", "-max-frame", "1000",
		"-max-consume-bytes", "500", "-limit", "7", "-fsync", "never", "-cache=false", "/v"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case c.Broker.Addr != "127.0.0.1:1" || c.HTTPAddr != "127.0.0.1:2":
		t.Errorf("addresses %s and %s", c.Broker.Addr, c.HTTPAddr)
	case c.Storage.MaxBatchBytes != 1000 || c.HTTP.MaxBodyBytes != 1000:
		t.Errorf("-max-frame 1000: batch bound %d, body bound %d", c.Storage.MaxBatchBytes, c.HTTP.MaxBodyBytes)
	case c.HTTP.MaxConsumeBytes != 500 || c.HTTP.DefaultLimit != 7 || c.Broker.DefaultLimit != 7:
		t.Errorf("consume bytes %d, limits %d %d", c.HTTP.MaxConsumeBytes, c.HTTP.DefaultLimit, c.Broker.DefaultLimit)
	case c.Storage.Fsync != storage.FsyncNever || c.Storage.Cache:
		t.Errorf("fsync %v, cache %v", c.Storage.Fsync, c.Storage.Cache)
	}
}

// TestParsePeers: the -peers list, its HTTP ports, and the combinations
// ParseFlags refuses.
func TestParsePeers(t *testing.T) {
	peers, err := server.ParsePeers(" a:14353, b:14353/8080,,a:14353,[::1]:1 ", 4353)
	if err != nil {
		t.Fatal(err)
	}
	want := []server.Peer{{Addr: "a:14353", HTTP: "http://a:4353"}, {Addr: "b:14353", HTTP: "http://b:8080"}, {Addr: "[::1]:1", HTTP: "http://[::1]:4353"}}
	if len(peers) != len(want) {
		t.Fatalf("peers %+v, want %+v", peers, want)
	}
	for i := range want {
		if peers[i] != want[i] {
			t.Errorf("peer %d: %+v, want %+v", i, peers[i], want[i])
		}
	}
	if peers, err := server.ParsePeers("", 4353); err != nil || len(peers) != 0 {
		t.Errorf("empty list: %v, %v", peers, err)
	}
	for _, tc := range []struct {
		list string
		http int
		err  string
	}{
		{"a", 4353, `"a" is not host:port`},
		{":14353", 4353, "is not host:port"},
		{"a:0", 4353, "is not host:port"},
		{"a:1/x", 4353, `"x" is not an HTTP port`},
		{"a:1/2/x", 4353, `"x" is not a cluster port`},
		{"a:1", 0, "-http is 0"},
	} {
		if _, err := server.ParsePeers(tc.list, tc.http); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParsePeers(%q, %d): %v, want an error holding %q", tc.list, tc.http, err, tc.err)
		}
	}
	// Cluster ports: this server's unless an entry gives its own.
	peers, err = server.ParsePeers("a:1/2/3,b:1", 80, 14355)
	if err != nil || peers[0].Raft != "a:3" || peers[1].Raft != "b:14355" || peers[0].HTTP != "http://a:2" {
		t.Errorf("cluster ports: %+v, %v", peers, err)
	}
	dir := t.TempDir()
	shortSecret := filepath.Join(dir, "short.token")
	if err := os.WriteFile(shortSecret, []byte("0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := server.ParseFlags([]string{"-peers", "h0:14353,h1:14353", "-http", "80", dir}, &bytes.Buffer{})
	if err != nil || len(c.Peers) != 2 || c.Peers[1].HTTP != "http://h1:80" {
		t.Errorf("-peers: %+v, %v", c.Peers, err)
	}
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"-peers", "a:1", "-tcp", "0", dir}, "-peers needs a -tcp port"},
		{[]string{"-peers", "a:1", "-auth-file", "x", dir}, "-auth-file"},
		{[]string{"-peers", "a:1", "-tls-cert", "x", dir}, "-tls-cert"},
		{[]string{"-peers", "a", dir}, "-peers"},
		{[]string{"-replicas", "2", dir}, "a cluster needs -peers"},
		{[]string{"-tcp", "1", "-peers", "127.0.0.1:1,b:1", "-replicas", "3", dir}, "-replicas 3"},
		{[]string{"-tcp", "1", "-peers", "127.0.0.1:1,b:1", "-replicas", "2", "-min-insync", "3", dir}, "-min-insync 3"},
		{[]string{"-tcp", "1", "-peers", "127.0.0.1:1,b:1", "-cluster", "-auth-file", "x", dir}, "-cluster-token-file"},
		{[]string{"-cluster-ca", "ca.pem", dir}, "-cluster-ca needs -cluster"},
		{[]string{"-tcp", "1", "-peers", "127.0.0.1:1,b:1", "-cluster", "-cluster-ca", "ca.pem", dir}, "-cluster-ca needs -tls-cert"},
		{[]string{"-tcp", "1", "-peers", "127.0.0.1:1,b:1", "-cluster", dir}, "head -c 32 /dev/urandom | base64 > cluster.token"},
		{[]string{"-tcp", "1", "-peers", "127.0.0.1:1,b:1", "-cluster", "-cluster-token-file", shortSecret, dir}, "want at least 16"},
	} {
		if _, err := server.ParseFlags(tc.args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseFlags(%q): %v, want an error holding %q", tc.args, err, tc.err)
		}
	}
}

// secretFile writes a members' secret to a file and returns its path.
func secretFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cluster.token")
	if err := os.WriteFile(p, []byte(testSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestParseFlagsClusterTLS: a cluster takes -tls-cert, and -cluster-ca
// reaches its configuration.
func TestParseFlagsClusterTLS(t *testing.T) {
	c, err := server.ParseFlags([]string{"-tcp", "1", "-peers", "127.0.0.1:1,b:1", "-cluster", "-tls-cert", "srv.pem", "-tls-key", "srv.key",
		"-tls-client-ca", "clients.pem", "-cluster-ca", "servers.pem", "-cluster-token-file", secretFile(t), t.TempDir()}, &bytes.Buffer{})
	switch {
	case err != nil:
		t.Fatal(err)
	case c.Cluster == nil || c.Cluster.CAFile != "servers.pem" || c.TLSCertFile != "srv.pem" || c.TLSClientCAFile != "clients.pem":
		t.Errorf("cluster %+v, TLS files %q %q", c.Cluster, c.TLSCertFile, c.TLSClientCAFile)
	}
}
