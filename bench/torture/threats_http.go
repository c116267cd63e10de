package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// Rows 9, 11, 12 and 13: the HTTP port's watches, metrics, CORS and
// profiles.

const (
	watchCycles    = 200 // websocket watches opened and closed
	watchConc      = 4
	watchNames     = 100 // times X-Topics names the quiet topic
	watchTopic     = "shared.quiet"
	metricsCount   = 20000 // topics of the attacker's before row 11
	metricsClients = 4
	evilOrigin     = "http://evil.example"
)

// attackWatches: websocket watches naming one quiet topic 100 times are
// opened and closed 200 times; every storage watch is released on close,
// so RSS does not grow and the next produce to the topic is not slowed.
func attackWatches(ctx context.Context, r *rowRun) (string, error) {
	g := r.rig
	if _, err := g.victim.check.Produce(ctx, watchTopic, []byte("first")); err != nil {
		return "produce to " + watchTopic, err
	}
	rss0, _ := rss(g.srv.pid())
	names := strings.TrimSuffix(strings.Repeat(watchTopic+",", watchNames), ",")
	var opened, refused atomic.Int64
	var firstErr atomic.Pointer[string]
	var wg sync.WaitGroup
	for w := range watchConc {
		wg.Go(func() {
			hc := &http.Client{Transport: &http.Transport{DialContext: dialer(attackerIP(r.id, w)).DialContext, TLSClientConfig: g.tls}}
			for range watchCycles / watchConc {
				if err := openWatch(ctx, g, hc, names); err != nil {
					refused.Add(1)
					s := err.Error()
					firstErr.CompareAndSwap(nil, &s)
					continue
				}
				opened.Add(1)
			}
		})
	}
	wg.Wait()
	time.Sleep(200 * time.Millisecond) // the server's side of the closes
	rss1, _ := rss(g.srv.pid())
	var firstProduce, worst time.Duration
	for i := range 5 {
		begun := time.Now()
		if _, err := g.victim.check.Produce(ctx, watchTopic, []byte("after")); err != nil {
			return "victim produce after the watches", err
		}
		took := time.Since(begun)
		if i == 0 {
			firstProduce = took
		}
		worst = max(worst, took)
	}
	line := fmt.Sprintf("%d websocket watches naming %s %d times opened and closed (%d refused): RSS %d -> %d MiB, the next produce to it %s (max of 5: %s)",
		opened.Load(), watchTopic, watchNames, refused.Load(), rss0>>20, rss1>>20, ms(firstProduce), ms(worst))
	if p := firstErr.Load(); p != nil {
		line += " (first refusal: " + *p + ")"
	}
	if limit := time.Duration(float64(r.idle.p99()) * *threatFactor); worst > limit {
		return line, fmt.Errorf("a produce to the watched topic took %s, over %gx the victim's idle p99 %s", ms(worst), *threatFactor, ms(r.idle.p99()))
	}
	return line, nil
}

// openWatch opens a watch of names with the attacker's shared token and
// closes it.
func openWatch(ctx context.Context, g *threatRig, hc *http.Client, names string) error {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u := "ws://" + g.http + "/ws/topics"
	if g.tls != nil {
		u = "wss://" + g.http + "/ws/topics"
	}
	c, resp, err := websocket.Dial(dctx, u, &websocket.DialOptions{HTTPClient: hc,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + g.tok.shared}, "X-Topics": {names}}})
	if err != nil {
		if resp != nil {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return err
	}
	return c.Close(websocket.StatusNormalClosure, "")
}

// setupMetricsTopics creates the attacker's 2,000 topics, pipelined, before the
// victim's idle window.
func setupMetricsTopics(ctx context.Context, r *rowRun) (string, error) {
	a, err := r.rig.rawHello(attackerIP(r.id, 0), r.rig.tok.attacker)
	if err != nil {
		return "attacker hello", err
	}
	defer a.Close()
	begun := time.Now()
	var req []byte
	for i := range metricsCount {
		req = protocol.AppendCreateTopicRequest(req, uint32(i), fmt.Sprintf("a.m.%05d", i))
	}
	errc := make(chan error, 1)
	go func() { _, err := a.Write(req); errc <- err }()
	_ = a.SetReadDeadline(time.Now().Add(60 * time.Second))
	bad := 0
	for range metricsCount {
		code, _, err := readResponse(a)
		if err != nil {
			return "create topics", err
		}
		if code != protocol.CodeOK && code != protocol.CodeTopicExists {
			bad++
		}
	}
	if err := <-errc; err != nil {
		return "create topics", err
	}
	return fmt.Sprintf("%d topics created in %s (%d refused)", metricsCount, time.Since(begun).Round(10*time.Millisecond), bad), nil
}

// attackMetrics: /metrics fetched in a loop by 4 clients, for half the
// attack without a token (refused: with -auth-file it needs one by
// default), then with a metrics token (cached or bounded: 200, or 429
// past a bound, and the victim's p99 holds).
func attackMetrics(ctx context.Context, r *rowRun) (string, error) {
	g := r.rig
	half := make(chan struct{})
	time.AfterFunc(r.d/2, func() { close(half) })
	open := fetchMetrics(g, r.id, "", half)
	line := fmt.Sprintf("%d clients fetching /metrics with %d topics, no token: %s", metricsClients, metricsCount, open)
	var errs []error
	if open.codes[http.StatusUnauthorized] != open.n {
		errs = append(errs, fmt.Errorf("/metrics without a token answered %s, want 401 only", joinStatus(open.codes)))
	}
	tok := fetchMetrics(g, r.id, g.tok.metrics, r.stop)
	line += fmt.Sprintf("; with a metrics token: %s", tok)
	if tok.codes[http.StatusOK] == 0 || tok.codes[http.StatusOK]+tok.codes[http.StatusTooManyRequests] != tok.n {
		errs = append(errs, fmt.Errorf("/metrics with the metrics token answered %s, want 200 (or 429 while bounded)", joinStatus(tok.codes)))
	}
	return line, errors.Join(errs...)
}

// fetched is what row 11's clients got.
type fetched struct {
	n     int
	codes map[int]int
	bytes int64
	took  time.Duration
}

func (f fetched) String() string {
	if f.n == 0 {
		return "no answer"
	}
	return fmt.Sprintf("%d requests (%s), %d KB and %s a request on average", f.n, joinStatus(f.codes),
		f.bytes/int64(f.n)/1000, ms(f.took/time.Duration(f.n)))
}

func joinStatus(codes map[int]int) string {
	var parts []string
	for c, n := range codes {
		parts = append(parts, fmt.Sprintf("%d x%d", c, n))
	}
	return strings.Join(parts, ", ")
}

// fetchMetrics has metricsClients clients GET /metrics with token until stop.
func fetchMetrics(g *threatRig, row, token string, stop <-chan struct{}) fetched {
	var mu sync.Mutex
	f := fetched{codes: map[int]int{}}
	var wg sync.WaitGroup
	for i := range metricsClients {
		wg.Go(func() {
			hc := g.httpClient(attackerIP(row, i))
			for !isClosed(stop) {
				begun := time.Now()
				st, body, _, err := g.request(hc, http.MethodGet, "/metrics", token, nil)
				if err != nil {
					st = -1
				}
				mu.Lock()
				f.n++
				f.codes[st]++
				f.bytes += int64(len(body))
				f.took += time.Since(begun)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return f
}

// attackCORS: a page of another origin sends the victim's browser's
// DELETE of a victim topic; without an origin in the allow-list it is
// refused (the preflight does not allow it, the request is 403) and the
// topic is still there. Reads stay open to any origin.
func attackCORS(ctx context.Context, r *rowRun) (string, error) {
	g := r.rig
	if err := g.victim.check.CreateTopic(ctx, "v.cors"); err != nil && !errors.Is(err, client.ErrTopicExists) {
		return "create v.cors", err
	}
	hc := g.httpClient("127.0.0.1")
	pre, _, ph, err := g.request(hc, http.MethodOptions, "/topics/v.cors", "", nil,
		"Origin", evilOrigin, "Access-Control-Request-Method", "DELETE", "Access-Control-Request-Headers", "authorization")
	if err != nil {
		return "preflight", err
	}
	allowed := pre < 300 && strings.Contains(strings.ToUpper(ph.Get("Access-Control-Allow-Methods")), "DELETE")
	del, _, _, err := g.request(hc, http.MethodDelete, "/topics/v.cors", g.tok.victim, nil, "Origin", evilOrigin)
	if err != nil {
		return "delete", err
	}
	_, ierr := g.victim.check.TopicInfo(ctx, "v.cors")
	get, _, gh, _ := g.request(hc, http.MethodGet, "/topics/v.cors/info", g.tok.victim, nil, "Origin", evilOrigin)
	line := fmt.Sprintf("preflight of DELETE from %s: %d, allows DELETE %t; the DELETE: %d; topic still there: %t; a read from it: %d, Access-Control-Allow-Origin %q",
		evilOrigin, pre, allowed, del, ierr == nil, get, gh.Get("Access-Control-Allow-Origin"))
	var errs []error
	if allowed {
		errs = append(errs, errors.New("the preflight allows DELETE from any origin"))
	}
	if del != http.StatusForbidden {
		errs = append(errs, fmt.Errorf("the cross-origin DELETE answered %d, want 403", del))
	}
	if ierr != nil {
		errs = append(errs, fmt.Errorf("the victim's topic is gone: %w", ierr))
	}
	return line, errors.Join(errs...)
}

// attackMetricsPprof: the attacker's token, admin on a.* only, asks for
// /metrics and /debug/pprof/; it sees no victim topic or group, and
// profiles need admin on *.
func attackMetricsPprof(ctx context.Context, r *rowRun) (string, error) {
	g := r.rig
	if err := g.victim.check.CommitOffset(ctx, "v.g13", "v.r13", 0); err != nil {
		return "victim commit", err
	}
	hc := g.httpClient(attackerIP(r.id, 0))
	mst, body, _, err := g.request(hc, http.MethodGet, "/metrics", g.tok.attacker, nil)
	if err != nil {
		return "metrics", err
	}
	shows := mst == http.StatusOK && (strings.Contains(string(body), `topic="v.`) || strings.Contains(string(body), `group="v.`))
	pst, _, _, err := g.request(hc, http.MethodGet, "/debug/pprof/", g.tok.attacker, nil)
	if err != nil {
		return "pprof", err
	}
	vst, _, _, _ := g.request(g.httpClient("127.0.0.1"), http.MethodGet, "/debug/pprof/", g.tok.victim, nil)
	line := fmt.Sprintf("token admin on a.* only: /metrics %d (shows the victim's topics or groups: %t), /debug/pprof/ %d; the victim's (admin on v.*, shared.*): /debug/pprof/ %d",
		mst, shows, pst, vst)
	var errs []error
	if shows {
		errs = append(errs, errors.New("/metrics shows another tenant's topics or groups"))
	}
	if pst != http.StatusForbidden && pst != http.StatusUnauthorized {
		errs = append(errs, fmt.Errorf("/debug/pprof/ answered %d to a token without admin on *", pst))
	}
	if vst != http.StatusForbidden && vst != http.StatusUnauthorized {
		errs = append(errs, fmt.Errorf("/debug/pprof/ answered %d to the victim's token, without admin on *", vst))
	}
	return line, errors.Join(errs...)
}
