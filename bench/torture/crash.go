package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// crashTopics are the topics the kill cycles produce to.
var crashTopics = []string{"crash-a", "crash-b"}

// fsyncPolicies alternate from one server start to the next.
var fsyncPolicies = []string{"never", "always"}

// damageFunc harms the stopped server's volumes and says what it did.
type damageFunc func(e *env, vols []string, cycle int) (string, error)

// runCrash: kill -9 under concurrent producers, restart, check.
func runCrash(ctx context.Context, e *env) (string, error) {
	return killCycles(ctx, e, "crash", e.cfg.cycles, nil)
}

// cycleStats sums what the kill cycles saw.
type cycleStats struct {
	produced, failed int
	checked          checked
	repairs          int
	damage           []string
}

// killCycles runs n cycles of: start the server on the same three volumes
// (alternating -fsync never and always), check everything acknowledged so
// far, produce from concurrent producers, kill -9 after a random delay,
// and damage the volumes if damage is given. A last start checks all and
// stops the server cleanly.
func killCycles(ctx context.Context, e *env, name string, n int, damage damageFunc) (string, error) {
	vols := e.volumes(name, 3)
	l := newLedger()
	var st cycleStats
	for i := 0; i <= n; i++ {
		spec := serverSpec{bin: e.bin, volumes: vols,
			args: []string{"-entries", "500", "-fsync", fsyncPolicies[i%2], "-ballast", "0"}}
		s, err := start(spec)
		if err != nil {
			return st.summary(l), fmt.Errorf("cycle %d: %w", i, err)
		}
		st.repairs += s.repairs()
		res, err := checkServer(ctx, s, l)
		st.checked = res
		if err != nil {
			s.kill()
			return st.summary(l), fmt.Errorf("cycle %d, after restart: %w\n%s", i, err, tail(s.output()))
		}
		if i == n {
			return st.summary(l), s.stop()
		}
		delay := 50*time.Millisecond + time.Duration(e.rnd.Int64N(int64(700*time.Millisecond)))
		if err := loadAndKill(ctx, s, l, e.cfg.producers, delay); err != nil {
			return st.summary(l), fmt.Errorf("cycle %d: %w\n%s", i, err, tail(s.output()))
		}
		if damage != nil {
			what, err := damage(e, vols, i)
			if err != nil {
				return st.summary(l), fmt.Errorf("cycle %d: damage: %w", i, err)
			}
			st.damage = append(st.damage, what)
		}
	}
	return st.summary(l), nil
}

func (st *cycleStats) summary(l *ledger) string {
	s := fmt.Sprintf("%d acknowledged messages (%d produce requests failed at the kills) all intact at their offsets, dense, in producer order; %d unacknowledged present; %d repairs logged",
		st.checked.acked, l.unsure, st.checked.extra, st.repairs)
	if len(st.damage) > 0 {
		s += fmt.Sprintf("; damage: %s", joinCounts(st.damage))
	}
	return s
}

// checkServer verifies the ledger against a running server.
func checkServer(ctx context.Context, s *server, l *ledger) (checked, error) {
	c, err := s.dial(ctx)
	if err != nil {
		return checked{}, err
	}
	defer c.Close()
	return l.verifyAll(ctx, c)
}

// loadAndKill runs producers against s and kills it with SIGKILL after
// delay. A producer may fail only once the kill is sent.
func loadAndKill(ctx context.Context, s *server, l *ledger, producers int, delay time.Duration) error {
	var killed atomic.Bool
	errs := make(chan error, producers)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			c, err := s.dial(ctx)
			if err != nil {
				errs <- fmt.Errorf("producer %d: %w", p, err)
				return
			}
			defer c.Close()
			topic := crashTopics[p%len(crashTopics)]
			for i := 0; ; i++ {
				err := l.produce(ctx, c, topic, p, batchOf(p, i))
				if err != nil && !killed.Load() {
					errs <- fmt.Errorf("producer %d before the kill: %w", p, err)
				}
				if err != nil {
					return
				}
			}
		})
	}
	time.Sleep(delay)
	killed.Store(true)
	s.kill()
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

// batchOf is the batch size of request i of producer p: one message at a
// time, a few, or fifty.
func batchOf(p, i int) int {
	switch p % 3 {
	case 0:
		return 1
	case 1:
		return 1 + i%8
	}
	return 50
}

func collect(errs <-chan error) []error {
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return all
}

// tail is the end of a server log, for error messages.
func tail(log string) string {
	const n = 2000
	if len(log) > n {
		return "...\n" + log[len(log)-n:]
	}
	return log
}

// joinCounts turns a list of labels into "a x3, b x2" in first-seen order.
func joinCounts(labels []string) string {
	count := make(map[string]int)
	var order []string
	for _, s := range labels {
		if count[s] == 0 {
			order = append(order, s)
		}
		count[s]++
	}
	out := ""
	for i, s := range order {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s x%d", s, count[s])
	}
	return out
}
