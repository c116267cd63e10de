package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/haraqa/haraqa/client"
)

// foGroupName is the group the failover phase's member reads the
// busiest topic in.
const foGroupName = "fo-workers"

// foGroup is one member of a consumer group reading the busiest topic
// through every kill: its GroupReader must keep its lease (the lease is
// the cluster's, not a leader's), read every offset once and in order
// (no gap, no rewind: a rewind would mean its commit or its lease was
// lost), and its last commit must be what the cluster holds at the end.
type foGroup struct {
	c  *client.Client
	gr *client.GroupReader

	mu        sync.Mutex
	next      int64 // the offset the member reads next
	gaps      int   // a response that did not start where the last ended
	rewinds   int
	committed int64 // the last commit acknowledged
	lost      error // the lease was lost, or a read failed
	commits   int
	commitErr map[string]int // failed commits by kind (asked again later)

	stop chan struct{}
	done chan struct{}
}

func startFoGroup(ctx context.Context, addrs string) (*foGroup, error) {
	c, err := client.Dial(ctx, addrs, client.WithDialTimeout(time.Second), client.WithRequestTimeout(foRequest))
	if err != nil {
		return nil, err
	}
	gr, err := c.NewGroupReader(foGroupName, foTopics[0])
	if err != nil {
		c.Close()
		return nil, err
	}
	g := &foGroup{c: c, gr: gr, committed: client.NoOffset, commitErr: map[string]int{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go g.run(ctx)
	return g, nil
}

// run reads and commits every 100 ms until stopped.
func (g *foGroup) run(ctx context.Context) {
	defer close(g.done)
	lastCommit := time.Now()
	for {
		select {
		case <-g.stop:
			return
		default:
		}
		rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		msgs, err := g.gr.Next(rctx)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			g.mu.Lock()
			g.lost = fmt.Errorf("at offset %d: %w", g.next, err)
			g.mu.Unlock()
			return
		}
		g.mu.Lock()
		if len(msgs) > 0 {
			switch first := msgs[0].Offset; {
			case first > g.next:
				g.gaps++
			case first < g.next:
				g.rewinds++
			}
			g.next = msgs[len(msgs)-1].Offset + 1
		}
		g.mu.Unlock()
		if time.Since(lastCommit) >= 100*time.Millisecond {
			g.commit(ctx)
			lastCommit = time.Now()
		}
	}
}

// commit commits what was read; a failure is counted and the next one
// commits it again.
func (g *foGroup) commit(ctx context.Context) {
	g.mu.Lock()
	next := g.next
	g.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, foRequest)
	err := g.gr.CommitTo(cctx, next)
	cancel()
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		g.commitErr[kind(err)]++
		return
	}
	g.commits++
	g.committed = next
}

// finish reads up to end, commits it, and stops the member.
func (g *foGroup) finish(ctx context.Context, end int64) error {
	deadline := time.Now().Add(foHealthyWait)
	for {
		g.mu.Lock()
		next, lost := g.next, g.lost
		g.mu.Unlock()
		if lost != nil || next >= end {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("group %s read up to %d of %d within %v", foGroupName, next, end, foHealthyWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(g.stop)
	<-g.done
	g.commit(ctx)
	return nil
}

// check compares the member's view with the cluster's at the end.
func (g *foGroup) check(ctx context.Context) (string, error) {
	defer g.c.Close()
	o, ferr := g.c.FetchOffset(ctx, foGroupName, foTopics[0])
	g.mu.Lock()
	defer g.mu.Unlock()
	line := fmt.Sprintf("group_read=%d group_commits=%d group_gaps=%d group_rewinds=%d", g.next, g.commits, g.gaps, g.rewinds)
	var problems []error
	if g.lost != nil {
		problems = append(problems, fmt.Errorf("the group's member stopped: %w", g.lost))
	}
	if g.gaps > 0 || g.rewinds > 0 {
		problems = append(problems, fmt.Errorf("the group's member read with %d gaps and %d rewinds", g.gaps, g.rewinds))
	}
	switch {
	case ferr != nil:
		problems = append(problems, fmt.Errorf("fetching the group's offset: %w", ferr))
	case o.Committed != g.committed:
		problems = append(problems, fmt.Errorf("the cluster holds the group's commit %d, its member's last was %d", o.Committed, g.committed))
	case o.Lease <= 0:
		problems = append(problems, errors.New("the member's lease is gone though it never released it"))
	}
	if len(g.commitErr) > 0 {
		line += fmt.Sprintf(" group_commit_retries=%v", g.commitErr)
	}
	if err := g.gr.Close(); err != nil {
		problems = append(problems, fmt.Errorf("closing the group's member: %w", err))
	}
	return line, errors.Join(problems...)
}

// foGroupEnd lets the member read the busiest topic to its end, then
// checks it.
func foGroupEnd(ctx context.Context, admin *client.Client, g *foGroup) (string, error) {
	ti, err := admin.TopicInfo(ctx, foTopics[0])
	if err != nil {
		return "", fmt.Errorf("the group's topic: %w", err)
	}
	if err := g.finish(ctx, ti.Next); err != nil {
		return "", err
	}
	return g.check(ctx)
}
