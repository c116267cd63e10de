package server_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/server"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/storage"
)

// brokenFS is the real file system, except that while broken is set the
// writes and fsyncs of the files under a directory named dir fail with
// EIO: a disk that fails under one topic.
type brokenFS struct {
	storage.OSFS
	dir    string
	broken atomic.Bool
}

func (b *brokenFS) OpenFile(name string, flag int, perm fs.FileMode) (storage.File, error) {
	f, err := b.OSFS.OpenFile(name, flag, perm)
	if err != nil || !slices.Contains(strings.Split(name, string(os.PathSeparator)), b.dir) {
		return f, err
	}
	return brokenFile{File: f, fs: b}, nil
}

type brokenFile struct {
	storage.File
	fs *brokenFS
}

func (f brokenFile) fail(op string) error {
	if f.fs.broken.Load() {
		return &fs.PathError{Op: op, Path: "segment", Err: syscall.EIO}
	}
	return nil
}

func (f brokenFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fail("pwrite"); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f brokenFile) Writev(bufs [][]byte, off int64) (int, error) {
	if err := f.fail("pwritev"); err != nil {
		return 0, err
	}
	return f.File.Writev(bufs, off)
}

func (f brokenFile) Sync() error {
	if err := f.fail("fsync"); err != nil {
		return err
	}
	return f.File.Sync()
}

// brokenCluster is what startBroken started.
type brokenCluster struct {
	tc    *testCluster
	fss   []*brokenFS // each server's file system
	c     *client.Client
	st    topicStatus
	acked []string
}

// startBroken starts three servers (R=3, min-insync 2, then setup), each
// on a brokenFS for the files under a directory named topic, creates
// topic through a client of all three with opts, and produces n messages,
// acknowledged and held by all three in sync.
func startBroken(t *testing.T, ctx context.Context, topic string, n int, opts []client.Option, setup ...func(i int, cfg *server.Config)) brokenCluster {
	t.Helper()
	bc := brokenCluster{fss: make([]*brokenFS, 3)}
	bc.tc = startTestCluster(t, 3, 3, 2, append([]func(int, *server.Config){func(i int, cfg *server.Config) {
		bc.fss[i] = &brokenFS{dir: topic}
		cfg.Storage.FS = bc.fss[i]
	}}, setup...)...)
	bc.c = dialAll(t, bc.tc.addrs, opts...)
	if err := bc.c.CreateTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	producing(t, ctx, bc.c, topic, &bc.acked)(n)
	bc.st = waitTopic(t, dialOne(t, bc.tc.addrs[0]), topic, fmt.Sprintf("%d messages, three in sync", n), func(st topicStatus) bool {
		return st.Leader != "" && len(st.ISR) == 3 && st.HighWater == int64(n)
	})
	return bc
}

// TestClusterLeaderCopyFails: when a write to the leader's copy of a
// topic fails (EIO: the copy turns read-only), the leader hands the lead
// to an in-sync follower and leaves the in-sync set, so produces with
// acks=all go on within seconds, and it stays out (it copies nothing)
// until it restarts; then it catches up and is in sync again. Every
// acknowledged message is on every replica, once, in order; the client is
// idempotent, and its producer goes on past the batch that failed.
func TestClusterLeaderCopyFails(t *testing.T) {
	const topic = "disk"
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	bc := startBroken(t, ctx, topic, 100, []client.Option{client.WithIdempotence(true)})
	tc, fss, c, st, acked := bc.tc, bc.fss, bc.c, bc.st, bc.acked
	produce := producing(t, ctx, c, topic, &acked)
	old := st.Leader
	fss[tc.index(old)].broken.Store(true)
	began := time.Now()
	var refused []string
	for len(acked) < 200 {
		msg := fmt.Sprintf("m%05d", len(acked))
		if _, err := c.Produce(ctx, topic, []byte(msg)); err != nil {
			if ctx.Err() != nil {
				t.Fatalf("%d acknowledged after the leader's copy failed; the last error: %v", len(acked)-100, err)
			}
			if len(refused) < 10 {
				refused = append(refused, err.Error())
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if len(acked) == 100 {
			t.Logf("the first produce acknowledged %v after the leader's copy failed; refused before: %q", time.Since(began).Round(time.Millisecond), refused)
		}
		acked = append(acked, msg)
	}
	var live string
	for _, a := range tc.addrs {
		if a != old {
			live = a
		}
	}
	st = waitTopic(t, dialOne(t, live), topic, "the lead off the failed copy", func(st topicStatus) bool {
		return st.Leader != old && st.Leader != "" && st.HighWater == 200
	})
	// Out of the in-sync set, and staying out: the failed copy fetches
	// nothing, which would make it look caught up, fail to store what it
	// got, and hold acks=all until it left the set again.
	produce(100)
	type follower struct {
		ID   string `json:"id"`
		Next int64  `json:"next"`
	}
	type leaderView struct {
		Topics []struct {
			Name      string     `json:"name"`
			ISR       []string   `json:"isr"`
			Followers []follower `json:"followers"`
		} `json:"topics"`
	}
	lv := waitStatus(t, dialOne(t, st.Leader), "the new leader's view", func(lv leaderView) bool { return len(lv.Topics) == 1 })
	tv := lv.Topics[0]
	i := slices.IndexFunc(tv.Followers, func(f follower) bool { return f.ID == old })
	if slices.Contains(tv.ISR, old) || len(tv.ISR) != 2 || i < 0 || tv.Followers[i].Next != 0 {
		t.Fatalf("after 100 more, on the new leader: %+v, want %s out of a two-member in-sync set, never fetching", tv, old)
	}
	for _, a := range tc.addrs {
		if a != old {
			checkTopic(t, dialOne(t, a), topic, acked)
		}
	}
	i = tc.index(old)
	waitReadOnly(t, tc.cfgs[i].HTTPAddr, 1)
	if code, body := get(t, "http://"+tc.cfgs[i].HTTPAddr+"/readyz"); code != 503 || !strings.Contains(body, "read-only") {
		t.Fatalf("/readyz of the server whose copy failed: %d %q, want 503 saying read-only", code, body)
	}
	if ts := topicOf(t, dialOne(t, old), topic); !ts.ReadOnly {
		t.Fatalf("its cluster status: %+v, want its copy read-only", ts)
	}
	// A restart reopens the copy: it catches up and is in sync again.
	tc.stop(i)
	fss[i].broken.Store(false)
	tc.start(i)
	waitReadOnly(t, tc.cfgs[i].HTTPAddr, 0)
	produce(10)
	waitTopic(t, dialOne(t, live), topic, "the restarted server in sync again", func(st topicStatus) bool {
		return len(st.ISR) == 3 && st.HighWater == int64(len(acked))
	})
	for _, a := range tc.addrs {
		checkTopic(t, dialOne(t, a), topic, acked)
	}
}

// waitReadOnly waits up to 20 s until the server on httpAddr reports
// want topics read-only (haraqa_topics_read_only).
func waitReadOnly(t *testing.T, httpAddr string, want int) {
	t.Helper()
	waitMetric(t, httpAddr, fmt.Sprintf("haraqa_topics_read_only %d", want))
}

// waitMetric waits up to 20 s until the server on httpAddr's /metrics
// holds line.
func waitMetric(t *testing.T, httpAddr, line string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, body := get(t, "http://"+httpAddr+"/metrics")
		if slices.Contains(strings.Split(body, "\n"), line) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/metrics: no %q within 20 s", httpAddr, line)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClusterFollowerCopyFails: a follower whose copy of a topic turns
// read-only (EIO on its writes) closes its fetch connection, so that the
// leader drops it from the in-sync set at once: acks=all goes on with the
// other two, where it would otherwise wait for the lag time (a minute
// here, as the member timeout, so that nothing else can make the change).
// It fetches nothing until it restarts, then is in sync again.
func TestClusterFollowerCopyFails(t *testing.T) {
	const topic = "fdisk"
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	bc := startBroken(t, ctx, topic, 50, nil, noDetection)
	tc, fss, c, st, acked := bc.tc, bc.fss, bc.c, bc.st, bc.acked
	follower := st.ISR[1]
	i := tc.index(follower)
	fss[i].broken.Store(true)
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	producing(t, pctx, c, topic, &acked)(50)
	pcancel()
	st = waitTopic(t, dialOne(t, st.Leader), topic, "the failed follower out of the in-sync set", func(s topicStatus) bool {
		return len(s.ISR) == 2 && !slices.Contains(s.ISR, follower) && s.HighWater == 100
	})
	waitReadOnly(t, tc.cfgs[i].HTTPAddr, 1)
	for _, a := range tc.addrs {
		if a != follower {
			checkTopic(t, dialOne(t, a), topic, acked)
		}
	}
	tc.stop(i)
	fss[i].broken.Store(false)
	tc.start(i)
	producing(t, ctx, c, topic, &acked)(10)
	waitTopic(t, dialOne(t, st.Leader), topic, "the restarted follower in sync again", func(s topicStatus) bool {
		return len(s.ISR) == 3 && s.HighWater == int64(len(acked))
	})
	for _, a := range tc.addrs {
		checkTopic(t, dialOne(t, a), topic, acked)
	}
}
