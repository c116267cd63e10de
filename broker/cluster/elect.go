package cluster

import (
	"context"
	"slices"
	"time"
)

// This file: which live in-sync member the controller elects when a
// topic's leader died. Every member of the in-sync set holds everything
// acknowledged with acks=all, but one may hold more: an acks=leader tail,
// batches the dead leader appended that were not committed yet. The
// controller asks the candidates where their logs end (Config.LogEnds,
// op 23 between the servers) and elects the one whose log ends furthest,
// by last epoch, then offset (KIP-966's order), so that no other member
// cuts what it holds.

// logEndsTimeout bounds the controller's wait for the candidates' log
// ends before an election: a member that has not answered by then keeps
// its place in the in-sync set's order, after those that did; when none
// has, the first live member is elected as without the question. It
// delays a failover only when a candidate does not answer (dying too,
// say): a live member answers from memory, a loopback or LAN round trip.
const logEndsTimeout = 300 * time.Millisecond

// preferLongest makes each command of cmds at elect, an election among
// several live in-sync members (decide), elect the member whose log of
// the topic ends furthest: it asks every candidate once for all its
// topics, in parallel, for at most logEndsTimeout. The chosen member
// leads and comes first in the in-sync set; the others keep their order.
// It must not run under the fsm's lock.
func (c *controller) preferLongest(cmds []Command, elect []int) {
	ask := c.n.cfg.LogEnds
	if ask == nil || len(elect) == 0 {
		return
	}
	byMember := map[string][]string{}
	for _, i := range elect {
		for _, id := range cmds[i].ISR {
			byMember[id] = append(byMember[id], cmds[i].Topic)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), logEndsTimeout)
	defer cancel()
	type answer struct {
		member string
		ends   map[string]LogEnd
	}
	answers := make(chan answer, len(byMember)) // a late answer never blocks its goroutine
	for id, topics := range byMember {
		go func() {
			ends, err := ask(ctx, id, topics)
			if err != nil {
				c.n.log.Debug("cluster: asking a member where its logs end", "member", id, "err", err)
			}
			answers <- answer{member: id, ends: ends}
		}()
	}
	ends := make(map[string]map[string]LogEnd, len(byMember))
wait:
	for range byMember {
		select {
		case a := <-answers:
			ends[a.member] = a.ends
		case <-ctx.Done():
			break wait
		}
	}
	for _, i := range elect {
		cmd := &cmds[i]
		known := map[string]LogEnd{}
		for _, id := range cmd.ISR {
			if e, ok := ends[id][cmd.Topic]; ok {
				known[id] = e
			}
		}
		leader := byLogEnd(cmd.ISR, known)[0]
		if leader == cmd.Leader {
			continue
		}
		c.n.log.Info("cluster: electing the in-sync member whose log ends furthest", "topic", cmd.Topic,
			"leader", leader, "end", known[leader], "first_in_sync", cmd.Leader, "its_end", known[cmd.Leader])
		cmd.Leader = leader
		cmd.ISR = append([]string{leader}, slices.DeleteFunc(slices.Clone(cmd.ISR), func(id string) bool { return id == leader })...)
	}
}

// byLogEnd returns cands, a topic's candidates in the in-sync set's
// order, ordered by where their logs end (ends; a member missing from it
// did not answer): furthest first, by last epoch, then offset; members
// with equal ends, and those that did not answer, after the others, keep
// their order.
func byLogEnd(cands []string, ends map[string]LogEnd) []string {
	out := slices.Clone(cands)
	slices.SortStableFunc(out, func(a, b string) int {
		ea, oka := ends[a]
		eb, okb := ends[b]
		switch {
		case oka != okb:
			if oka {
				return -1
			}
			return 1
		case !oka:
			return 0
		case ea.after(eb):
			return -1
		case eb.after(ea):
			return 1
		}
		return 0
	})
	return out
}
