package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/client"
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

func (r *caRun) note(format string, args ...any) {
	fmt.Printf("  %s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
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

	// Forwarded member lists and Raft connections without the secret.
	evil := []byte(`{"op":"members","members":[{"id":"10.9.9.9:1","raft":"10.9.9.9:2","http":"http://evil.example"}]}`)
	forwarded, raftRefused := 0, 0
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
	if ans, err := forwardWith(c.servers[0].clu, strings.TrimSpace(string(secret)), evil); err != nil || len(ans) == 0 || ans[0] == 0 {
		r.fail("a member list forwarded with the secret: answer %q, %v: want a refusal", ans, err)
	} else {
		forwarded++
	}
	target := c.servers[0]
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
	r.field("forwarded_refused", forwarded)
	r.field("raft_refused", raftRefused)
	r.field("fds_before", fdsBefore)
	r.field("fds_after", fdsAfter)
	if fdsAfter > fdsBefore+50 {
		r.fail("the server holds %d descriptors after the Raft connections, %d before", fdsAfter, fdsBefore)
	}

	// The server-to-server and membership ops without the secret.
	refused := 0
	for _, tok := range []string{"", "not-the-secret"} {
		n, err := opsRefused(ctx, target, tok)
		refused += n
		if err != nil {
			r.fail("ops with token %q: %v", tok, err)
		}
	}
	r.field("ops_refused", refused)

	// A log flood: refused connections are logged at most once every
	// 10 s for each kind.
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

	// The storm: silent connections to the Raft leader's cluster port
	// beside a producer of one message at a time.
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

// withAuth runs the attacks on a cluster with -auth-file.
func (r *caRun) withAuth(ctx context.Context) error {
	hash := func(tok string) string { h := sha256.Sum256([]byte(tok)); return hex.EncodeToString(h[:]) }
	authFile := filepath.Join(r.e.dir, "cluster-attack-auth.rules")
	rules := hash("ca-cluster-token") + " replication *\n" +
		hash("ca-admin") + " admin *\n" +
		hash("ca-tenant-a") + " produce,consume app.*\n" +
		hash("ca-tenant-b") + " produce,consume hr.*\n"
	if err := os.WriteFile(authFile, []byte(rules), 0o600); err != nil {
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

// statusHidden checks that a tenant's cluster status (op 19 and GET
// /cluster) names only its topics and no members, and the admin's all.
func (r *caRun) statusHidden(ctx context.Context, c *foCluster) error {
	tenant, err := c.servers[0].s.dial(ctx, client.WithToken("ca-tenant-a"))
	if err != nil {
		return err
	}
	defer tenant.Close()
	b, err := tenant.ClusterStatus(ctx)
	if err != nil {
		return fmt.Errorf("op 19: %w", err)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://127.0.0.1:"+strconv.Itoa(c.servers[0].web)+"/cluster", nil)
	req.Header.Set("Authorization", "Bearer ca-tenant-a")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	hb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /cluster: %d %s", resp.StatusCode, hb)
	}
	for what, body := range map[string][]byte{"op 19": b, "GET /cluster": hb} {
		var st foStatus
		if err := json.Unmarshal(body, &st); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		for _, t := range st.Topics {
			if !strings.HasPrefix(t.Name, "app.") {
				return fmt.Errorf("%s shows the tenant of app.* the topic %q", what, t.Name)
			}
		}
		if len(st.Members) > 0 {
			return fmt.Errorf("%s shows the tenant of app.* %d members", what, len(st.Members))
		}
		if !slices.ContainsFunc(st.Topics, func(t foTopicStatus) bool { return t.Name == "app.x" }) {
			return fmt.Errorf("%s does not show the tenant its own topic app.x: %s", what, body)
		}
	}
	r.field("status_hidden", "ok")
	return nil
}

// commitFlood has tenant a commit as fast as it can from 4 connections
// while tenant b commits one at a time, and checks that a's commits are
// bounded, b's go through, and the Raft log does not balloon.
func (r *caRun) commitFlood(ctx context.Context, c *foCluster, dial func(string) (*client.Client, error)) error {
	a, err := dial("ca-tenant-a")
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := dial("ca-tenant-b")
	if err != nil {
		return err
	}
	defer b.Close()
	for _, p := range []struct {
		c     *client.Client
		topic string
	}{{a, "app.x"}, {b, "hr.payroll"}} {
		msgs := make([][]byte, 1000)
		for i := range msgs {
			msgs[i] = []byte("m")
		}
		if _, err := p.c.Produce(ctx, p.topic, msgs...); err != nil {
			return err
		}
	}
	dbBefore := raftDBSizes(c)
	victim := func(d time.Duration) (p50, max time.Duration, errs int, lastErr error) {
		var lat []time.Duration
		end := time.Now().Add(d)
		for i := int64(1); time.Now().Before(end); i++ {
			t0 := time.Now()
			if err := b.CommitOffset(ctx, "g-b", "hr.payroll", i%1000); err != nil {
				errs++
				lastErr = err
			}
			lat = append(lat, time.Since(t0))
			time.Sleep(10 * time.Millisecond)
		}
		return pct(lat, 50), pct(lat, 100), errs, lastErr
	}
	idleP50, _, idleErrs, _ := victim(2 * time.Second)
	var ok, limited, other atomic.Int64
	var lastOther atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := int64(1); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				err := a.CommitOffset(ctx, fmt.Sprintf("g-a-%d", w), "app.x", i%1000)
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, client.ErrLimitReached):
					limited.Add(1)
				default:
					other.Add(1)
					lastOther.Store(err.Error())
				}
			}
		})
	}
	floodP50, floodMax, floodErrs, lastErr := victim(caFloodFor)
	close(stop)
	wg.Wait()
	dbGrowth := maxGrowth(dbBefore, raftDBSizes(c))
	r.field("flood_commits_ok", ok.Load())
	r.field("group_change_rate", caGroupRate)
	r.field("flood_commits_limited", limited.Load())
	r.field("victim_commit_p50_idle_us", idleP50.Microseconds())
	r.field("victim_commit_p50_flood_us", floodP50.Microseconds())
	r.field("victim_commit_max_flood_us", floodMax.Microseconds())
	r.field("flood_commits_per_s", ok.Load()*int64(time.Second)/int64(caFloodFor))
	r.field("raft_db_growth_kib", dbGrowth>>10)
	if idleErrs+floodErrs > 0 {
		return fmt.Errorf("the other tenant's commits failed %d times: %v", idleErrs+floodErrs, lastErr)
	}
	if limited.Load() == 0 {
		return fmt.Errorf("%d commits in %v, none refused by a limit", ok.Load(), caFloodFor)
	}
	if other.Load() > 0 {
		return fmt.Errorf("%d flood commits failed otherwise than on the limit: %v", other.Load(), lastOther.Load())
	}
	if dbGrowth > caRaftDBMax {
		return fmt.Errorf("a member's raft.db grew %d KiB over the flood, at most %d allowed", dbGrowth>>10, caRaftDBMax>>10)
	}
	return nil
}

// manyTopics creates caTopics topics of 3 replicas, produces one message
// with acks=all to each, and waits until every in-sync set is full.
func (r *caRun) manyTopics(ctx context.Context, c *foCluster, admin *client.Client) error {
	names := make([]string, caTopics)
	for i := range names {
		names[i] = fmt.Sprintf("many.%03d", i)
	}
	var failed atomic.Int64
	var lastErr atomic.Value
	work := make(chan string)
	var wg sync.WaitGroup
	// Each produce may wait out a leader's election (caTopicRetry), all
	// of them together caTopicsWait: a cluster that cannot take them
	// fails the check rather than the check's time limit.
	ctx, cancel := context.WithTimeout(ctx, caTopicsWait)
	defer cancel()
	for range 16 {
		wg.Go(func() {
			for name := range work {
				err := retry(ctx, caTopicRetry, func() error {
					_, err := admin.Produce(ctx, name, []byte("one"))
					return err
				})
				if err != nil {
					failed.Add(1)
					lastErr.Store(err.Error())
				}
			}
		})
	}
	for _, n := range names {
		work <- n
	}
	close(work)
	wg.Wait()
	r.field("topics", caTopics)
	r.field("acks_all_failed", failed.Load())
	if failed.Load() > 0 {
		return fmt.Errorf("%d acks=all produces failed: %v", failed.Load(), lastErr.Load())
	}
	st := caStatus{token: "ca-admin"}
	s, err := st.healthy(context.WithoutCancel(ctx), c, 3+caTopics, 60*time.Second)
	full := 0
	for _, t := range s.Topics {
		if len(t.ISR) == 3 {
			full++
		}
	}
	r.field("isr_full", full)
	return err
}

// caStatus reads cluster status with a token.
type caStatus struct{ token string }

func (s caStatus) of(ctx context.Context, c *foCluster) (foStatus, error) {
	var errs []error
	for _, f := range c.servers {
		cl, err := f.s.dial(ctx, client.WithToken(s.token))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b, err := cl.ClusterStatus(ctx)
		cl.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var st foStatus
		return st, json.Unmarshal(b, &st)
	}
	return foStatus{}, errors.Join(errs...)
}

// healthy waits until every server's status shows topics topics, each
// with a leader and all its replicas in sync, and 3 members.
func (s caStatus) healthy(ctx context.Context, c *foCluster, topics int, wait time.Duration) (foStatus, error) {
	deadline := time.Now().Add(wait)
	var last string
	var st foStatus
	for {
		ok := true
		for _, f := range c.servers {
			cl, err := f.s.dial(ctx, client.WithToken(s.token))
			if err != nil {
				ok, last = false, err.Error()
				break
			}
			b, err := cl.ClusterStatus(ctx)
			cl.Close()
			if err == nil {
				st = foStatus{}
				err = json.Unmarshal(b, &st)
			}
			if err != nil {
				ok, last = false, err.Error()
				break
			}
			if len(st.Topics) != topics || len(st.Members) != 3 {
				ok, last = false, fmt.Sprintf("%s knows %d topics, %d members", f.addr(), len(st.Topics), len(st.Members))
				break
			}
			for _, t := range st.Topics {
				if t.Leader == "" || len(t.ISR) != len(t.Replicas) || len(t.Target) > 0 {
					ok, last = false, fmt.Sprintf("%s: %s led by %q, in sync %v of %v", f.addr(), t.Name, t.Leader, t.ISR, t.Replicas)
					break
				}
			}
			if !ok {
				break
			}
		}
		if ok {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("not healthy within %v: %s", wait, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// leaderChanges counts the topics of before whose epoch moved by after.
func leaderChanges(before, after foStatus) int {
	epochs := map[string]int64{}
	for _, t := range before.Topics {
		epochs[t.Name] = t.Epoch
	}
	n := 0
	for _, t := range after.Topics {
		if e, ok := epochs[t.Name]; ok && t.Epoch != e {
			n++
		}
	}
	return n
}

// preamble is a cluster port connection's preamble of kind with token.
func preamble(kind byte, token string) []byte {
	b := append([]byte("HRQC"), kind)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(token)))
	return append(b, token...)
}

// closedUnanswered sends a connection of kind with token and a command
// to the cluster port at port and reports whether the server closed it
// without a byte of answer within 5 s.
func closedUnanswered(port int, kind byte, token string, cmd []byte) bool {
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 2*time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	msg := binary.LittleEndian.AppendUint32(preamble(kind, token), uint32(len(cmd)))
	_, _ = conn.Write(append(msg, cmd...))
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := conn.Read(make([]byte, 64))
	return n == 0 && !isTimeout(err)
}

// forwardWith forwards cmd with token and returns the answer.
func forwardWith(port int, token string, cmd []byte) ([]byte, error) {
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	msg := binary.LittleEndian.AppendUint32(preamble('F', token), uint32(len(cmd)))
	if _, err := conn.Write(append(msg, cmd...)); err != nil {
		return nil, err
	}
	var h [4]byte
	if _, err := io.ReadFull(conn, h[:]); err != nil {
		return nil, err
	}
	ans := make([]byte, min(binary.LittleEndian.Uint32(h[:]), 1<<20))
	_, err = io.ReadFull(conn, ans)
	return ans, err
}

// opsRefused calls the server-to-server and membership ops on f with
// token and returns how many were refused as forbidden; an op that was
// not is an error.
func opsRefused(ctx context.Context, f *foServer, token string) (int, error) {
	c, err := f.s.dial(ctx, client.WithToken(token))
	if err != nil {
		if errors.Is(err, client.ErrUnauthenticated) {
			return 6, nil // a token the rules do not hold: no call at all
		}
		return 0, err
	}
	defer c.Close()
	var errs []error
	n := 0
	check := func(what string, err error) {
		if errors.Is(err, client.ErrForbidden) || errors.Is(err, client.ErrUnauthenticated) {
			n++
			return
		}
		errs = append(errs, fmt.Errorf("%s: %v, want forbidden", what, err))
	}
	_, err = c.LogEnds(ctx, []string{caVictimTopc})
	check("log ends", err)
	_, _, err = c.EpochEnd(ctx, caVictimTopc, 1)
	check("epoch end", err)
	_, err = c.ProducerOwners(ctx, caVictimTopc, []uint64{1})
	check("producer owners", err)
	_, err = c.ReplicaFetch(ctx, client.ReplicaFetch{Topic: caVictimTopc, Follower: f.addr(), Epoch: 1})
	check("replica fetch", err)
	check("add member", c.AddMember(ctx, "10.9.9.9:14353/4353/14355"))
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://127.0.0.1:"+strconv.Itoa(f.web)+"/cluster/members",
		strings.NewReader("10.9.9.9:14353/4353/14355"))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		errs = append(errs, err)
	} else {
		resp.Body.Close()
		if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized {
			n++
		} else {
			errs = append(errs, fmt.Errorf("POST /cluster/members: %d, want 403", resp.StatusCode))
		}
	}
	return n, errors.Join(errs...)
}

// floodConns opens n connections to the cluster port at port, 32 at a
// time, each sending a preamble with a wrong token, and closes them.
func floodConns(port, n int) {
	work := make(chan struct{})
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range work {
				conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
				if err != nil {
					continue
				}
				_, _ = conn.Write(preamble('F', "wrong"))
				_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
				_, _ = conn.Read(make([]byte, 1))
				conn.Close()
			}
		})
	}
	for range n {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
}

// storm opens rate silent connections a second to the cluster port at
// port for d, holding each until the end, and returns how many it
// opened.
func storm(port, rate int, d time.Duration) int {
	var held []net.Conn
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		<-tick.C
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 100*time.Millisecond)
		if err == nil {
			held = append(held, conn)
		}
	}
	for _, c := range held {
		c.Close()
	}
	return len(held)
}

// caVictim produces one message at a time with acks=all and records the
// latencies.
type caVictim struct {
	mu      sync.Mutex
	lat     []time.Duration
	errs    int
	lastErr string
	done    chan struct{}
	stopped chan struct{}
}

type caCut struct {
	n       int
	p99     time.Duration
	errs    int
	lastErr string
}

func startCAVictim(ctx context.Context, addrs, topic string) *caVictim {
	v := &caVictim{done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(v.stopped)
		c, err := client.Dial(ctx, addrs, client.WithRequestTimeout(10*time.Second))
		if err != nil {
			v.mu.Lock()
			v.errs++
			v.lastErr = err.Error()
			v.mu.Unlock()
			return
		}
		defer c.Close()
		for {
			select {
			case <-v.done:
				return
			default:
			}
			t0 := time.Now()
			_, err := c.Produce(ctx, topic, []byte("victim"))
			v.mu.Lock()
			v.lat = append(v.lat, time.Since(t0))
			if err != nil {
				v.errs++
				v.lastErr = err.Error()
			}
			v.mu.Unlock()
		}
	}()
	return v
}

// cut returns the figures since the last cut.
func (v *caVictim) cut() caCut {
	v.mu.Lock()
	defer v.mu.Unlock()
	c := caCut{n: len(v.lat), p99: pct(v.lat, 99), errs: v.errs, lastErr: v.lastErr}
	v.lat, v.errs = nil, 0
	return c
}

func (v *caVictim) stop() {
	close(v.done)
	<-v.stopped
}

// pct is the p-th percentile of lat (100: the largest).
func pct(lat []time.Duration, p int) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, len(s)*p/100)]
}

// fdCount is how many descriptors process pid holds.
func fdCount(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// countLines counts the lines of out holding s.
func countLines(out, s string) int {
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// allOutput is every server's log.
func allOutput(c *foCluster) string {
	var b strings.Builder
	for _, f := range c.servers {
		if f.s != nil {
			b.WriteString(f.s.output())
		}
	}
	return b.String()
}

// raftDBSizes returns each member's raft.db size.
func raftDBSizes(c *foCluster) []int64 {
	n := make([]int64, len(c.servers))
	for i, f := range c.servers {
		if fi, err := os.Stat(filepath.Join(f.vol, "cluster", "raft.db")); err == nil {
			n[i] = fi.Size()
		}
	}
	return n
}

// maxGrowth is the most any member's raft.db grew from before to after.
func maxGrowth(before, after []int64) int64 {
	var g int64
	for i := range after {
		g = max(g, after[i]-before[i])
	}
	return g
}
