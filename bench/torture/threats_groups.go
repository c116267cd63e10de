package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// Rows 7, 14 and D: consumer groups.

const (
	leaseTopics      = 64
	leaseGroups      = 1024 // per topic: 65,536 leases in all
	leaseTTL         = 100  // ms
	groupsFileGroups = 1024 // groups of 255-byte names on the topic
	groupsFileCommit = 100  // commits measured
	groupsFileMax    = 16 << 10
	rightsTopic      = "shared.jobs"
	rightsGroup      = "v.workers"
)

// setupLeases creates the attacker's 64 topics.
func setupLeases(ctx context.Context, r *rowRun) (string, error) {
	c, err := r.rig.dial(ctx, r.rig.tok.attacker)
	if err != nil {
		return "attacker", err
	}
	defer c.Close()
	for i := range leaseTopics {
		if err := c.CreateTopic(ctx, fmt.Sprintf("a.l%02d", i)); err != nil && !errors.Is(err, client.ErrTopicExists) {
			return "create topics", err
		}
	}
	return fmt.Sprintf("%d attacker topics", leaseTopics), nil
}

// attackLeases: the attacker pipelines 65,536 leases of 100 ms over its 64
// topics; per-token group quotas and expired leases freeing their slot
// keep the victim's commit and lease working, during and after.
func attackLeases(ctx context.Context, r *rowRun) (string, error) {
	g := r.rig
	a, err := g.rawHello(attackerIP(r.id, 0), g.tok.attacker)
	if err != nil {
		return "attacker hello", err
	}
	defer a.Close()
	var req []byte
	for i := range leaseTopics * leaseGroups {
		req = protocol.AppendLeaseRequest(req, uint32(i), protocol.LeaseRequest{TTLMs: leaseTTL,
			Topic: fmt.Appendf(nil, "a.l%02d", i/leaseGroups), Group: fmt.Appendf(nil, "a.g%04d", i%leaseGroups), Member: []byte("m")})
	}
	begun := time.Now()
	go func() { _, _ = a.Write(req) }()
	_ = a.SetReadDeadline(time.Now().Add(30 * time.Second))
	codes := map[protocol.Code]int{}
	for range leaseTopics * leaseGroups {
		code, _, err := readResponse(a)
		if err != nil {
			return "read lease answers", err
		}
		codes[code]++
	}
	took := time.Since(begun)
	during := victimGroupOps(ctx, g, "v.g7a")
	time.Sleep(2 * leaseTTL * time.Millisecond)
	after := victimGroupOps(ctx, g, "v.g7b")
	line := fmt.Sprintf("%d leases of %d ms over %d topics in %s: %d granted, %d refused (limit); victim commit and lease: %s, after every lease expired: %s",
		leaseTopics*leaseGroups, leaseTTL, leaseTopics, took.Round(time.Millisecond), codes[protocol.CodeOK], codes[protocol.CodeLimitReached],
		errText(during), errText(after))
	return line, errors.Join(during, after)
}

// victimGroupOps commits and takes a lease on group of the victim's row 7
// topic.
func victimGroupOps(ctx context.Context, g *threatRig, group string) error {
	if err := g.victim.check.CommitOffset(ctx, group, "v.r7", 0); err != nil {
		return fmt.Errorf("commit %s: %w", group, err)
	}
	v, err := g.rawHello("127.0.0.1", g.tok.victim)
	if err != nil {
		return err
	}
	defer v.Close()
	return leaseCode(v, "v.r7", group, "v-m", protocol.CodeOK)
}

// leaseCode takes the lease of group on topic for member and fails unless
// the answer is want.
func leaseCode(c *raw2, topic, group, member string, want protocol.Code) error {
	code, p, err := c.do(func(id uint32) []byte {
		return protocol.AppendLeaseRequest(nil, id, protocol.LeaseRequest{TTLMs: 10_000,
			Topic: []byte(topic), Group: []byte(group), Member: []byte(member)})
	})
	if err == nil && code != want {
		msg, _ := protocol.ParseErrorResponse(p)
		err = fmt.Errorf("lease %s on %s: code %d (%s), want %d", group, topic, code, msg, want)
	}
	return err
}

// groupsFileName is the i-th 255-byte group name of row 14.
func groupsFileName(i int) string {
	s := "a." + strconv.Itoa(10000+i) + "-"
	return s + strings.Repeat("g", 255-len(s))
}

// setupGroupsFile commits 256 groups of 255-byte names on the attacker's topic.
func setupGroupsFile(ctx context.Context, r *rowRun) (string, error) {
	c, err := r.rig.dial(ctx, r.rig.tok.attacker)
	if err != nil {
		return "attacker", err
	}
	defer c.Close()
	if _, err := c.Produce(ctx, "a.g14", []byte("one")); err != nil {
		return "produce a.g14", err
	}
	for i := range groupsFileGroups {
		if err := c.CommitOffset(ctx, groupsFileName(i), "a.g14", 1); err != nil {
			return "commit " + strconv.Itoa(i), err
		}
	}
	return fmt.Sprintf("%d groups of 255-byte names on a.g14", groupsFileGroups), nil
}

// attackGroupsFile: commits on a topic with 256 groups of 255-byte names
// and 3 volumes write about one commit's bytes, not the whole groups
// file (written bytes from /proc/<pid>/io, the victim paused meanwhile).
func attackGroupsFile(ctx context.Context, r *rowRun) (string, error) {
	g := r.rig
	c, err := g.dial(ctx, g.tok.attacker)
	if err != nil {
		return "attacker", err
	}
	defer c.Close()
	// The victim's writes would count in the server's wchar: paused.
	if err := g.victim.pause(); err != nil {
		return "victim", err
	}
	w0 := wchar(g.srv.pid())
	for i := range groupsFileCommit {
		if err := c.CommitOffset(ctx, groupsFileName(0), "a.g14", int64(i%2)); err != nil {
			return "commit", errors.Join(err, g.victim.resume())
		}
	}
	per := (wchar(g.srv.pid()) - w0) / groupsFileCommit
	if err := g.victim.resume(); err != nil {
		return "victim", err
	}
	n := 0
	for ; !r.stopped(); n++ {
		if err := c.CommitOffset(ctx, groupsFileName(n%groupsFileGroups), "a.g14", int64(n%2)); err != nil {
			return "commit", err
		}
	}
	line := fmt.Sprintf("a %d-byte commit on a topic with %d groups of 255-byte names, %d volumes, writes %d KiB; then %d commits in the attack",
		len(groupsFileName(0))+40, groupsFileGroups, len(g.spec.volumes), per>>10, n)
	if per > groupsFileMax {
		return line, fmt.Errorf("a commit writes %d KiB, over %d KiB: the groups file is rewritten whole", per>>10, groupsFileMax>>10)
	}
	return line, nil
}

// wchar is the bytes the process has passed to write calls.
func wchar(pid int) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// attackGroupRights: the attacker, with consume on the shared topic but no right
// on the victim's group names, tries to reset, delete and lease the
// victim's group; each is refused (code 19), the victim's offset stays
// and its lease is free for it.
func attackGroupRights(ctx context.Context, r *rowRun) (string, error) {
	g := r.rig
	vc := g.victim.check
	for i := range 10 {
		if _, err := vc.Produce(ctx, rightsTopic, []byte("job "+strconv.Itoa(i))); err != nil {
			return "victim produce", err
		}
	}
	if err := vc.CommitOffset(ctx, rightsGroup, rightsTopic, 5); err != nil {
		return "victim commit", err
	}
	a, err := g.rawHello(attackerIP(r.id, 0), g.tok.shared)
	if err != nil {
		return "attacker hello", err
	}
	defer a.Close()
	commit, _, err1 := a.do(func(id uint32) []byte {
		return protocol.AppendCommitRequest(nil, id, protocol.CommitRequest{Offset: 0, Topic: []byte(rightsTopic), Group: []byte(rightsGroup)})
	})
	del, _, err2 := a.do(func(id uint32) []byte {
		return protocol.AppendGroupRequest(nil, protocol.OpDeleteGroup, id, rightsTopic, rightsGroup)
	})
	lease := leaseCode(a, rightsTopic, rightsGroup, "a-m", protocol.CodeForbidden)
	o, ferr := vc.FetchOffset(ctx, rightsGroup, rightsTopic)
	v, err := g.rawHello("127.0.0.1", g.tok.victim)
	if err != nil {
		return "victim hello", err
	}
	defer v.Close()
	vlease := leaseCode(v, rightsTopic, rightsGroup, "v-m", protocol.CodeOK)
	r.wait()
	line := fmt.Sprintf("attacker on %s's group %s: commit code %d, delete code %d, lease: %s; victim's committed offset %d (was 5), its lease: %s",
		rightsTopic, rightsGroup, commit, del, errText(lease), o.Committed, errText(vlease))
	errs := []error{err1, err2, ferr, lease, vlease}
	if commit != protocol.CodeForbidden || del != protocol.CodeForbidden {
		errs = append(errs, fmt.Errorf("the attacker's commit (code %d) or delete (code %d) of the victim's group was not refused with code %d", commit, del, protocol.CodeForbidden))
	}
	if o.Committed != 5 {
		errs = append(errs, fmt.Errorf("the victim's committed offset is %d, not 5", o.Committed))
	}
	return line, errors.Join(errs...)
}
