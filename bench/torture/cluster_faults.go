package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/haraqa/haraqa/client"
)

// The cluster-faults phase: three server processes as one cluster (the
// failover phase's, -replicas 3 -min-insync 2), producers of four kinds
// writing three topics throughout, and faults beyond a plain kill -9:
//
//   - a leader killed, its topic's last segment cut to 60% of its size,
//     restarted at once (before -member-timeout); and all three killed,
//     the leader's last segment cut, the leader restarted first;
//   - a follower killed, 64 bytes in the middle of one of its sealed
//     segments flipped, restarted; then the leader killed, so that the
//     damaged copy could be elected;
//   - a leader frozen 8 s (SIGSTOP, SIGCONT) under an HTTP producer and a
//     Go client without idempotence (neither sends a batch again once its
//     outcome is unknown) and an idempotent client.Producer;
//   - leader kills under client.Producers with batches in flight.
//
// A reader follows each topic on one server throughout. At the end every
// topic is read from every server's segment files (the whole log) and
// over the binary protocol, and compared with the producers' ledgers,
// the readers' records and the leader's copy. It prints
//
//	cluster-faults ok acked=N lost=0 dups=0 nonidem_dups=0 reordered=0 divergent=0 replaced_reads=0 max_unavailable_ms=M frozen_gap_ms=F
//
// or "cluster-faults FAIL ..." with the same fields and a line per check
// that failed.

// cfTopics: the first takes the kills and the damaged segments, the
// second carries non-idempotent producers through them, the third's
// leader is frozen.
var cfTopics = []string{"cf-a", "cf-b", "cf-f"}

const (
	// cfHealthyWait bounds the wait, before each fault, for every topic
	// to have a leader and all its replicas in sync; a cluster that does
	// not get there is noted and the plan goes on.
	cfHealthyWait = 20 * time.Second
	// cfProgress is how many acknowledgements each fault waits for
	// first, within cfProgressWait.
	cfProgress     = 5000
	cfProgressWait = 20 * time.Second
	// cfWarmUp is the time producers run before the first fault; the
	// ledger is checked against the cluster then, as a check of the
	// check.
	cfWarmUp = 6 * time.Second
	// cfBetween is how long the producers run between two faults, once
	// the cluster is healthy again.
	cfBetween = 7 * time.Second
	// cfFreeze is how long a leader is stopped.
	cfFreeze = 8 * time.Second
	// cfBudget: steps not begun by then are skipped, so the phase ends
	// within about five minutes.
	cfBudget = 170 * time.Second
	// cfCutTo is the part of a segment kept when it is cut short (60%).
	cfCutNum, cfCutDen = 6, 10
	// cfFlip is how many bytes of a follower's segment are flipped.
	cfFlip = 64

	cfMinAcked       = 100000
	cfMaxUnavailable = 10 * time.Second
	cfMaxFrozenGap   = 4 * time.Second
)

// cfRun is one run of the phase.
type cfRun struct {
	e       *env
	c       *foCluster
	ps      *cfProds
	events  []foEvent
	freezes []time.Time // each SIGSTOP
	notes   []string    // what went otherwise than planned
}

func (r *cfRun) note(format string, args ...any) {
	n := fmt.Sprintf(format, args...)
	r.notes = append(r.notes, n)
	fmt.Printf("  %s %s\n", time.Now().Format("15:04:05.000"), n)
}

// event records a fault, and prints it as it happens.
func (r *cfRun) event(what, format string, args ...any) {
	ev := foEvent{time.Now(), what, fmt.Sprintf(format, args...)}
	r.events = append(r.events, ev)
	fmt.Printf("  %s %s\n", ev.at.Format("15:04:05.000"), ev.detail)
}

func runClusterFaults(ctx context.Context, e *env) (string, error) {
	begun := time.Now()
	c, err := newClusterIn(e, "cluster-faults")
	defer func() {
		for _, f := range c.servers {
			if f != nil && f.s != nil && f.s.alive() {
				_ = f.s.cmd.Process.Signal(syscall.SIGCONT)
				f.s.kill()
			}
		}
	}()
	if err != nil {
		return "start", err
	}
	r := &cfRun{e: e, c: c}
	readers, stage, err := r.start(ctx)
	defer func() {
		for _, rd := range readers {
			rd.end()
		}
	}()
	if err != nil {
		return stage, err
	}
	defer r.ps.finish()

	time.Sleep(cfWarmUp)
	warm := r.warmUpCheck(ctx)
	fmt.Println(warm)
	done, total, fatal := r.steps(ctx, begun)
	return r.report(ctx, readers, warm, fatal, done, total)
}

// start creates the phase's topics, waits for a healthy cluster and
// starts a reader per topic and the producers (r.ps). On failure it
// returns the stage that failed.
func (r *cfRun) start(ctx context.Context) (readers []*cfReader, stage string, err error) {
	c := r.c
	all := strings.Join(c.addrs(), ",")
	admin, err := client.Dial(ctx, all, client.WithDialTimeout(time.Second), client.WithRequestTimeout(10*time.Second))
	if err != nil {
		return nil, "dial", err
	}
	defer admin.Close()
	for _, t := range cfTopics {
		if err := retry(ctx, 30*time.Second, func() error { return admin.CreateTopic(ctx, t) }); err != nil && !errors.Is(err, client.ErrTopicExists) {
			return nil, "create topics", err
		}
	}
	if err := clusterHealthy(ctx, c.servers, len(cfTopics), cfHealthyWait, false); err != nil {
		return nil, "start", err
	}
	readers = make([]*cfReader, len(cfTopics))
	for i, t := range cfTopics {
		readers[i] = startCfReader(ctx, c.servers[i%len(c.servers)].addr(), t)
	}
	webs := make([]string, len(c.servers))
	for i, f := range c.servers {
		webs[i] = fmt.Sprintf("127.0.0.1:%d", f.web)
	}
	if r.ps, err = startCfProds(ctx, all, webs, cfTopics); err != nil {
		return readers, "producers", err
	}
	return readers, "", nil
}

// steps injects the faults one after another, each once the cluster is
// ready (ready), until the phase's budget is spent. It returns the steps
// done, of how many, and the failure that stopped them, if any.
func (r *cfRun) steps(ctx context.Context, begun time.Time) (done, total int, fatal error) {
	a, f := cfTopics[0], cfTopics[2]
	steps := []struct {
		name string
		do   func(ctx context.Context) error
	}{
		{"cut leader", func(ctx context.Context) error { return r.cutLeader(ctx, a) }},
		{"kill leader", func(ctx context.Context) error { return r.killLeader(ctx, a) }},
		{"damage follower", func(ctx context.Context) error { return r.damageFollower(ctx, a) }},
		{"freeze leader", func(ctx context.Context) error { return r.freezeLeader(ctx, f) }},
		{"kill leader", func(ctx context.Context) error { return r.killLeader(ctx, a) }},
		{"cut leader, all killed", func(ctx context.Context) error { return r.cutAll(ctx, a) }},
		{"kill leader", func(ctx context.Context) error { return r.killLeader(ctx, a) }},
		{"freeze leader", func(ctx context.Context) error { return r.freezeLeader(ctx, f) }},
		{"kill leader", func(ctx context.Context) error { return r.killLeader(ctx, a) }},
		{"cut leader", func(ctx context.Context) error { return r.cutLeader(ctx, a) }},
	}
	for i, s := range steps {
		if time.Since(begun) > cfBudget {
			r.note("steps %d-%d skipped: the phase's budget of %v is spent", i, len(steps)-1, cfBudget)
			break
		}
		r.ready(ctx, s.name)
		if fatal = s.do(ctx); fatal != nil {
			r.note("step %d (%s): %v", i, s.name, fatal)
			break
		}
		done++
	}
	return done, len(steps), fatal
}

// report stops the producers and readers, checks every copy, prints the
// verdict line and what explains it, stops the servers and returns the
// phase's summary and error.
func (r *cfRun) report(ctx context.Context, readers []*cfReader, warm string, fatal error, done, total int) (string, error) {
	c := r.c
	if err := r.ps.progress(ctx, cfProgress, cfProgressWait); err != nil {
		r.note("after the last step: %v", err)
	}
	if err := r.ps.finish(); err != nil {
		r.note("closing the producers: %v", err)
	}
	if err := clusterHealthy(ctx, c.servers, len(cfTopics), cfHealthyWait, true); err != nil {
		r.note("at the end: %v", err)
	}
	reads := make([]map[int64]uint64, len(readers))
	for i, rd := range readers {
		reads[i] = rd.end()
		fmt.Printf("  reader %v\n", rd)
	}
	counts, checkNotes := r.check(ctx, reads)
	line, verr := r.verdict(counts, warm, fatal)
	fmt.Println(line)
	for _, n := range checkNotes {
		fmt.Println("  " + n)
	}
	fmt.Println(r.longGaps())
	fmt.Printf("cluster-faults producers:%s\n", r.ps.summary())
	for i, f := range c.servers {
		if f.s.alive() {
			if err := f.s.stop(); err != nil {
				fmt.Printf("  server %d: %v\n", i, err)
			}
		}
	}
	detail := strings.TrimPrefix(strings.TrimPrefix(line, "cluster-faults ok "), "cluster-faults FAIL ") +
		fmt.Sprintf("; %d of %d fault steps done", done, total)
	return detail, verr
}

// ready waits, bounded, for a healthy cluster and for the producers to
// make progress before a step, then lets them run cfBetween; what does
// not come is noted.
func (r *cfRun) ready(ctx context.Context, step string) {
	if err := clusterHealthy(ctx, r.c.servers, len(cfTopics), cfHealthyWait, false); err != nil {
		r.note("before %s: %v", step, err)
	}
	if err := r.ps.progress(ctx, cfProgress, cfProgressWait); err != nil {
		r.note("before %s: %v", step, err)
	}
	time.Sleep(cfBetween)
}

// leaderOf returns the index of topic's leader, waiting a little while
// none is known.
func (r *cfRun) leaderOf(ctx context.Context, topic string) (int, error) {
	var last string
	deadline := time.Now().Add(cfHealthyWait)
	for time.Now().Before(deadline) {
		st, err := foStatusOf(ctx, r.c.servers)
		if err != nil {
			last = err.Error()
		}
		for _, t := range st.Topics {
			if t.Name != topic {
				continue
			}
			last = fmt.Sprintf("%s led by %q", topic, t.Leader)
			if i := slices.IndexFunc(r.c.servers, func(f *foServer) bool { return f.addr() == t.Leader }); i >= 0 {
				return i, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return -1, fmt.Errorf("no leader of %s within %v: %s", topic, cfHealthyWait, last)
}

// segments returns the paths of topic's segment logs on server i, in
// offset order.
func (r *cfRun) segments(i int, topic string) ([]string, error) {
	dir := filepath.Join(r.c.servers[i].vol, "topics", topic)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return nil, fmt.Errorf("no segment in %s", dir)
	}
	return out, nil
}

// cut cuts topic's last segment on server i (stopped) to cfCutNum/cfCutDen
// of its size and says what it did.
func (r *cfRun) cut(i int, topic string) (string, error) {
	segs, err := r.segments(i, topic)
	if err != nil {
		return "", err
	}
	last := segs[len(segs)-1]
	st, err := os.Stat(last)
	if err != nil {
		return "", err
	}
	to := st.Size() * cfCutNum / cfCutDen
	if err := os.Truncate(last, to); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s cut from %d to %d bytes", filepath.Base(last), st.Size(), to), nil
}

// cutLeader kills topic's leader, cuts its last segment short and
// restarts it at once, before the cluster takes it as gone.
func (r *cfRun) cutLeader(ctx context.Context, topic string) error {
	li, err := r.leaderOf(ctx, topic)
	if err != nil {
		return err
	}
	r.c.servers[li].s.kill()
	at := time.Now()
	what, err := r.cut(li, topic)
	if err != nil {
		return err
	}
	if err := r.c.start(li); err != nil {
		return err
	}
	r.event("cut", "cut leader: %s's leader s%d killed, %s, serving again %v later", topic, li, what, time.Since(at).Round(time.Millisecond))
	return nil
}

// cutAll kills all three servers, cuts the last segment of topic on its
// leader, restarts the leader first and then the other two.
func (r *cfRun) cutAll(ctx context.Context, topic string) error {
	li, err := r.leaderOf(ctx, topic)
	if err != nil {
		return err
	}
	r.c.servers[li].s.kill()
	for i, f := range r.c.servers {
		if i != li {
			f.s.kill()
		}
	}
	at := time.Now()
	what, err := r.cut(li, topic)
	if err != nil {
		return err
	}
	// The leader alone is no Raft majority: its start may wait for the
	// others, so they follow it after its start or 2 s.
	started := make(chan error, 1)
	go func() { started <- r.c.start(li) }()
	var lerr error
	select {
	case lerr = <-started:
		started = nil
	case <-time.After(2 * time.Second):
	}
	if lerr != nil {
		return lerr
	}
	after := time.Since(at)
	var errs []error
	for i := range r.c.servers {
		if i != li {
			errs = append(errs, r.c.start(i))
		}
	}
	if started != nil {
		errs = append(errs, <-started)
	}
	r.event("cut", "cut all: all three killed, %s's leader s%d's %s, it restarted first, the others %v later", topic, li, what, after.Round(time.Millisecond))
	return errors.Join(errs...)
}

// killLeader kills topic's leader and restarts it after a random pause
// of 0.2-3 s (some end before -member-timeout, 1.5 s).
func (r *cfRun) killLeader(ctx context.Context, topic string) error {
	li, err := r.leaderOf(ctx, topic)
	if err != nil {
		return err
	}
	pause := 200*time.Millisecond + time.Duration(r.e.rnd.Int64N(int64(2800*time.Millisecond)))
	r.c.servers[li].s.kill()
	r.event("leader", "kill leader: %s's leader s%d killed, restarted after %v", topic, li, pause.Round(time.Millisecond))
	time.Sleep(pause)
	return r.c.start(li)
}

// damageFollower kills a follower of topic, flips cfFlip bytes in the
// middle of one of its sealed segments, restarts it, waits (bounded) for
// it to be in sync, and kills the leader for 2.5 s, so that the damaged
// copy could be elected.
func (r *cfRun) damageFollower(ctx context.Context, topic string) error {
	li, err := r.leaderOf(ctx, topic)
	if err != nil {
		return err
	}
	fi := (li + 1 + r.e.rnd.IntN(len(r.c.servers)-1)) % len(r.c.servers)
	r.c.servers[fi].s.kill()
	segs, err := r.segments(fi, topic)
	if err != nil {
		return err
	}
	seg := segs[0]
	if len(segs) > 1 {
		seg = segs[r.e.rnd.IntN(len(segs)-1)] // not the last
	}
	what, err := cfFlipMiddle(seg, cfFlip)
	if err != nil {
		return err
	}
	if err := r.c.start(fi); err != nil {
		return err
	}
	r.event("damage", "damage follower: %s's follower s%d killed, %s of %s flipped (of %d segments), restarted", topic, fi, what, filepath.Base(seg), len(segs))
	r.ready(ctx, "the kill of the leader after the damage")
	li, err = r.leaderOf(ctx, topic)
	if err != nil {
		return err
	}
	if li == fi {
		r.note("the damaged follower s%d leads %s before its leader's kill", fi, topic)
		return nil
	}
	r.c.servers[li].s.kill()
	r.event("leader", "kill leader after the damage: %s's leader s%d killed, restarted after 2.5 s", topic, li)
	time.Sleep(2500 * time.Millisecond)
	if err := r.c.start(li); err != nil {
		return err
	}
	if ni, err := r.leaderOf(ctx, topic); err == nil {
		r.event("damage", "after the kill %s is led by s%d (the damaged copy: %v)", topic, ni, ni == fi)
	}
	return nil
}

// cfFlipMiddle flips n bytes in the middle of the file at path.
func cfFlipMiddle(path string, n int) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if len(b) < 2*n {
		return "", fmt.Errorf("%s: %d bytes, too short to damage", path, len(b))
	}
	at := len(b)/2 - n/2
	for i := at; i < at+n; i++ {
		b[i] ^= 0xff
	}
	fh, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return "", err
	}
	_, err = fh.WriteAt(b[at:at+n], int64(at))
	return fmt.Sprintf("bytes %d-%d of %d", at, at+n-1, len(b)), errors.Join(err, fh.Close())
}

// freezeLeader stops topic's leader with SIGSTOP for cfFreeze, then
// SIGCONT.
func (r *cfRun) freezeLeader(ctx context.Context, topic string) error {
	li, err := r.leaderOf(ctx, topic)
	if err != nil {
		return err
	}
	s := r.c.servers[li].s
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	at := time.Now()
	r.freezes = append(r.freezes, at)
	r.event("freeze", "freeze leader: %s's leader s%d stopped (SIGSTOP) for %v", topic, li, cfFreeze)
	time.Sleep(cfFreeze)
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	r.event("freeze", "freeze leader: s%d continued (SIGCONT)", li)
	return nil
}

// frozenGap is, over every freeze and every producer of the frozen topic,
// the longest time from the SIGSTOP to the producer's first
// acknowledgement after it.
func (r *cfRun) frozenGap() time.Duration {
	var g time.Duration
	for _, at := range r.freezes {
		for _, p := range r.ps.p {
			if p.topic == cfTopics[2] {
				g = max(g, p.firstAckAfter(at))
			}
		}
	}
	return g
}

// ledgers copies the producers' ledgers of topic.
func (r *cfRun) ledgers(topic string) []cfLedger {
	var out []cfLedger
	for _, p := range r.ps.p {
		if p.topic != topic {
			continue
		}
		p.mu.Lock()
		l := cfLedger{id: p.id, idem: p.kind.idempotent(), acks: make(map[int]int64, len(p.acks))}
		for k, v := range p.acks {
			l.acks[k] = v
		}
		p.mu.Unlock()
		out = append(out, l)
	}
	return out
}

// warmUpCheck checks the ledgers so far against each topic's leader
// before any fault, while the producers write: nothing acknowledged may
// be missing, nothing stored twice or out of order. A failure here is
// the harness's or a fault of the plain path, not of the faults.
func (r *cfRun) warmUpCheck(ctx context.Context) string {
	var total cfCounts
	var notes []string
	acked := r.ps.acked.Load()
	for _, t := range cfTopics {
		ledgers := r.ledgers(t)
		li, err := r.leaderOf(ctx, t)
		if err != nil {
			notes = append(notes, err.Error())
			continue
		}
		served := cfLogServed(ctx, r.c.servers[li].addr(), t)
		n, ns := cfCheckTopic(t, served, nil, ledgers, nil)
		total.add(n)
		notes = append(notes, ns...)
	}
	res := "ok"
	if total.lost+total.dups+total.nonidemDups+total.reordered+total.foreign > 0 || len(notes) > 0 {
		res = "FAIL"
	}
	line := fmt.Sprintf("cluster-faults warm-up (no fault) %s: %d acknowledged, lost %d, dups %d, nonidem dups %d, reordered %d, foreign %d",
		res, acked, total.lost, total.dups, total.nonidemDups, total.reordered, total.foreign)
	if len(notes) > 0 {
		line += "\n  " + strings.Join(notes, "\n  ")
	}
	return line
}

// check reads every topic from every server and counts.
func (r *cfRun) check(ctx context.Context, reads []map[int64]uint64) (cfCounts, []string) {
	var total cfCounts
	var notes []string
	for ti, t := range cfTopics {
		li, err := r.leaderOf(ctx, t)
		if err != nil {
			notes = append(notes, err.Error()+"; server 0's copy taken as the leader's")
			li = 0
		}
		var leader cfLog
		var copies []cfLog
		for i, f := range r.c.servers {
			files := cfLogFiles(f.vol, t)
			files.server = fmt.Sprintf("s%d's files", i)
			served := cfLogServed(ctx, f.addr(), t)
			served.server = fmt.Sprintf("s%d as served", i)
			if i == li {
				leader = files
			} else {
				copies = append(copies, files)
			}
			copies = append(copies, served)
		}
		n, ns := cfCheckTopic(t, leader, copies, r.ledgers(t), reads[ti:ti+1])
		total.add(n)
		notes = append(notes, ns...)
	}
	return total, notes
}

// verdict is the phase's line, and the error that fails it.
func (r *cfRun) verdict(n cfCounts, warm string, fatal error) (string, error) {
	acked := r.ps.acked.Load()
	maxGap, frozen := r.ps.maxGap(), r.frozenGap()
	var why []string
	if fatal != nil {
		why = append(why, fmt.Sprintf("the plan stopped: %v", fatal))
	}
	if strings.Contains(warm, " FAIL") {
		why = append(why, "the warm-up check, before any fault, failed")
	}
	for _, c := range []struct {
		name string
		v    int
		what string
	}{
		{"lost", n.lost, fmt.Sprintf("acknowledged messages not at their offsets in the leader's log (%d of them elsewhere)", n.misplaced)},
		{"dups", n.dups, "messages of idempotent producers stored twice"},
		{"nonidem_dups", n.nonidemDups, "messages of non-idempotent producers stored twice (none was sent twice)"},
		{"reordered", n.reordered, "messages stored before an earlier-sent one of the same producer"},
		{"divergent", n.divergent, "copies (files or served) that differ from the leader's"},
		{"replaced_reads", n.replaced, "offsets a reader read that now hold another message, or none"},
		{"foreign", n.foreign, "messages no producer sent (damaged bytes served as messages)"},
	} {
		if c.v > 0 {
			why = append(why, fmt.Sprintf("%s=%d: %s", c.name, c.v, c.what))
		}
	}
	if acked < cfMinAcked {
		why = append(why, fmt.Sprintf("acked=%d, under %d", acked, cfMinAcked))
	}
	if maxGap > cfMaxUnavailable {
		why = append(why, fmt.Sprintf("max_unavailable_ms=%d, over %d: a producer went that long without an acknowledgement (frozen windows included)", maxGap.Milliseconds(), cfMaxUnavailable.Milliseconds()))
	}
	if frozen > cfMaxFrozenGap {
		why = append(why, fmt.Sprintf("frozen_gap_ms=%d, over %d: a producer of %s went that long from a SIGSTOP of its leader to its next acknowledgement", frozen.Milliseconds(), cfMaxFrozenGap.Milliseconds(), cfTopics[2]))
	}
	res := "ok"
	if len(why) > 0 {
		res = "FAIL"
	}
	line := fmt.Sprintf("cluster-faults %s acked=%d lost=%d dups=%d nonidem_dups=%d reordered=%d divergent=%d replaced_reads=%d max_unavailable_ms=%d frozen_gap_ms=%d",
		res, acked, n.lost, n.dups, n.nonidemDups, n.reordered, n.divergent, n.replaced, maxGap.Milliseconds(), frozen.Milliseconds())
	if res == "ok" {
		return line, nil
	}
	line += "\n  " + strings.Join(why, "\n  ")
	return line, fmt.Errorf("%d checks failed (listed under the cluster-faults line)", len(why))
}

// longGaps lists each producer's gaps of foReportGap or more, longest
// first, each with the last fault made before it began (or within its
// first foKillSlack).
func (r *cfRun) longGaps() string {
	type long struct {
		p    *cfProd
		g    foGap
		last string
	}
	var ls []long
	for _, p := range r.ps.p {
		p.mu.Lock()
		for _, g := range p.gaps {
			if g.d < foReportGap {
				continue
			}
			l := long{p: p, g: g, last: "before any fault"}
			for _, ev := range r.events {
				if ev.at.Before(g.from.Add(foKillSlack)) {
					l.last = fmt.Sprintf("%v after: %s", g.from.Sub(ev.at).Round(time.Millisecond), ev.detail)
				}
			}
			ls = append(ls, l)
		}
		p.mu.Unlock()
	}
	slices.SortFunc(ls, func(a, b long) int { return int(b.g.d - a.g.d) })
	var b strings.Builder
	fmt.Fprintf(&b, "cluster-faults gaps of %v or more without an acknowledgement: %d", foReportGap, len(ls))
	for _, l := range ls[:min(len(ls), 12)] {
		fmt.Fprintf(&b, "\n  P%d %s on %s: %v, from %s", l.p.id, l.p.kind, l.p.topic, l.g.d.Round(time.Millisecond), l.last)
	}
	return b.String()
}
