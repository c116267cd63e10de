package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// rssAbort stops the hostile phase before the server takes the machine.
const rssAbort = 8 << 30

// runHostile measures a well-behaved producer and consumer on the idle
// server, then again while hostile connections attack it, sampling the
// server's RSS throughout.
func runHostile(ctx context.Context, e *env) (string, error) {
	var args []string
	if e.bufferBudget {
		args = append(args, "-max-buffered-bytes", strconv.FormatInt(e.cfg.budget, 10))
	}
	args = append(args, strings.Fields(e.cfg.extra)...)
	s, err := start(serverSpec{bin: e.bin, volumes: e.volumes("hostile", 2), args: args})
	if err != nil {
		return "", err
	}
	if e.cfg.extra != "" {
		fmt.Fprint(os.Stderr, servingLine(s.output()))
	}
	defer func() {
		if s.alive() {
			s.kill()
		}
	}()
	if err := prepare(ctx, s); err != nil {
		return "", fmt.Errorf("prepare topics: %w", err)
	}
	var maxRSS atomic.Int64
	stopSampling := sample(func() {
		if n, err := rss(s.pid()); err == nil {
			maxRSS.Store(max(maxRSS.Load(), n))
		}
	})
	defer stopSampling()
	idle, under := newLatencies(), newLatencies()
	g, err := startWellBehaved(ctx, s, idle)
	if err != nil {
		return "", err
	}
	time.Sleep(e.cfg.idle)
	idleRSS := maxRSS.Load()
	g.window.Store(under)
	h, err := newHostile(s.addr)
	if err != nil {
		return "", errors.Join(err, g.halt())
	}
	stop := make(chan struct{})
	wg := h.attack(e.cfg.hostile, e.cfg.kinds, stop)
	aborted := watch(s, &maxRSS, e.cfg.attack)
	close(stop)
	wg.Wait()
	gerr := g.halt()
	line := fmt.Sprintf("idle %s: %s; under %d hostile connections for %s: %s; max RSS idle %d MiB, under attack %d MiB%s; hostile: %s",
		e.cfg.idle, idle, e.cfg.hostile, e.cfg.attack, under, idleRSS>>20, maxRSS.Load()>>20, e.budgetNote(), h.summary())
	return line, errors.Join(gerr, aborted, e.checkBudget(s, maxRSS.Load(), h))
}

// watch waits d, failing early if the server dies or passes rssAbort.
func watch(s *server, maxRSS *atomic.Int64, d time.Duration) error {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if !s.alive() {
			return fmt.Errorf("the server died under attack: %v\n%s", s.err, tail(s.output()))
		}
		if n := maxRSS.Load(); n > rssAbort {
			s.kill()
			return fmt.Errorf("attack stopped: server RSS %d MiB passed %d MiB", n>>20, rssAbort>>20)
		}
	}
	return nil
}

func (e *env) budgetNote() string {
	if !e.bufferBudget {
		return " (the server has no -max-buffered-bytes: no budget to compare)"
	}
	return fmt.Sprintf(" (budget -max-buffered-bytes %d MiB + slack %d MiB)", e.cfg.budget>>20, e.cfg.slack>>20)
}

// checkBudget fails on RSS over budget plus slack, garbage stored, or a
// server that no longer serves.
func (e *env) checkBudget(s *server, maxRSS int64, h *hostile) error {
	var errs []error
	if e.bufferBudget && maxRSS > e.cfg.budget+e.cfg.slack {
		errs = append(errs, fmt.Errorf("RSS %d MiB over the budget %d MiB + slack %d MiB", maxRSS>>20, e.cfg.budget>>20, e.cfg.slack>>20))
	}
	if n := h.accepted.Load(); n > 0 {
		errs = append(errs, fmt.Errorf("%d compressed-garbage produces were stored", n))
	}
	if s.alive() {
		if _, err := waitServes(context.Background(), s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// summary is what the hostile connections saw.
func (h *hostile) summary() string {
	out := fmt.Sprintf("%d requests refused with an error code, %d garbage produces stored", h.refused.Load(), h.accepted.Load())
	for i, a := range attackers {
		if n := h.closed[i].Load(); n > 0 {
			out += fmt.Sprintf(", %s ended %d times (first: %s)", a.name, n, h.why[i])
		}
	}
	return out
}

// servingLine is the server's "serving" log line, with its ports.
func servingLine(log string) string {
	for _, line := range strings.SplitAfter(log, "\n") {
		if strings.Contains(line, "msg=serving ") {
			return line
		}
	}
	return ""
}
