package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// The auth file's grammar for group names and the metrics right, as the
// fixes of rows D and 11/13 define it: a rule field "groups=<pattern>"
// naming the groups a token may use, and a right "metrics" for /metrics.
const (
	threatGroupsField  = "groups="
	threatMetricsRight = "metrics"
)

// tokens2 are the phase's tenants.
type tokens2 struct {
	victim   string // produce,consume,admin on v.* and shared.*; groups v.*
	attacker string // produce,consume,admin on a.*; groups a.*
	shared   string // the attacker's on the shared topics: produce,consume on shared.*; groups a.*
	metrics  string // the metrics right on *
}

func newTokens2() tokens2 {
	tok := func() string {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)
	}
	return tokens2{victim: tok(), attacker: tok(), shared: tok(), metrics: tok()}
}

// authFile is the rules for the tokens.
func (t tokens2) authFile() string {
	rule := func(token, rights, topics, groups string) string {
		h := protocol.TokenHash(token)
		line := hex.EncodeToString(h[:]) + " " + rights + " " + topics
		if groups != "" {
			line += " " + threatGroupsField + groups
		}
		return line + "\n"
	}
	s := "# threats: the victim, the attacker, the attacker's token on the shared topics, a metrics token\n" +
		rule(t.victim, "produce,consume,admin", "v.* shared.*", "v.*") +
		rule(t.attacker, "produce,consume,admin", "a.*", "a.*") +
		rule(t.shared, "produce,consume", "shared.*", "a.*")
	return s + rule(t.metrics, threatMetricsRight, "*", "")
}

// threatRig is a server with the phase's auth file and its victim.
type threatRig struct {
	name   string
	spec   serverSpec
	srv    *server
	http   string // HTTP port, host:port
	tok    tokens2
	tls    *tls.Config
	ca     string // the TLS server's certificate file, its clients' CA
	victim *threatVictim
	ledger *ledger // the victim's acks, across restarts of its process
}

// ensureRig returns the named rig, starting it, or restarting its server
// when it died in an earlier row.
func ensureRig(ctx context.Context, e *env, rigs map[string]*threatRig, name string) (*threatRig, error) {
	g := rigs[name]
	if g != nil && g.srv.alive() {
		return g, nil
	}
	why := "first row"
	if g == nil {
		var err error
		if g, err = newThreatRig(e, name); err != nil {
			return nil, err
		}
		rigs[name] = g
	} else {
		why = "the last row's server died or its RSS passed the buffer budget"
		g.victim.close()
		g.victim = nil
	}
	begun := time.Now()
	if err := g.start(e); err != nil {
		return nil, err
	}
	fmt.Printf("  %s server started in %s (%s)\n", name, time.Since(begun).Round(10*time.Millisecond), why)
	v, err := startVictim(ctx, g)
	if err != nil {
		g.srv.kill()
		return nil, fmt.Errorf("victim: %w", err)
	}
	g.victim = v
	return g, nil
}

// newThreatRig lays out the rig's files and flags: main (3 volumes, -max-conns
// 200, -pprof), fd (a 256-descriptor limit) and tls (the same, TLS).
func newThreatRig(e *env, name string) (*threatRig, error) {
	dir := filepath.Join(e.dir, "threats-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	g := &threatRig{name: name, tok: newTokens2(), ledger: newLedger()}
	args := []string{"-auth-file", filepath.Join(dir, "auth"),
		"-max-buffered-bytes", strconv.Itoa(threatBudget), "-memory-limit", strconv.Itoa(threatMemLimit)}
	g.spec = serverSpec{bin: e.bin, volumes: e.volumes("threats-"+name, 2), args: args}
	switch name {
	case "main":
		g.spec.volumes = e.volumes("threats-"+name, 3)
		g.spec.args = append(g.spec.args, "-max-conns", strconv.Itoa(threatMaxConns), "-pprof")
	case "fd":
		g.spec.nofile = 256
	case "tls":
		g.spec.nofile = 256
		cfg, cert, key, err := selfSigned(dir)
		if err != nil {
			return nil, err
		}
		g.tls, g.ca = cfg, cert
		g.spec.args = append(g.spec.args, "-tls-cert", cert, "-tls-key", key)
	}
	g.spec.args = append(g.spec.args, strings.Fields(e.cfg.extra)...)
	return g, nil
}

// start writes the auth file and starts the server.
func (g *threatRig) start(e *env) error {
	if err := os.WriteFile(g.spec.args[1], []byte(g.tok.authFile()), 0o600); err != nil {
		return err
	}
	s, err := start(g.spec)
	if err != nil {
		return err
	}
	g.srv = s
	g.http = logField(servingLine(s.output()), "http")
	return nil
}

// logField is the value of key=value in a log line.
func logField(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

func (g *threatRig) close() {
	if g.victim != nil {
		g.victim.close()
	}
	if g.srv != nil && g.srv.alive() {
		g.srv.kill()
	}
}

// dial connects a Go client with token from 127.0.0.1.
func (g *threatRig) dial(ctx context.Context, token string, opts ...client.Option) (*client.Client, error) {
	opts = append([]client.Option{client.WithToken(token)}, opts...)
	if g.tls != nil {
		opts = append(opts, client.WithTLS(g.tls))
	}
	return g.srv.dial(ctx, opts...)
}

// hwmRSS is the peak resident set size of pid since its last reset.
func hwmRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// threatAbort is the RSS at which the server is killed to spare the machine.
const threatAbort = 2 << 30

// watchRSS resets the server's peak RSS and samples it every 20 ms; at
// the limit it ends the row's attack. The returned func stops sampling
// and returns the peak.
func (g *threatRig) watchRSS(r *rowRun) func() int64 {
	pid := g.srv.pid()
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
	var peak atomic.Int64
	stop := sampleEvery(20*time.Millisecond, func() {
		n, err := rss(pid)
		if err != nil {
			return
		}
		peak.Store(max(peak.Load(), n))
		if n >= threatMemLimit {
			r.end()
		}
		if n >= threatAbort {
			g.srv.kill()
		}
	})
	return func() int64 {
		stop()
		if g.srv.alive() {
			peak.Store(max(peak.Load(), hwmRSS(pid)))
		}
		return peak.Load()
	}
}
