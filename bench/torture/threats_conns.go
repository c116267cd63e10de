package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// Rows 4, 5, 6, 10 and 16: authentication failures, descriptors,
// connection slots and signals.

const (
	rateChecks    = 20  // the victim's new connections and HTTP requests
	httpFDConns   = 240 // HTTP keep-alives held under nofile 256
	tlsFDConns    = 120 // TLS connections held under nofile 256
	perAddr       = 60  // row 5 and 6 attackers per source address
	victimNew     = 5   // new victim connections tried under rows 5, 6, 10
	victimNewProd = 701 // their producer number in the ledger
	sighupStarts  = 5
)

// attackRateLimit: from the victim's own address, 4 failed authentications a
// second (a wrong token and none, on both ports); the victim's valid token
// is never refused.
func attackRateLimit(ctx context.Context, r *rowRun) (string, error) {
	g := r.rig
	var bad atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		hc := g.httpClient("127.0.0.1")
		for i := 0; !r.stopped(); i++ {
			failAuth(g, hc, i)
			bad.Add(1)
			pause(r.stop, 250*time.Millisecond)
		}
	}()
	hc := g.httpClient("127.0.0.1")
	var binRefused, httpRefused int
	var firstBin, firstHTTP string
	for range rateChecks {
		if c, err := g.dial(ctx, g.tok.victim); err != nil {
			binRefused++
			firstBin = first(firstBin, err.Error())
		} else {
			c.Close()
		}
		st, body, _, err := g.request(hc, http.MethodGet, "/topics/v.r4/info", g.tok.victim, nil)
		if err != nil || st != http.StatusOK {
			httpRefused++
			firstHTTP = first(firstHTTP, fmt.Sprintf("%d %s %v", st, strings.TrimSpace(string(body)), err))
		}
		time.Sleep(140 * time.Millisecond)
	}
	r.end()
	<-done
	line := fmt.Sprintf("%d failed authentications from 127.0.0.1 (wrong and empty tokens, both ports): victim's token refused on %d/%d hellos and %d/%d HTTP requests",
		bad.Load(), binRefused, rateChecks, httpRefused, rateChecks)
	if binRefused+httpRefused > 0 {
		return line, fmt.Errorf("the victim's valid token was refused (hello: %s; HTTP: %s)", firstBin, firstHTTP)
	}
	return line, nil
}

// failAuth is the i-th failed authentication of row 4.
func failAuth(g *threatRig, hc *http.Client, i int) {
	tokens := []string{"not-a-token-" + fmt.Sprint(i), ""}
	tok := tokens[i%2]
	if i/2%2 == 0 {
		c, err := g.rawDial("127.0.0.1")
		if err != nil {
			return
		}
		w := &raw2{Conn: c}
		_, _, _ = w.do(func(id uint32) []byte { return protocol.AppendHelloRequest(nil, id, 1, "bad", tok) })
		c.Close()
		return
	}
	_, _, _, _ = g.request(hc, http.MethodGet, "/topics", tok, nil)
}

// first is old, or s if old is empty.
func first(old, s string) string {
	if old != "" {
		return old
	}
	return s
}

// victimConnects dials n new victim connections from 127.0.0.1, each
// producing one message (in the ledger) on topic.
func victimConnects(ctx context.Context, g *threatRig, n int, topic string) (int, error) {
	served := 0
	var firstErr error
	for range n {
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		c, err := g.dial(dctx, g.tok.victim)
		if err == nil {
			err = g.victim.l.produce(dctx, c, topic, victimNewProd, 1)
			c.Close()
		}
		cancel()
		if err != nil {
			firstErr = errors.Join(firstErr, err)
			continue
		}
		served++
	}
	if served < n {
		return served, fmt.Errorf("%d of %d new victim connections failed: %w", n-served, n, firstErr)
	}
	return served, nil
}

// attackSlots: one address holds -max-conns connections and pings (ping
// needs no hello); a per-address cap keeps slots for the victim.
func attackSlots(ctx context.Context, r *rowRun) (string, error) {
	held, refused := hold(r.rig, r.id, threatMaxConns, threatMaxConns, r.stop)
	defer closeAll(held)
	served, err := victimConnects(ctx, r.rig, victimNew, "v.r10")
	r.wait()
	return fmt.Sprintf("%d connections from %s pinging without hello (-max-conns %d): %d served, %d refused; new victim connections served %d/%d",
		threatMaxConns, attackerIP(r.id, 0), threatMaxConns, len(held), refused, served, victimNew), err
}

// hold opens n connections, perIP from each source address, all at once,
// and pings on each; it returns those served and how many were refused,
// and keeps pinging every second until stop.
func hold(g *threatRig, row string, n, perIP int, stop <-chan struct{}) ([]net.Conn, int) {
	held := openAll(n, func(i int) (net.Conn, error) {
		c, err := g.rawDial(attackerIP(row, i/perIP))
		if err != nil {
			return nil, err
		}
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err = c.Write(protocol.AppendPingRequest(nil, 1)); err == nil {
			var code protocol.Code
			if code, _, err = readResponse(c); err == nil && code != protocol.CodeOK {
				err = fmt.Errorf("code %d", code)
			}
		}
		if err != nil {
			c.Close()
			return nil, err
		}
		_ = c.SetDeadline(time.Time{})
		return c, nil
	})
	go func() {
		for !pause(stop, time.Second) {
			for _, c := range held {
				_, _ = c.Write(protocol.AppendPingRequest(nil, 0))
			}
		}
	}()
	return held, n - len(held)
}

// openAll runs open(0..n-1) at once and returns the connections opened.
func openAll(n int, open func(i int) (net.Conn, error)) []net.Conn {
	var mu sync.Mutex
	var held []net.Conn
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if c, err := open(i); err == nil {
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return held
}

func closeAll(cs []net.Conn) {
	for _, c := range cs {
		c.Close()
	}
}

// attackHTTPDescriptors: under a 256-descriptor limit, 240 HTTP keep-alives
// from 127.0.5.2-5; HTTP connections have their own cap inside the
// descriptor budget, so new binary connections are still served.
func attackHTTPDescriptors(ctx context.Context, r *rowRun) (string, error) {
	g := r.rig
	held := openAll(httpFDConns, func(i int) (net.Conn, error) { return keepAlive(g, attackerIP(r.id, i/perAddr)) })
	refused := httpFDConns - len(held)
	defer closeAll(held)
	fdsNow := fds(g.srv.pid())
	served, err := victimConnects(ctx, g, victimNew, "v.r5")
	r.wait()
	return fmt.Sprintf("%d HTTP keep-alives under nofile %d: %d held, %d refused, server fds %d; new victim binary connections served %d/%d",
		httpFDConns, g.spec.nofile, len(held), refused, fdsNow, served, victimNew), errors.Join(err, emfileLogged(g))
}

// keepAlive opens an HTTP connection from ip, has /healthz answered on
// it, and returns it open.
func keepAlive(g *threatRig, ip string) (net.Conn, error) {
	c, err := dialer(ip).Dial("tcp", g.http)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n"); err == nil {
		var resp *http.Response
		if resp, err = http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// emfileLogged fails when the server ran out of descriptors.
func emfileLogged(g *threatRig) error {
	if l := grep(g.srv.output(), "too many open files", 1); l != "" {
		return fmt.Errorf("the server ran out of descriptors: %s", l)
	}
	return nil
}

// attackTLSDescriptors: under a 256-descriptor limit, 120 TLS connections
// from 127.0.6.2; a TLS connection counts what it holds, so the server
// never runs out of descriptors, and one address holds at most half of
// the slots, so the victim is served.
func attackTLSDescriptors(ctx context.Context, r *rowRun) (string, error) {
	g := r.rig
	held, refused := hold(g, r.id, tlsFDConns, tlsFDConns, r.stop)
	defer closeAll(held)
	fdsNow := fds(g.srv.pid())
	served, err := victimConnects(ctx, g, victimNew, "v.r6")
	r.wait()
	return fmt.Sprintf("%d TLS connections under nofile %d: %d served, %d refused, server fds %d; new victim TLS connections served %d/%d",
		tlsFDConns, g.spec.nofile, len(held), refused, fdsNow, served, victimNew), errors.Join(err, emfileLogged(g))
}

// attackSighup: SIGHUP as soon as the server has logged its first line
// (its main has begun); it must keep running and serve.
func attackSighup(ctx context.Context, r *rowRun) (string, error) {
	dir := filepath.Join(r.e.dir, "threats-sighup")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	auth := filepath.Join(dir, "auth")
	if err := os.WriteFile(auth, []byte(newTokens2().authFile()), 0o600); err != nil {
		return "", err
	}
	survived := 0
	var why []string
	for i := range sighupStarts {
		args := []string{"-listen", "127.0.0.1", "-tcp", "0", "-http", "0", "-auth-file", auth, filepath.Join(dir, fmt.Sprintf("vol%d", i))}
		if err := sighupOnce(r.e.bin, args); err != nil {
			why = append(why, err.Error())
			continue
		}
		survived++
	}
	line := fmt.Sprintf("SIGHUP on the server's first log line, %d starts: %d survived and served", sighupStarts, survived)
	if survived < sighupStarts {
		return line, fmt.Errorf("%s", joinCounts(why))
	}
	return line, nil
}

// sighupOnce starts the server, sends SIGHUP on its first log line and
// waits for it to serve; then stops it.
func sighupOnce(bin string, args []string) error {
	cmd := exec.Command(bin, args...)
	out, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	serving := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for n := 0; sc.Scan(); n++ {
			if n == 0 {
				_ = cmd.Process.Signal(syscall.SIGHUP)
			}
			if strings.Contains(sc.Text(), "msg=serving") {
				serving <- true
				io.Copy(io.Discard, out)
				return
			}
		}
		serving <- false
	}()
	select {
	case ok := <-serving:
		if !ok {
			err := cmd.Wait()
			return fmt.Errorf("died before serving: %v", err)
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return errors.New("not serving after 15s")
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	return cmd.Wait()
}
