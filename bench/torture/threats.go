package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// The threats phase runs each row of the second security review's
// threat table (1-16 and D) against a server with -auth-file: several
// tenants' tokens, a victim on 127.0.0.1 producing one message at a time
// and attackers bound to 127.0.<row>.2 and up, so that a per-address cap
// tells them apart from the victim and from each other. Every row prints
// one line with its figure; a row fails when the server's peak RSS reaches
// -memory-limit, when the victim's produce p99 under the attack is more
// than threatFactor times its idle p99 in the same run, when a victim message
// is lost or stored twice, or when the row's own check fails.
//
// The idle p99 is that of every row's idle window together (2 s before
// each row, about 1,400 samples each): one window's p99 rests on its 14
// slowest produces, and on a virtual machine those are whatever the host
// did in that window (a vCPU that was idle takes 1-3 ms to run a woken
// thread; the host's memory monitor runs 1-7 ms every half second), so
// one 3 s window's idle p99 ranged 0.45-2.1 ms between rows of one run under
// no attack at all. Each row's line still shows its own idle p99.

var (
	threatRows   = flag.String("threat-rows", "", "threats: rows to run, comma-separated (default all): 1,...,16,D, and 1t (row 1 over TLS)")
	threatAttack = flag.Duration("threat-attack", 3*time.Second, "threats: attack duration of each row, and the shortest window the victim is measured under it")
	threatIdle   = flag.Duration("threat-idle", 2*time.Second, "threats: the victim's idle window before each row")
	threatFactor = flag.Float64("threat-p99-factor", 3, "threats: victim p99 under attack allowed, in multiples of its idle p99")
)

const (
	threatBudget   = 256 << 20 // -max-buffered-bytes
	threatMemLimit = 448 << 20 // -memory-limit: the budget, a quarter of it and 128 MiB, as the default derives it
	threatMaxConns = 200       // -max-conns of the main server (row 10)
)

// threatRow is one row of the threat table: rig names the server it runs on
// ("main", "fd", "tls", or "" for a row that starts its own).
type threatRow struct {
	id    string
	rig   string
	run   func(ctx context.Context, r *rowRun) (string, error)
	setup func(ctx context.Context, r *rowRun) (string, error) // before the idle window; nil: none
}

// threatTable in the order they run: rows on the main server first, row 11's
// topics and row 7's leases (which, unfixed, fill every group slot) last
// among them, then the rows needing another server.
var threatTable = []threatRow{
	{"1", "main", attackPreHelloFrames, nil},
	{"2", "main", attackZstdBombs, nil},
	{"3", "main", attackForgedProducer, nil},
	{"4", "main", attackRateLimit, nil},
	{"8", "main", attackHTTPMemory, nil},
	{"9", "main", attackWatches, nil},
	{"10", "main", attackSlots, nil},
	{"12", "main", attackCORS, nil},
	{"13", "main", attackMetricsPprof, nil},
	{"14", "main", attackGroupsFile, setupGroupsFile},
	{"15", "main", attackImportWrap, nil},
	{"D", "main", attackGroupRights, nil},
	{"11", "main", attackMetrics, setupMetricsTopics},
	{"7", "main", attackLeases, setupLeases},
	{"5", "fd", attackHTTPDescriptors, nil},
	{"6", "tls", attackTLSDescriptors, nil},
	{"1t", "tls", attackPreHelloFrames, nil}, // row 1 over TLS
	{"16", "", attackSighup, nil},
}

// rowLonger gives the rows whose attack needs longer than -threat-attack their
// multiple of it: row 8's GETs each decompress 64 MiB before answering.
var rowLonger = map[string]time.Duration{"8": 2}

// rowRun is what a row's attack gets: its rig, how long to attack, and
// stop, closed once the attack time is over or the server's RSS reached
// the limit.
type rowRun struct {
	e     *env
	rig   *threatRig
	id    string
	d     time.Duration
	stop  chan struct{}
	once  sync.Once
	begun time.Time
	idle  *victimLat // the victim's latencies before the attack
}

// stopped reports whether the attack should end.
func (r *rowRun) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// wait blocks until the attack should end.
func (r *rowRun) wait() { <-r.stop }

func (r *rowRun) end() { r.once.Do(func() { close(r.stop) }) }

// runThreats runs the selected rows and fails if any failed.
func runThreats(ctx context.Context, e *env) (string, error) {
	rigs := map[string]*threatRig{}
	defer func() {
		for _, g := range rigs {
			g.close()
		}
	}()
	prio, restore := backgroundAttackers()
	defer restore()
	fmt.Printf("  %s\n", prio)
	var failed, ran []string
	idle := newVictimLat()
	var unders []rowLat
	for _, row := range threatTable {
		if *threatRows != "" && !strings.Contains(","+*threatRows+",", ","+row.id+",") {
			continue
		}
		ran = append(ran, row.id)
		line, lat, err := runThreatRow(ctx, e, rigs, row)
		if lat.under != nil {
			idle.merge(lat.idle)
			unders = append(unders, lat)
		}
		if err != nil {
			failed = append(failed, row.id)
			fmt.Printf("  row %s: %s: FAIL: %s\n", row.id, line, strings.ReplaceAll(err.Error(), "\n", "; "))
			continue
		}
		fmt.Printf("  row %s: %s: ok\n", row.id, line)
	}
	if len(unders) > 0 {
		line, slow := judgeP99(idle, unders)
		fmt.Printf("  %s\n", line)
		for _, id := range slow {
			if !slices.Contains(failed, id) {
				failed = append(failed, id)
			}
		}
	}
	sum := fmt.Sprintf("%d rows, %d passed", len(ran), len(ran)-len(failed))
	if len(failed) > 0 {
		return sum, fmt.Errorf("rows %s failed", strings.Join(failed, ", "))
	}
	return sum, nil
}

// rowLat is the victim's latencies around one row: idle before it, and
// under its attack (nil for a row with no victim).
type rowLat struct {
	id          string
	idle, under *victimLat
}

// judgeP99 compares the victim's p99 under each row with threatFactor times
// its idle p99 over the whole run, and returns the line that says so and
// the rows over it.
func judgeP99(idle *victimLat, unders []rowLat) (string, []string) {
	ip := idle.p99()
	limit := time.Duration(float64(ip) * *threatFactor)
	var parts, slow []string
	for _, u := range unders {
		up := u.under.p99()
		part := fmt.Sprintf("%s %.1fx", u.id, float64(up)/float64(max(ip, time.Microsecond)))
		if up > limit {
			part += " (FAIL)"
			slow = append(slow, u.id)
		}
		parts = append(parts, part)
	}
	return fmt.Sprintf("victim idle p99 over every row's idle window %s (%d samples); its p99 under each row against it (at most %gx): %s",
		ms(ip), idle.count(), *threatFactor, strings.Join(parts, ", ")), slow
}

// runThreatRow runs one row on its rig (started on first use, restarted if its
// server died) with the checks every row shares.
func runThreatRow(ctx context.Context, e *env, rigs map[string]*threatRig, row threatRow) (string, rowLat, error) {
	r := &rowRun{e: e, id: row.id, d: *threatAttack * max(rowLonger[row.id], 1), stop: make(chan struct{})}
	if row.rig == "" {
		time.AfterFunc(r.d, r.end)
		line, err := row.run(ctx, r)
		return line, rowLat{}, err
	}
	g, err := ensureRig(ctx, e, rigs, row.rig)
	if err != nil {
		return "no server", rowLat{}, err
	}
	r.rig = g
	prep := ""
	if row.setup != nil {
		if prep, err = row.setup(ctx, r); err != nil {
			return prep, rowLat{}, err
		}
		prep += "; "
	}
	topic := "v.r" + strings.ToLower(row.id)
	idle, err := g.victim.idleWindow(ctx, topic, *threatIdle)
	if err != nil {
		return "victim before the attack", rowLat{}, err
	}
	r.idle = idle
	under := newVictimLat()
	g.victim.record(under)
	peak := g.watchRSS(r)
	r.begun = time.Now()
	time.AfterFunc(r.d, r.end)
	line, rowErr := row.run(ctx, r)
	// The victim is measured under the attack for at least -threat-attack, so
	// that its p99 under a short row rests on as many samples as a long
	// row's.
	if rest := *threatAttack - time.Since(r.begun); rest > 0 {
		time.Sleep(rest)
	}
	r.end()
	g.victim.record(nil)
	maxRSS := peak()
	if maxRSS >= threatBudget && g.srv.alive() {
		// The memory the row left in the process would count against the
		// next row: that one starts on a fresh process.
		defer g.srv.kill()
	}
	shared, sharedErr := g.check(ctx, topic, idle, under, maxRSS)
	return prep + line + "; " + shared, rowLat{row.id, idle, under}, errors.Join(rowErr, sharedErr)
}

// check is what every row on a rig checks: the server alive, its peak RSS
// under the limit and the victim's messages; it reports the victim's p99,
// which judgeP99 judges once every row has run.
func (g *threatRig) check(ctx context.Context, topic string, idle, under *victimLat, maxRSS int64) (string, error) {
	var errs []error
	line := fmt.Sprintf("peak RSS %d MiB", maxRSS>>20)
	if maxRSS >= threatMemLimit {
		line += fmt.Sprintf(" >= limit %d MiB", threatMemLimit>>20)
		errs = append(errs, fmt.Errorf("server RSS peaked at %d MiB, the limit is %d MiB", maxRSS>>20, threatMemLimit>>20))
	} else {
		line += fmt.Sprintf(" < limit %d MiB", threatMemLimit>>20)
	}
	line += fmt.Sprintf(", victim p99 %s (idle before it %s, %d samples)", ms(under.p99()), ms(idle.p99()), under.count())
	if n, first := g.victim.takeErrors(); n > 0 {
		errs = append(errs, fmt.Errorf("victim: %d produces failed (first: %w)", n, first))
	}
	if !g.srv.alive() {
		errs = append(errs, fmt.Errorf("the server died: %v\n%s", g.srv.err, tail(g.srv.output())))
		return line, errors.Join(errs...)
	}
	if err := g.victim.park(); err != nil {
		return line, errors.Join(append(errs, err)...)
	}
	res, err := g.victim.verify(ctx, topic)
	if err != nil {
		errs = append(errs, fmt.Errorf("victim messages: %w", err))
	} else {
		line += fmt.Sprintf(", %d victim messages each stored once", res.acked)
	}
	return line, errors.Join(errs...)
}

// ms formats d in milliseconds.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}
