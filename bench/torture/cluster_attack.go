package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/client/admin"
)

// The cluster-attack phase: the cluster surface as an attacker sees it,
// on three server processes, first without -auth-file (the members'
// secret only, each server under a descriptor limit of 1024), then with
// one (tenants, an admin and the members' replication token):
//
//   - forwarded member lists and Raft connections without the secret,
//     and a member list forwarded with it; the server-to-server and
//     membership ops (17, 18, 20, 21, 23, POST /cluster/members) without
//     it, or with a tenant's token;
//   - silent connections to the Raft leader's cluster port, 300 a
//     second, beside a client producing one message at a time with
//     acks=all (its p99 against idle is printed);
//   - 5,000 refused connections, against the log;
//   - cluster status read by a tenant: its topics only, no members;
//   - a tenant committing a group offset as fast as it can beside
//     another tenant committing one at a time;
//   - 500 topics of 3 replicas: every in-sync set full, an acks=all
//     produce to each taken.
//
// Through all of it the cluster keeps its members, leaders and in-sync
// sets. It prints
//
//	cluster-attack ok forwarded_refused=N raft_refused=N ops_refused=N ... topics=500 isr_full=500
//
// or returns an error naming each check that failed.

const (
	caNofile     = 1024
	caStormRate  = 300 // silent connections a second
	caStormFor   = 6 * time.Second
	caIdleFor    = 3 * time.Second
	caLogFlood   = 5000
	caTopics     = 500
	caFloodFor   = 8 * time.Second
	caHealthy    = 30 * time.Second
	caGroupRate  = 200
	caTopicRetry = 10 * time.Second
	caTopicsWait = 150 * time.Second
	caRaftDBMax  = 4 << 20 // a member's raft.db growth allowed over the commit flood
	caVictimTopc = "ca-victim"
)

// caRun gathers the phase's figures and failures.
type caRun struct {
	e      *env
	fails  []string
	fields []string
}

func (r *caRun) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.fails = append(r.fails, msg)
	fmt.Printf("  %s FAIL %s\n", time.Now().Format("15:04:05.000"), msg)
}

func (r *caRun) field(k string, v any) {
	r.fields = append(r.fields, fmt.Sprintf("%s=%v", k, v))
}

func runClusterAttack(ctx context.Context, e *env) (string, error) {
	r := &caRun{e: e}
	if err := r.open(ctx); err != nil {
		return "cluster-attack FAIL", err
	}
	if err := r.withAuth(ctx); err != nil {
		return "cluster-attack FAIL", err
	}
	line := "cluster-attack ok " + strings.Join(r.fields, " ")
	if len(r.fails) > 0 {
		return "cluster-attack FAIL " + strings.Join(r.fields, " "), errors.New(strings.Join(r.fails, "; "))
	}
	fmt.Println(line)
	return line, nil
}

// killAll stops a phase's cluster.
func killAll(c *foCluster) {
	if c == nil {
		return
	}
	for _, f := range c.servers {
		if f != nil && f.s != nil && f.s.alive() {
			f.s.kill()
		}
	}
}

// open runs the attacks on a cluster without -auth-file.
func (r *caRun) open(ctx context.Context) error {
	c, err := newClusterWith(r.e, "cluster-attack-open", "", nil, caNofile)
	defer killAll(c)
	if err != nil {
		return fmt.Errorf("start the cluster without -auth-file: %w", err)
	}
	secret, err := os.ReadFile(c.secret)
	if err != nil {
		return err
	}
	addrs := strings.Join(c.addrs(), ",")
	admin, err := client.Dial(ctx, addrs, client.WithRequestTimeout(10*time.Second))
	if err != nil {
		return err
	}
	defer admin.Close()
	if err := retry(ctx, caHealthy, func() error {
		_, err := admin.Produce(ctx, caVictimTopc, []byte("first"))
		return err
	}); err != nil {
		return fmt.Errorf("the first produce: %w", err)
	}
	st := caStatus{token: ""}
	before, err := st.healthy(ctx, c, 1, caHealthy)
	if err != nil {
		return fmt.Errorf("before the attacks: %w", err)
	}
	r.forwarded(c, strings.TrimSpace(string(secret)))
	r.raftConns(c.servers[0])
	r.opsAndLog(ctx, c.servers[0])
	return r.stormed(ctx, c, st, before)
}

// forwarded checks that member lists forwarded without the secret are
// closed unanswered, and refused with it.
func (r *caRun) forwarded(c *foCluster, secret string) {
	evil := []byte(`{"op":"members","members":[{"id":"10.9.9.9:1","raft":"10.9.9.9:2","http":"http://evil.example"}]}`)
	forwarded := 0
	for _, f := range c.servers {
		for _, tok := range []string{"", "not-the-secret"} {
			if closedUnanswered(f.clu, 'F', tok, evil) {
				forwarded++
			} else {
				r.fail("%s: a member list forwarded with token %q was answered", f.addr(), tok)
			}
		}
	}
	// With the secret a member list is still refused (only the Raft
	// leader's controller records one, once).
	if ans, err := forwardWith(c.servers[0].clu, secret, evil); err != nil || len(ans) == 0 || ans[0] == 0 {
		r.fail("a member list forwarded with the secret: answer %q, %v: want a refusal", ans, err)
	} else {
		forwarded++
	}
	r.field("forwarded_refused", forwarded)
}

// raftConns opens 500 Raft connections without the secret to target's
// cluster port and checks that each is closed and the server's
// descriptors come back.
func (r *caRun) raftConns(target *foServer) {
	raftRefused := 0
	fdsBefore := fdCount(target.s.pid())
	var held []net.Conn
	for range 500 {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(target.clu), time.Second)
		if err != nil {
			continue
		}
		_, _ = conn.Write(preamble('R', ""))
		held = append(held, conn)
	}
	for _, conn := range held {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := conn.Read(make([]byte, 1)); n == 0 && !isTimeout(err) {
			raftRefused++
		}
		conn.Close()
	}
	if raftRefused != len(held) {
		r.fail("%d of %d Raft connections without the secret still open after 5 s", len(held)-raftRefused, len(held))
	}
	fdsAfter := fdCount(target.s.pid())
	r.field("raft_refused", raftRefused)
	r.field("fds_before", fdsBefore)
	r.field("fds_after", fdsAfter)
	if fdsAfter > fdsBefore+50 {
		r.fail("the server holds %d descriptors after the Raft connections, %d before", fdsAfter, fdsBefore)
	}
}

// opsAndLog checks that target refuses the server-to-server and
// membership ops without the secret, and logs a flood of refused
// connections at most once every 10 s for each kind.
func (r *caRun) opsAndLog(ctx context.Context, target *foServer) {
	refused := 0
	for _, tok := range []string{"", "not-the-secret"} {
		n, err := opsRefused(ctx, target, tok)
		refused += n
		if err != nil {
			r.fail("ops with token %q: %v", tok, err)
		}
	}
	r.field("ops_refused", refused)
	logBefore := countLines(target.s.output(), "cluster port")
	floodBegun := time.Now()
	floodConns(target.clu, caLogFlood)
	floodTook := time.Since(floodBegun)
	logLines := countLines(target.s.output(), "cluster port") - logBefore
	maxLines := 3 * (int(floodTook/(10*time.Second)) + 2)
	r.field("log_flood_conns", caLogFlood)
	r.field("log_lines", logLines)
	if logLines > maxLines {
		r.fail("%d refused connections logged %d lines in %v, want at most %d", caLogFlood, logLines, floodTook.Round(time.Millisecond), maxLines)
	}
}

// stormed opens silent connections to the Raft leader's cluster port
// beside a producer of one message at a time, and checks that the
// producer gets no error and the cluster keeps its members and leaders
// (as they were before).
func (r *caRun) stormed(ctx context.Context, c *foCluster, st caStatus, before admin.ClusterStatus) error {
	addrs := strings.Join(c.addrs(), ",")
	leader := c.servers[0]
	if s, err := st.of(ctx, c); err == nil {
		for _, f := range c.servers {
			if f.addr() == s.RaftLeader {
				leader = f
			}
		}
	}
	downBefore := countLines(allOutput(c), "member down")
	v := startCAVictim(ctx, addrs, caVictimTopc)
	time.Sleep(caIdleFor)
	idle := v.cut()
	stormed := storm(leader.clu, caStormRate, caStormFor)
	during := v.cut()
	v.stop()
	r.field("storm_conns", stormed)
	r.field("victim_p99_idle_us", idle.p99.Microseconds())
	r.field("victim_p99_storm_us", during.p99.Microseconds())
	r.field("victim_errors", idle.errs+during.errs)
	if idle.errs+during.errs > 0 {
		r.fail("the producer got %d errors (%s)", idle.errs+during.errs, during.lastErr)
	}
	if during.n == 0 {
		r.fail("the producer made no produce during the storm")
	}
	after, err := st.healthy(ctx, c, 1, caHealthy)
	if err != nil {
		r.fail("after the storm: %v", err)
	}
	if down := countLines(allOutput(c), "member down") - downBefore; down > 0 {
		r.fail("%d members taken as down during the storm", down)
	}
	changes := leaderChanges(before, after)
	r.field("leader_changes", changes)
	if changes > 0 {
		r.fail("%d leader changes during the attacks without -auth-file", changes)
	}
	if len(after.Members) != 3 {
		r.fail("members after the attacks: %+v", after.Members)
	}
	return nil
}

// writeCARules writes the auth file of the attacks with -auth-file under
// dir: the members' token, an admin and two tenants, and returns its path.
func writeCARules(dir string) (string, error) {
	hash := func(tok string) string { h := sha256.Sum256([]byte(tok)); return hex.EncodeToString(h[:]) }
	authFile := filepath.Join(dir, "cluster-attack-auth.rules")
	rules := hash("ca-cluster-token") + " replication *\n" +
		hash("ca-admin") + " admin *\n" +
		hash("ca-tenant-a") + " produce,consume app.*\n" +
		hash("ca-tenant-b") + " produce,consume hr.*\n"
	return authFile, os.WriteFile(authFile, []byte(rules), 0o600)
}

// withAuth runs the attacks on a cluster with -auth-file.
func (r *caRun) withAuth(ctx context.Context) error {
	authFile, err := writeCARules(r.e.dir)
	if err != nil {
		return err
	}
	// A group change rate low enough that the flood meets it on a
	// loaded two-core machine (the default is 1000 a second).
	c, err := newClusterWith(r.e, "cluster-attack-auth", "ca-cluster-token",
		[]string{"-auth-file", authFile, "-max-group-change-rate", strconv.Itoa(caGroupRate)}, 0)
	defer killAll(c)
	if err != nil {
		return fmt.Errorf("start the cluster with -auth-file: %w", err)
	}
	addrs := strings.Join(c.addrs(), ",")
	dial := func(tok string) (*client.Client, error) {
		return client.Dial(ctx, addrs, client.WithToken(tok), client.WithRequestTimeout(10*time.Second))
	}
	admin, err := dial("ca-admin")
	if err != nil {
		return err
	}
	defer admin.Close()
	for _, topic := range []string{"app.x", "hr.payroll", "hr.layoffs-2027"} {
		if err := retry(ctx, caHealthy, func() error {
			_, err := admin.Produce(ctx, topic, []byte("first"))
			return err
		}); err != nil {
			return fmt.Errorf("the first produce to %s: %w", topic, err)
		}
	}
	st := caStatus{token: "ca-admin"}
	before, err := st.healthy(ctx, c, 3, caHealthy)
	if err != nil {
		return fmt.Errorf("before the attacks: %w", err)
	}

	// A tenant's token on the cluster port and the server-to-server ops.
	target := c.servers[1]
	if !closedUnanswered(target.clu, 'F', "ca-tenant-a", []byte(`{"op":"noop"}`)) {
		r.fail("a tenant's forwarded command was answered")
	}
	n, err := opsRefused(ctx, target, "ca-tenant-a")
	if err != nil {
		r.fail("ops with a tenant's token: %v", err)
	}
	r.field("tenant_ops_refused", n)

	// Cluster status read by a tenant.
	if err := r.statusHidden(ctx, c); err != nil {
		r.fail("cluster status read by a tenant: %v", err)
	}

	// A commit flood beside a tenant committing one at a time.
	if err := r.commitFlood(ctx, c, dial); err != nil {
		r.fail("commit flood: %v", err)
	}

	// 500 topics of 3 replicas.
	if err := r.manyTopics(ctx, c, admin); err != nil {
		r.fail("%d topics: %v", caTopics, err)
	}
	after, err := st.healthy(ctx, c, 3+caTopics, caHealthy)
	if err != nil {
		r.fail("after the attacks with -auth-file: %v", err)
	} else {
		changes := leaderChanges(before, after)
		r.field("auth_leader_changes", changes)
		if changes > 0 {
			r.fail("%d leader changes during the attacks with -auth-file", changes)
		}
	}
	return nil
}
