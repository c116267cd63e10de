package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// foGapsByKill returns, for each kind of kill, how many times a producer
// went foLongGap or more without an acknowledgement after one (each gap
// put down to the last kill made before it ended), their median and the
// longest: what sets max_unavailable_ms.
func foGapsByKill(ps *foProducers, kills []foEvent) string {
	byKill := map[string][]time.Duration{}
	for _, p := range ps.p {
		p.mu.Lock()
		for _, g := range p.gaps {
			what := "none"
			for _, k := range kills {
				if k.at.Before(g.from.Add(g.d)) {
					what = k.what
				}
			}
			byKill[what] = append(byKill[what], g.d)
		}
		p.mu.Unlock()
	}
	var parts []string
	for _, what := range []string{"leader", "follower", "double", "none"} {
		if ds := byKill[what]; len(ds) > 0 {
			slices.Sort(ds)
			parts = append(parts, fmt.Sprintf("%s %d gaps, median %d ms, longest %d ms", what, len(ds), ds[len(ds)/2].Milliseconds(), ds[len(ds)-1].Milliseconds()))
		}
	}
	return "failover gaps of 1 s or more, by the kill before them: " + strings.Join(parts, "; ")
}

// foLongGaps lists each producer's gaps of foReportGap or more, longest
// first, each with the last kill made before it began (or within its
// first foKillSlack: a producer's last acknowledgement may just precede
// the kill that stopped it) and how many were made during it (the next
// kill waits for progress, which other topics' producers can make): where
// a long unavailability came from.
func foLongGaps(ps *foProducers, kills []foEvent) string {
	type long struct {
		topic string
		g     foGap
		kill  foEvent
		more  int // kills made during the gap, after kill
	}
	var ls []long
	for _, p := range ps.p {
		p.mu.Lock()
		for _, g := range p.gaps {
			if g.d < foReportGap {
				continue
			}
			l := long{topic: p.topic, g: g}
			for _, k := range kills {
				switch {
				case k.at.Before(g.from.Add(foKillSlack)):
					l.kill = k
				case k.at.Before(g.from.Add(g.d)):
					l.more++
				}
			}
			ls = append(ls, l)
		}
		p.mu.Unlock()
	}
	slices.SortFunc(ls, func(a, b long) int { return int(b.g.d - a.g.d) })
	var b strings.Builder
	fmt.Fprintf(&b, "failover gaps of %v or more: %d", foReportGap, len(ls))
	for _, l := range ls {
		if l.kill.at.IsZero() {
			fmt.Fprintf(&b, "\n  %s: %v without an acknowledgement, before any kill", l.topic, l.g.d.Round(time.Millisecond))
			continue
		}
		fmt.Fprintf(&b, "\n  %s: %v without an acknowledgement, from %v after the kill (%s)", l.topic, l.g.d.Round(time.Millisecond),
			l.g.from.Sub(l.kill.at).Round(time.Millisecond), l.kill.detail)
		if l.more > 0 {
			fmt.Fprintf(&b, ", %d more kills during it", l.more)
		}
	}
	return b.String()
}

// foReportGap is the gap from which foLongGaps names each; foKillSlack,
// how long after a kill a gap may begin and be put down to an earlier one.
const (
	foReportGap = 3 * time.Second
	foKillSlack = 100 * time.Millisecond
)
