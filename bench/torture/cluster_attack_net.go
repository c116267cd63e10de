package main

import (
	"context"
	"encoding/binary"
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
	"time"

	"github.com/haraqa/haraqa/broker/peer"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/client/admin"
	"github.com/haraqa/haraqa/protocol"
)

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
	// The server-to-server ops, as a member sends them (package peer).
	p, err := peer.Dial(ctx, f.s.addr, peer.Options{Token: token, DialTimeout: 2 * time.Second, RequestTimeout: 10 * time.Second})
	if err != nil {
		return 0, err
	}
	defer p.Close()
	var errs []error
	n := 0
	check := func(what string, err error) {
		if errors.Is(err, client.ErrForbidden) || errors.Is(err, client.ErrUnauthenticated) ||
			errors.Is(err, &protocol.Error{Code: protocol.CodeForbidden}) || errors.Is(err, &protocol.Error{Code: protocol.CodeUnauthenticated}) {
			n++
			return
		}
		errs = append(errs, fmt.Errorf("%s: %v, want forbidden", what, err))
	}
	_, err = p.LogEnds(ctx, []string{caVictimTopc})
	check("log ends", err)
	_, _, err = p.EpochEnd(ctx, caVictimTopc, 1)
	check("epoch end", err)
	_, err = p.ProducerOwners(ctx, caVictimTopc, []uint64{1})
	check("producer owners", err)
	_, err = p.ReplicaFetch(ctx, peer.ReplicaFetch{Topic: caVictimTopc, Follower: f.addr(), Epoch: 1})
	check("replica fetch", err)
	check("add member", admin.New(c).AddMember(ctx, "10.9.9.9:14353/4353/14355"))
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
