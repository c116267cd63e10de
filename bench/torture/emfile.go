package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/client"
)

const (
	emfileLimit  = 256 // descriptor limit of the server
	emfileConns  = 400 // connections opened at once, more than the limit
	emfileTopics = 300 // topics created while the connections are held
)

// runEMFILE starts the server with 256 descriptors and a connection limit
// above that, holds 400 connections and creates 300 topics while a
// producer keeps going; then checks that the port serves again, that the
// topics whose creation failed can be written now, that every
// acknowledged message is intact, and that the server restarts under the
// same limit.
func runEMFILE(ctx context.Context, e *env) (string, error) {
	spec := serverSpec{bin: e.bin, volumes: e.volumes("emfile", 2), nofile: emfileLimit,
		args: []string{"-max-conns", "1000", "-max-conns-per-addr", "0", "-ballast", "0"}} // every connection from 127.0.0.1
	s, err := start(spec)
	if err != nil {
		return "", err
	}
	defer func() {
		if s.alive() {
			s.kill()
		}
	}()
	l := newLedger()
	steady := startSteady(ctx, s, l, "emfile-steady", 910)
	c, err := s.dial(ctx)
	if err != nil {
		steady.halt()
		return "", err
	}
	defer c.Close()
	var maxFDs atomic.Int64
	stopSampling := sample(func() { maxFDs.Store(max(maxFDs.Load(), int64(fds(s.pid())))) })
	held := flood(s.addr, emfileConns)
	failedTopics := createTopics(ctx, c, l)
	time.Sleep(500 * time.Millisecond)
	for _, h := range held {
		h.Close()
	}
	stopSampling()
	line := fmt.Sprintf("nofile %d, -max-conns 1000: %d of %d connections opened, accept EMFILE logged: %t, max %d fds; %d topics created under exhaustion, %d failed then",
		emfileLimit, len(held), emfileConns, strings.Contains(s.output(), "out of file descriptors"), maxFDs.Load(), emfileTopics, len(failedTopics))
	served, err := waitServes(ctx, s)
	if err != nil {
		steady.halt()
		return line, err
	}
	line += fmt.Sprintf("; port served again after %s", served.Round(time.Millisecond))
	if err := steady.halt(); err != nil {
		return line, err
	}
	stuck, problem := retryTopics(ctx, s, c, l, failedTopics)
	line += fmt.Sprintf("; %d of those still failing afterwards; producer acked %d", stuck, steady.acked.Load())
	line, err = emfileRestart(ctx, s, spec, l, line)
	return line, errors.Join(problem, err)
}

// emfileRestart checks everything, restarts under the same limit, checks
// again and stops the server cleanly.
func emfileRestart(ctx context.Context, s *server, spec serverSpec, l *ledger, line string) (string, error) {
	res, err := checkServer(ctx, s, l)
	if err != nil {
		return line, err
	}
	if err := s.stop(); err != nil {
		return line, err
	}
	if s, err = start(spec); err != nil {
		return line, fmt.Errorf("restart with %d topics under nofile %d: %w", emfileTopics+1, emfileLimit, err)
	}
	if _, err := checkServer(ctx, s, l); err != nil {
		s.kill()
		return line, fmt.Errorf("after restart: %w", err)
	}
	return line + fmt.Sprintf("; %d acknowledged messages intact, and again after a restart under the same limit", res.acked), s.stop()
}

// flood opens n connections and returns those that were established.
func flood(addr string, n int) []net.Conn {
	var held []net.Conn
	for range n {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			held = append(held, c)
		}
	}
	return held
}

// createTopics produces one message to each of the phase's topics and
// returns those whose produce failed.
func createTopics(ctx context.Context, c *client.Client, l *ledger) []string {
	var failed []string
	for i := range emfileTopics {
		topic := fmt.Sprintf("emfile-%03d", i)
		if err := l.produce(ctx, c, topic, 911, 1); err != nil {
			failed = append(failed, topic)
		}
	}
	return failed
}

// retryTopics produces again to topics whose first produce failed: a
// failed create or open must not be sticky. It returns the error of the
// first that still fails and how many do.
func retryTopics(ctx context.Context, s *server, c *client.Client, l *ledger, topics []string) (int, error) {
	var first error
	n := 0
	for _, topic := range topics {
		if err := l.produce(ctx, c, topic, 911, 1); err != nil {
			n++
			if first == nil {
				first = fmt.Errorf("%s still fails once descriptors are free: %w\n%s", topic, err, grep(s.output(), topic, 3))
			}
		}
	}
	if first != nil {
		first = fmt.Errorf("%d of %d topics whose creation failed under exhaustion still fail: %w", n, len(topics), first)
	}
	return n, first
}

// waitServes waits until a new connection is served a ping.
func waitServes(ctx context.Context, s *server) (time.Duration, error) {
	begun := time.Now()
	for {
		c, err := s.dial(ctx)
		if err == nil {
			err = c.Ping(ctx)
			c.Close()
		}
		if err == nil {
			return time.Since(begun), nil
		}
		if time.Since(begun) > 15*time.Second {
			return 0, fmt.Errorf("the port does not serve 15s after the connections closed: %w\n%s", err, tail(s.output()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sample calls fn every 50 ms until the returned stop is called.
func sample(fn func()) (stop func()) { return sampleEvery(50*time.Millisecond, fn) }

// sampleEvery calls fn every period until the returned stop is called.
func sampleEvery(period time.Duration, fn func()) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			fn()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}

// grep returns up to n lines of log that hold s.
func grep(log, s string, n int) string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, s) && len(out) < n {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
