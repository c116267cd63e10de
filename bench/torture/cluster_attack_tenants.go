package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/client/admin"
)

// statusHidden checks that a tenant's cluster status (op 19 and GET
// /cluster) names only its topics and no members, and the admin's all.
func (r *caRun) statusHidden(ctx context.Context, c *foCluster) error {
	tenant, err := c.servers[0].s.dial(ctx, client.WithToken("ca-tenant-a"))
	if err != nil {
		return err
	}
	defer tenant.Close()
	bst, err := admin.New(tenant).ClusterStatus(ctx)
	if err != nil {
		return fmt.Errorf("op 19: %w", err)
	}
	b, err := json.Marshal(bst)
	if err != nil {
		return err
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
		var st admin.ClusterStatus
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
		if !slices.ContainsFunc(st.Topics, func(t admin.Topic) bool { return t.Name == "app.x" }) {
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
	msgs := slices.Repeat([][]byte{[]byte("m")}, 1000)
	if _, err := a.Produce(ctx, "app.x", msgs...); err != nil {
		return err
	}
	if _, err := b.Produce(ctx, "hr.payroll", msgs...); err != nil {
		return err
	}
	dbBefore := raftDBSizes(c)
	victim := func(d time.Duration) (p50, max time.Duration, errs int, lastErr error) {
		return commitOneAtATime(ctx, b, "g-b", "hr.payroll", d)
	}
	idleP50, _, idleErrs, _ := victim(2 * time.Second)
	f := &commitFlooder{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() { f.run(ctx, a, fmt.Sprintf("g-a-%d", w), stop) })
	}
	floodP50, floodMax, floodErrs, lastErr := victim(caFloodFor)
	close(stop)
	wg.Wait()
	dbGrowth := maxGrowth(dbBefore, raftDBSizes(c))
	r.field("flood_commits_ok", f.ok.Load())
	r.field("group_change_rate", caGroupRate)
	r.field("flood_commits_limited", f.limited.Load())
	r.field("victim_commit_p50_idle_us", idleP50.Microseconds())
	r.field("victim_commit_p50_flood_us", floodP50.Microseconds())
	r.field("victim_commit_max_flood_us", floodMax.Microseconds())
	r.field("flood_commits_per_s", f.ok.Load()*int64(time.Second)/int64(caFloodFor))
	r.field("raft_db_growth_kib", dbGrowth>>10)
	if idleErrs+floodErrs > 0 {
		return fmt.Errorf("the other tenant's commits failed %d times: %v", idleErrs+floodErrs, lastErr)
	}
	if f.limited.Load() == 0 {
		return fmt.Errorf("%d commits in %v, none refused by a limit", f.ok.Load(), caFloodFor)
	}
	if f.other.Load() > 0 {
		return fmt.Errorf("%d flood commits failed otherwise than on the limit: %v", f.other.Load(), f.lastOther.Load())
	}
	if dbGrowth > caRaftDBMax {
		return fmt.Errorf("a member's raft.db grew %d KiB over the flood, at most %d allowed", dbGrowth>>10, caRaftDBMax>>10)
	}
	return nil
}

// commitFlooder counts a flood's commits: taken, refused by the limit,
// failed otherwise (the last such error kept).
type commitFlooder struct {
	ok, limited, other atomic.Int64
	lastOther          atomic.Value
}

// run commits group's offset on app.x through a as fast as it goes
// until stop is closed.
func (f *commitFlooder) run(ctx context.Context, a *client.Client, group string, stop chan struct{}) {
	for i := int64(1); ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		err := a.CommitOffset(ctx, group, "app.x", i%1000)
		switch {
		case err == nil:
			f.ok.Add(1)
		case errors.Is(err, client.ErrLimitReached):
			f.limited.Add(1)
		default:
			f.other.Add(1)
			f.lastOther.Store(err.Error())
		}
	}
}

// commitOneAtATime commits group's offset on topic through c, one
// commit every 10 ms for d, and returns the commits' p50 and longest
// latency and how many failed.
func commitOneAtATime(ctx context.Context, c *client.Client, group, topic string, d time.Duration) (p50, longest time.Duration, errs int, lastErr error) {
	var lat []time.Duration
	end := time.Now().Add(d)
	for i := int64(1); time.Now().Before(end); i++ {
		t0 := time.Now()
		if err := c.CommitOffset(ctx, group, topic, i%1000); err != nil {
			errs++
			lastErr = err
		}
		lat = append(lat, time.Since(t0))
		time.Sleep(10 * time.Millisecond)
	}
	return pct(lat, 50), pct(lat, 100), errs, lastErr
}

// manyTopics creates caTopics topics of 3 replicas, produces one message
// with acks=all to each, and waits until every in-sync set is full.
func (r *caRun) manyTopics(ctx context.Context, c *foCluster, adm *client.Client) error {
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
					_, err := adm.Produce(ctx, name, []byte("one"))
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

func (s caStatus) of(ctx context.Context, c *foCluster) (admin.ClusterStatus, error) {
	var errs []error
	for _, f := range c.servers {
		cl, err := f.s.dial(ctx, client.WithToken(s.token))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		st, err := admin.New(cl).ClusterStatus(ctx)
		cl.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return st, nil
	}
	return admin.ClusterStatus{}, errors.Join(errs...)
}

// healthy waits until every server's status shows topics topics, each
// with a leader and all its replicas in sync, and 3 members.
func (s caStatus) healthy(ctx context.Context, c *foCluster, topics int, wait time.Duration) (admin.ClusterStatus, error) {
	return healthyAs(ctx, c.servers, s.token, topics, wait, false)
}

// leaderChanges counts the topics of before whose epoch moved by after.
func leaderChanges(before, after admin.ClusterStatus) int {
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
