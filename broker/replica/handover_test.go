package replica

import (
	"slices"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/cluster"
)

// TestPreferredLeader: a leader hands a topic back only to the topic's
// first replica, another member in sync, while the topic does not move
// and no other change of it is under way.
func TestPreferredLeader(t *testing.T) {
	sh := New(nil, Config{Self: "b"}).shared
	topic := func(leader string, isr ...string) *replicaLog {
		return &replicaLog{name: "t", sh: sh, ready: true, meta: cluster.Topic{Name: "t", Leader: leader, Epoch: 2, Version: 5,
			Replicas: []string{"a", "b", "c"}, ISR: isr}}
	}
	for _, tc := range []struct {
		what string
		rl   *replicaLog
		want string
	}{
		{"led by b, a in sync", topic("b", "b", "c", "a"), "a"},
		{"led by b, a out of sync", topic("b", "b", "c"), ""},
		{"led by a itself", topic("a", "a", "b", "c"), ""},
		{"led by c, not here", topic("c", "c", "a", "b"), ""},
	} {
		if got := tc.rl.preferredLeader(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.what, got, tc.want)
		}
	}
	for what, change := range map[string]func(rl *replicaLog){
		"moving":            func(rl *replicaLog) { rl.meta.Target = []string{"a", "b"} },
		"handing already":   func(rl *replicaLog) { rl.handing = true },
		"altering its set":  func(rl *replicaLog) { rl.altering = true },
		"not ready to lead": func(rl *replicaLog) { rl.ready = false },
		"with no replicas":  func(rl *replicaLog) { rl.meta.Replicas = nil },
	} {
		rl := topic("b", "b", "c", "a")
		change(rl)
		if got := rl.preferredLeader(); got != "" {
			t.Errorf("%s: %q, want none", what, got)
		}
	}
}

// TestHandingHoldsAcksLeader: while a leader hands a topic back (or
// stops), a batch appended with acks=leader is answered only once the
// in-sync followers hold it, as acks=all is, so that the replica taking
// the lead holds every batch acknowledged; otherwise at once.
func TestHandingHoldsAcksLeader(t *testing.T) {
	s := openReplica(t)
	lead(t, s, 1, names("m", 0, 4)...)
	m := New(s, Config{Self: "b", MinInsync: 2})
	meta := cluster.Topic{Name: "t", Leader: "b", Epoch: 1, Replicas: []string{"a", "b", "c"}, ISR: []string{"b", "a", "c"}}
	rl := &replicaLog{name: "t", sh: m.shared, record: meta, ready: true, meta: meta, watches: map[*watch]struct{}{},
		fol: map[string]*fstate{"a": {leo: 2}, "c": {leo: 4}}}
	m.meta["t"], m.logs["t"] = meta, rl
	answered := func(what string) func() bool {
		done := false
		(dataAPI{m}).Appended("t", 4, false, func(err error) {
			if err != nil {
				t.Errorf("%s: %v", what, err)
			}
			done = true
		})
		return func() bool { return done }
	}
	if !answered("leading")() {
		t.Fatal("acks=leader while leading: not answered at once")
	}
	rl.handing = true
	handing := answered("handing back")
	m.draining.Store(true)
	rl.handing = false
	draining := answered("stopping")
	if handing() || draining() {
		t.Fatalf("answered before a follower holds the batch: handing %v, stopping %v", handing(), draining())
	}
	if rl.copied() {
		t.Fatal("copied with a at 2 of 4")
	}
	rl.mu.Lock()
	rl.fol["a"].leo = 4
	calls := rl.advance()
	rl.mu.Unlock()
	calls.run()
	if !handing() || !draining() {
		t.Fatalf("once every in-sync follower holds it: handing %v, stopping %v, want both answered", handing(), draining())
	}
	if !rl.copied() || !rl.holds("a") {
		t.Fatal("not copied with every follower at the end")
	}
}

// TestHandBackGivesUp: a leader whose first replica does not catch up
// within the drain keeps the lead, takes produces again and waits another
// LeaderBalance before it tries again.
func TestHandBackGivesUp(t *testing.T) {
	s := openReplica(t)
	lead(t, s, 1, names("m", 0, 4)...)
	m := New(s, Config{Self: "b", MinInsync: 2, LeaderBalance: time.Minute})
	meta := cluster.Topic{Name: "t", Leader: "b", Epoch: 1, Version: 3, Replicas: []string{"a", "b", "c"}, ISR: []string{"b", "a", "c"}}
	rl := &replicaLog{name: "t", sh: m.shared, record: meta, ready: true, meta: meta, watches: map[*watch]struct{}{}, handing: true,
		preferredSince: time.Now().Add(-time.Hour), fol: map[string]*fstate{"a": {leo: 1}, "c": {leo: 4}}}
	m.meta["t"], m.logs["t"] = meta, rl
	start := time.Now()
	rl.handTo(handover{to: "a", epoch: 1, version: 3, isr: []string{"a", "b", "c"}})
	if took := time.Since(start); took < handDrain {
		t.Fatalf("gave up after %v, before the drain's %v", took, handDrain)
	}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.handing || !rl.preferredSince.IsZero() {
		t.Fatalf("after giving up: handing %v, preferred since %v; want produces taken and the wait started over", rl.handing, rl.preferredSince)
	}
}

// TestPlannedMove: a leader that is not in its topic's move target ends
// the move itself (drained first), once every member of the target is in
// sync, the lead going to the first of them in the in-sync set; a leader
// in the target leaves the end to the controller, its lead kept.
func TestPlannedMove(t *testing.T) {
	m := New(openReplica(t), Config{Self: "b", MinInsync: 1})
	topic := func(target []string, isr ...string) *replicaLog {
		return &replicaLog{name: "t", sh: m.shared, ready: true, meta: cluster.Topic{Name: "t", Leader: "b", Epoch: 4, Version: 9,
			Replicas: []string{"b", "c", "a", "d"}, Target: target, ISR: isr}}
	}
	h, ok := topic([]string{"a", "c"}, "b", "c", "d", "a").planned(nil, time.Now(), false)
	if !ok || !h.move || h.to != "c" || !slices.Equal(h.isr, []string{"c", "a"}) || h.epoch != 4 || h.version != 9 {
		t.Fatalf("the target in sync: %+v %v, want the move ended, c leading [c a]", h, ok)
	}
	if h, ok := topic([]string{"a", "c"}, "b", "c", "d").planned(nil, time.Now(), false); ok {
		t.Fatalf("a not in sync yet: %+v, want nothing", h)
	}
	if h, ok := topic([]string{"b", "a"}, "b", "c", "a").planned(nil, time.Now(), false); ok {
		t.Fatalf("the leader in the target: %+v, want nothing (the controller ends it)", h)
	}
	rl := topic([]string{"a", "c"}, "b", "c", "a")
	rl.handing = true
	if h, ok := rl.planned(nil, time.Now(), false); ok {
		t.Fatalf("handing over already: %+v, want nothing", h)
	}
}

// TestPlannedOffFailedCopy: a leader whose copy turned read-only hands
// the lead to the first in-sync follower that fetched within the lag
// time, moving or not, and leaves the in-sync set; with no such follower
// it keeps the lead.
func TestPlannedOffFailedCopy(t *testing.T) {
	m := New(openReplica(t), Config{Self: "b", MinInsync: 1, LagTime: 5 * time.Second})
	now := time.Now()
	topic := func(fetched map[string]time.Duration, isr ...string) *replicaLog {
		fol := map[string]*fstate{}
		for id, ago := range fetched {
			fol[id] = &fstate{fetched: now.Add(-ago)}
		}
		return &replicaLog{name: "t", sh: m.shared, ready: true, fol: fol, meta: cluster.Topic{Name: "t", Leader: "b", Epoch: 4, Version: 9,
			Replicas: []string{"a", "b", "c"}, ISR: isr}}
	}
	fresh := map[string]time.Duration{"a": time.Second, "c": time.Second}
	for _, tc := range []struct {
		what    string
		rl      *replicaLog
		to      string
		isr     []string
		planned bool
	}{
		{"both fetching", topic(fresh, "b", "c", "a"), "c", []string{"c", "a"}, true},
		{"c silent", topic(map[string]time.Duration{"a": time.Second, "c": time.Minute}, "b", "c", "a"), "a", []string{"a", "c"}, true},
		{"c never fetched", topic(map[string]time.Duration{"a": time.Second}, "b", "c", "a"), "a", []string{"a", "c"}, true},
		{"alone in sync", topic(fresh, "b"), "", nil, false},
		{"no follower fetching", topic(map[string]time.Duration{"a": time.Minute}, "b", "a"), "", nil, false},
	} {
		h, ok := tc.rl.planned(nil, now, true)
		if ok != tc.planned || h.to != tc.to || !slices.Equal(h.isr, tc.isr) || h.move || ok && (h.epoch != 4 || h.version != 9) {
			t.Errorf("%s: %+v %v, want the lead to %q, in-sync %v", tc.what, h, ok, tc.to, tc.isr)
		}
	}
	moving := topic(fresh, "b", "c", "a")
	moving.meta.Target = []string{"a", "c"}
	if h, ok := moving.planned(nil, now, true); !ok || h.to != "c" || h.move {
		t.Errorf("moving: %+v %v, want the lead to c, not the move's end", h, ok)
	}
	handing := topic(fresh, "b", "c", "a")
	handing.handing = true
	if h, ok := handing.planned(nil, now, true); ok {
		t.Errorf("handing over already: %+v, want nothing", h)
	}
}
