package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/haraqa/haraqa/broker/httpapi"
	hserver "github.com/haraqa/haraqa/broker/server"
	"github.com/haraqa/haraqa/storage"
)

// TestWatchesReleased: watches naming one quiet topic many
// times, opened and closed one after another, leave no storage watch
// armed once closed, hold one each while open, and a watch naming more
// entries than MaxWatchTopics (repeats included) is refused.
func TestWatchesReleased(t *testing.T) {
	s := startREST(t, httpapi.DefaultConfig())
	do(t, "PUT", s.url+"/topics/quiet", "").want(t, "create quiet", 201)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws := "ws" + strings.TrimPrefix(s.url, "http") + "/ws/topics"
	names := strings.TrimSuffix(strings.Repeat("quiet,", httpapi.DefaultMaxWatchTopics), ",")
	armed := func() int {
		t.Helper()
		n, err := s.Log(t, "quiet").Watches()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// waitArmed waits up to 5 s for want storage watches on quiet: the
	// server arms them after it answers the upgrade, and releases them
	// after it reads the close.
	waitArmed := func(want int, what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for n := armed(); n != want; n = armed() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d storage watches armed on the topic, want %d", what, n, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i := range 100 {
		c, resp, err := websocket.Dial(ctx, ws, &websocket.DialOptions{HTTPHeader: http.Header{"X-Topics": {names}}})
		if err != nil {
			t.Fatalf("watch %d: %v (%v)", i, err, resp)
		}
		waitArmed(1, fmt.Sprintf("watch %d open", i))
		c.Close(websocket.StatusNormalClosure, "")
		waitArmed(0, fmt.Sprintf("watch %d closed", i))
	}
	up := []string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}
	do(t, "GET", s.url+"/ws/topics", "", append(up, "X-Topics", names+",quiet")...).want(t, "one name past MaxWatchTopics", 400)
	if n := armed(); n != 0 {
		t.Fatalf("%d storage watches armed after every watch closed", n)
	}
}

// fetch GETs url with token (if any) and returns the status and body; it
// reports errors rather than failing, for use on other goroutines.
func fetch(url, token string, hdr ...string) (int, http.Header, string, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0, nil, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b), err
}

// TestMetricsBounded: on a server with many topics,
// concurrent /metrics requests share one rendering instead of each
// computing the whole text.
func TestMetricsBounded(t *testing.T) {
	s := startREST(t, httpapi.DefaultConfig())
	const topics = 2000
	for i := range topics {
		if err := s.Store.CreateTopic(fmt.Sprintf("t%05d", i)); err != nil {
			t.Fatal(err)
		}
	}
	const clients = 8
	bodies := make([]string, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range clients {
		wg.Go(func() {
			<-start
			var code int
			code, _, bodies[i], errs[i] = fetch(s.url+"/metrics", "")
			if errs[i] == nil && code != 200 {
				errs[i] = fmt.Errorf("status %d", code)
			}
		})
	}
	close(start)
	wg.Wait()
	distinct := map[string]bool{}
	for i, b := range bodies {
		if errs[i] != nil {
			t.Fatalf("client %d: %v", i, errs[i])
		}
		if !strings.Contains(b, fmt.Sprintf(`haraqa_topic_next_offset{topic="t%05d"} 0`, topics-1)) {
			t.Fatalf("client %d: the last topic's series is missing", i)
		}
		distinct[b] = true
	}
	// One rendering, or two if the first expired while the requests came.
	if len(distinct) > 2 {
		t.Fatalf("%d concurrent requests got %d different texts: each computed its own", clients, len(distinct))
	}
	if got := metric(t, bodies[0], "haraqa_metrics_renders_total"); got > 2 {
		t.Fatalf("%v renders for %d concurrent requests", got, clients)
	}
}

// TestMetricsNeedsToken: with -auth-file, /metrics needs a
// token with the metrics right by default and shows only the topics and
// groups of its patterns; -auth-metrics=false opens it again.
func TestMetricsNeedsToken(t *testing.T) {
	cfg, err := hserver.ParseFlags([]string{"-auth-file", "auth", t.TempDir()}, io.Discard)
	if err != nil || !cfg.HTTP.AuthMetrics {
		t.Fatalf("-auth-file alone: AuthMetrics %v (%v), want true", cfg.HTTP.AuthMetrics, err)
	}
	cfg, err = hserver.ParseFlags([]string{"-auth-file", "auth", "-auth-metrics=false", t.TempDir()}, io.Discard)
	if err != nil || cfg.HTTP.AuthMetrics {
		t.Fatalf("-auth-metrics=false: AuthMetrics %v (%v), want false", cfg.HTTP.AuthMetrics, err)
	}

	u, s := startAuthHTTPWith(t, func(*hserver.Config) {}) // the defaults
	for _, topic := range []string{"orders.eu", "billing"} {
		if err := s.Store.CreateTopic(topic); err != nil {
			t.Fatal(err)
		}
		if err := s.Log(t, topic).CommitOffset("g-"+topic, storage.Commit{Offset: 0}); err != nil {
			t.Fatal(err)
		}
	}
	mine := []string{`haraqa_topic_next_offset{topic="orders.eu"}`, `haraqa_consumer_group_committed_offset{group="g-orders.eu",topic="orders.eu"}`}
	theirs := []string{`topic="billing"`, `group="g-billing"`}
	for _, tc := range []struct {
		token    string
		want     int
		see, not []string
	}{
		{"", 401, nil, nil},
		{"wrong", 401, nil, nil},
		{tokC, 403, nil, nil},      // consume is not the metrics right
		{tokTA, 200, mine, theirs}, // admin holds it, on its own topics
		{tokM, 200, mine, theirs},
		{tokMAll, 200, append(mine, theirs...), nil},
	} {
		code, _, body, err := fetch(u+"/metrics", tc.token)
		if err != nil || code != tc.want {
			t.Fatalf("/metrics with %q: %d %v, want %d", tc.token, code, err, tc.want)
		}
		for _, m := range tc.see {
			if !strings.Contains(body, m) {
				t.Errorf("/metrics with %q lacks %s", tc.token, m)
			}
		}
		for _, m := range tc.not {
			if strings.Contains(body, m) {
				t.Errorf("/metrics with %q shows %s", tc.token, m)
			}
		}
		if code == 200 && !strings.Contains(body, "go_goroutines") {
			t.Errorf("/metrics with %q lacks the server-wide series", tc.token)
		}
	}

	open, _ := startAuthHTTPWith(t, func(c *hserver.Config) { c.HTTP.AuthMetrics = false })
	if code, _, _, err := fetch(open+"/metrics", ""); err != nil || code != 200 {
		t.Fatalf("/metrics with -auth-metrics=false and no token: %d %v, want 200", code, err)
	}
}

// TestCORSWrites: on a server without tokens and the default
// -cors, a page of any origin may read, but its preflights for writes,
// its deletes and its form POSTs are refused 403 and change nothing,
// unless its origin is in CORSOrigins or is the server's own.
func TestCORSWrites(t *testing.T) {
	s := startREST(t, httpapi.DefaultConfig())
	topic := s.url + "/topics/victim"
	do(t, "PUT", topic, "").want(t, "create without Origin", 201)
	evil := "http://evil.test"

	r := do(t, "OPTIONS", topic, "", "Origin", evil, "Access-Control-Request-Method", "DELETE")
	if r.code != 403 || strings.Contains(r.h.Get("Access-Control-Allow-Methods"), "DELETE") {
		t.Fatalf("preflight for DELETE from another origin: %d %v, want 403", r.code, r.h)
	}
	do(t, "DELETE", topic, "", "Origin", evil).want(t, "DELETE from another origin", 403)
	do(t, "POST", topic, "x", "Origin", evil, "Content-Type", "text/plain", "X-Sizes", "1").want(t, "form POST from another origin", 403)
	do(t, "PATCH", topic+"?id=0", "", "Origin", evil).want(t, "PATCH from another origin", 403)
	do(t, "PUT", s.url+"/topics/planted", "", "Origin", evil).want(t, "PUT from another origin", 403)
	if info := do(t, "GET", topic+"/info", "").want(t, "the topic is still there", 200); !strings.Contains(info.body, `"next":0`) {
		t.Fatalf("the refused POST was stored: %s", info.body)
	}

	r = do(t, "GET", topic+"/info", "", "Origin", evil).want(t, "read from another origin", 200)
	if r.h.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("read from another origin: CORS headers %v", r.h)
	}
	if r := do(t, "OPTIONS", topic, "", "Origin", evil, "Access-Control-Request-Method", "GET"); r.code != 204 {
		t.Fatalf("preflight for GET from another origin: %d", r.code)
	}
	do(t, "POST", topic, "x", "Origin", s.url, "X-Sizes", "1").want(t, "POST from the server's own origin (the API docs)", 200)

	cfg := httpapi.DefaultConfig()
	cfg.CORSOrigins = []string{"http://app.test"}
	listed := startREST(t, cfg)
	do(t, "PUT", listed.url+"/topics/mine", "").want(t, "create", 201)
	r = do(t, "OPTIONS", listed.url+"/topics/mine", "", "Origin", "http://app.test", "Access-Control-Request-Method", "DELETE")
	if r.code != 204 || r.h.Get("Access-Control-Allow-Methods") != "DELETE" {
		t.Fatalf("preflight for DELETE from a listed origin: %d %v", r.code, r.h)
	}
	do(t, "DELETE", listed.url+"/topics/mine", "", "Origin", "http://app.test").want(t, "DELETE from a listed origin", 204)
	do(t, "PUT", listed.url+"/topics/x", "", "Origin", evil).want(t, "PUT from an origin not listed", 403)

	cfg = httpapi.DefaultConfig()
	cfg.CORS = false
	off := startREST(t, cfg)
	do(t, "PUT", off.url+"/topics/x", "").want(t, "create", 201)
	do(t, "POST", off.url+"/topics/x", "x", "Origin", evil, "Content-Type", "text/plain", "X-Sizes", "1").want(t, "form POST with CORS off", 403)

	if _, err := httpapi.ParseOrigins("app.test"); err == nil {
		t.Error("an origin without a scheme was accepted")
	}
	if o, err := httpapi.ParseOrigins(" https://a.test, *,http://b.test:8080 "); err != nil || len(o) != 3 {
		t.Errorf("ParseOrigins: %q %v", o, err)
	}
}

// TestAdminOnAll: a token that is admin on its own topics
// only is refused pprof, which needs admin on "*", and its /metrics shows
// only its own topics (TestMetricsNeedsToken).
func TestAdminOnAll(t *testing.T) {
	u, _ := startAuthHTTPWith(t, func(c *hserver.Config) {
		c.HTTP.Pprof = true
		c.HTTP.AuthMetrics = true
	})
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/debug/pprof/", "", 401},
		{"/debug/pprof/", tokTA, 403},
		{"/debug/pprof/cmdline", tokTA, 403},
		{"/debug/pprof/", tokMAll, 403},
		{"/debug/pprof/", tokA, 200},
	} {
		if code, _, body, err := fetch(u+tc.path, tc.token); err != nil || code != tc.want {
			t.Errorf("%s with %q: %d %.80q %v, want %d", tc.path, tc.token, code, body, err, tc.want)
		}
	}
}

// TestMetricsRate: clients asking for /metrics in a loop get
// at most MaxMetricsRate responses a second (and the burst), the others
// 429 with Retry-After; once the bucket refills, a scrape is served again.
func TestMetricsRate(t *testing.T) {
	cfg := httpapi.DefaultConfig()
	cfg.MaxMetricsRate = 2 // a burst of 4
	s := startREST(t, cfg)
	served, refused := 0, 0
	for range 20 {
		code, hdr, body, err := fetch(s.url+"/metrics", "")
		switch {
		case err != nil:
			t.Fatal(err)
		case code == http.StatusOK:
			served++
		case code == http.StatusTooManyRequests && hdr.Get("Retry-After") == "1" && strings.Contains(body, "-max-metrics-rate"):
			refused++
		default:
			t.Fatalf("/metrics: %d %q", code, body)
		}
	}
	// 20 requests take well under a second here; a slow machine may earn
	// a token or two meanwhile.
	if served < 4 || served > 8 || refused != 20-served {
		t.Fatalf("%d served, %d refused; want the burst of 4 (and what refills meanwhile) served", served, refused)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, _, _, err := fetch(s.url+"/metrics", "")
		if err == nil && code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics not served again after the bucket refilled: %d %v", code, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRefusalsPaced: a client looping on /metrics without a
// token gets its first second's worth of 401s at once, then one every
// 1/-http-refusal-rate: 30 at 10 a second take at least 2 s, the paced
// ones counted; a request with a valid token from the same address is
// not held meanwhile.
func TestRefusalsPaced(t *testing.T) {
	u, _ := startAuthHTTPWith(t, func(c *hserver.Config) { c.HTTP.RefusalRate = 10 })
	const n = 30
	begun := time.Now()
	for i := range n {
		if code, _, _, err := fetch(u+"/metrics", ""); err != nil || code != http.StatusUnauthorized {
			t.Fatalf("request %d without a token: %d, %v; want 401", i, code, err)
		}
		if i == n/2 {
			ok := time.Now()
			if code, _, _, err := fetch(u+"/topics/orders.eu/info", tokA); err != nil || code == http.StatusUnauthorized {
				t.Fatalf("a valid token's request: %d, %v", code, err)
			}
			if d := time.Since(ok); d > time.Second {
				t.Fatalf("a valid token's request waited %s behind the refusals", d)
			}
		}
	}
	if took, least := time.Since(begun), 2*time.Second-100*time.Millisecond; took < least {
		t.Fatalf("%d refusals answered in %s at 10 a second: not paced", n, took)
	}
	_, _, body, err := fetch(u+"/metrics", tokMAll)
	if err != nil {
		t.Fatal(err)
	}
	if got := metric(t, body, "haraqa_http_refusals_paced_total"); got < n-10 {
		t.Fatalf("haraqa_http_refusals_paced_total %v, want at least %d", got, n-10)
	}
}
