package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// This file: the clusters of three server processes the failover,
// cluster-faults and cluster-attack phases run.

// foServer is one member: its ports and volume, and the process.
type foServer struct {
	bin, web, clu int
	vol           string
	s             *server
}

func (f *foServer) addr() string { return "127.0.0.1:" + strconv.Itoa(f.bin) }

// lowPort returns a loopback port below the ephemeral range (32768 on)
// that was free a moment ago: a member keeps its ports across restarts,
// and others name it by them, so a port another connection could take
// meanwhile will not do.
func lowPort(e *env) (int, error) {
	for range 1000 {
		p := 20000 + e.rnd.IntN(12000)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err == nil {
			l.Close()
			return p, nil
		}
	}
	return 0, errors.New("no free port in 20000-31999")
}

// newFoCluster picks the servers' ports and starts them.
func newFoCluster(e *env) (*foCluster, error) { return newClusterIn(e, "failover") }

// newClusterIn is newFoCluster with the volumes under the run's
// directory name.
func newClusterIn(e *env, name string) (*foCluster, error) {
	return newClusterWith(e, name, "", nil, 0)
}

// newClusterWith is newClusterIn with a -cluster-token-file holding
// token ("": a members' secret made for it), more flags for every
// server and a descriptor limit (0: inherited).
func newClusterWith(e *env, name, token string, extra []string, nofile int) (*foCluster, error) {
	c := &foCluster{e: e, servers: make([]*foServer, foServers), extra: extra, nofile: nofile}
	var entries []string
	for i := range c.servers {
		f := &foServer{vol: filepath.Join(e.dir, name, fmt.Sprintf("s%d", i))}
		for _, p := range []*int{&f.bin, &f.web, &f.clu} {
			var err error
			if *p, err = lowPort(e); err != nil {
				return c, err
			}
		}
		c.servers[i] = f
		entries = append(entries, fmt.Sprintf("%s/%d/%d", f.addr(), f.web, f.clu))
	}
	c.peers = strings.Join(entries, ",")
	c.secret = filepath.Join(e.dir, name, "cluster.token")
	if token == "" {
		if err := writeSecret(c.secret); err != nil {
			return c, err
		}
	} else if err := os.MkdirAll(filepath.Dir(c.secret), 0o755); err != nil {
		return c, err
	} else if err := os.WriteFile(c.secret, []byte(token+"\n"), 0o600); err != nil {
		return c, err
	}
	for i := range c.servers {
		if err := c.start(i); err != nil {
			return c, err
		}
	}
	return c, nil
}

// start starts server i on its ports and volume.
func (c *foCluster) start(i int) error {
	f := c.servers[i]
	args := append([]string{"-http", strconv.Itoa(f.web), "-cluster", "-replicas", "3", "-min-insync", "2",
		"-cluster-port", strconv.Itoa(f.clu), "-cluster-token-file", c.secret, "-peers", c.peers, "-entries", "2000", "-ballast", "0"}, c.extra...)
	s, err := start(serverSpec{bin: c.e.bin, volumes: []string{f.vol}, tcp: f.bin, nofile: c.nofile, args: args})
	if err != nil {
		return fmt.Errorf("server %d: %w", i, err)
	}
	f.s = s
	return nil
}

func (c *foCluster) addrs() []string {
	out := make([]string, len(c.servers))
	for i, f := range c.servers {
		out[i] = f.addr()
	}
	return out
}

// writeSecret writes a members' secret of 32 random bytes, base64, to
// path, as docs/replication.md makes one.
func writeSecret(path string) error {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(b)+"\n"), 0o600)
}
