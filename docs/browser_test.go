//go:build unix

package docs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/httpapi"
	"github.com/haraqa/haraqa/docs"
)

// operation is what the rendered pages must show for one route of the spec.
type operation struct {
	route, tag, id, summary string
}

// operations are the spec's routes with their tag, operationId and summary.
// TestBrowser checks this table against the spec, so it cannot drift.
var operations = []operation{
	{"GET /topics", "Topics", "listTopics", "List topics"},
	{"PUT /topics/{topic}", "Topics", "createTopic", "Create a topic"},
	{"DELETE /topics/{topic}", "Topics", "deleteTopic", "Delete a topic"},
	{"PATCH /topics/{topic}", "Topics", "truncateTopic", "Truncate a topic"},
	{"GET /topics/{topic}/info", "Topics", "topicInfo", "Topic information"},
	{"GET /ws/topics", "Topics", "watchTopics", "Watch topics (websocket)"},
	{"POST /topics/{topic}", "Messages", "produce", "Produce messages"},
	{"GET /topics/{topic}", "Messages", "consume", "Consume messages"},
	{"GET /healthz", "Operations", "healthz", "Liveness"},
	{"GET /readyz", "Operations", "readyz", "Readiness"},
	{"GET /metrics", "Operations", "metrics", "Prometheus metrics"},
	{"GET /cluster", "Cluster", "clusterStatus", "Cluster status"},
	{"POST /cluster/members", "Cluster", "addMember", "Add a server"},
	{"DELETE /cluster/members/{id}", "Cluster", "removeMember", "Remove a member"},
}

// recorder wraps the test server's handler and remembers the paths asked
// for and every request answered with an error, such as an asset the page
// asked for and did not get.
type recorder struct {
	h        http.Handler
	mu       sync.Mutex
	failures []string
	paths    []string
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w}
	rec.h.ServeHTTP(sw, r)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.paths = append(rec.paths, r.URL.Path)
	if sw.status >= 400 {
		rec.failures = append(rec.failures, fmt.Sprintf("%s %s: %d", r.Method, r.URL.Path, sw.status))
	}
}

func (rec *recorder) take() (paths, failures []string) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	paths, failures = rec.paths, rec.failures
	rec.paths, rec.failures = nil, nil
	return paths, failures
}

// TestBrowser serves the server's HTTP port handler (httpapi, docs on) on
// a loopback listener, loads its Redoc and Swagger UI pages in headless
// Chromium, which can reach nothing but that listener, and checks that the scripts
// rendered the spec: the operations' summaries are not in the pages' HTML,
// only in the DOM the scripts build from openapi.yaml. It also checks that
// every request the pages made went to the test server and succeeded.
//
// Without Chromium the test is skipped, unless HARAQA_BROWSER_TEST=1 (set by
// make test after .ci/chromium installs it).
func TestBrowser(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("HARAQA_BROWSER_TEST") == "1" {
			t.Fatalf("HARAQA_BROWSER_TEST=1 but chromium is not installed (run .ci/chromium): %v", err)
		}
		t.Skip("chromium is not installed; .ci/chromium installs it")
	}

	routes, err := specRoutes(docs.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	var tableRoutes []string
	spec := string(docs.OpenAPI())
	for _, op := range operations {
		tableRoutes = append(tableRoutes, op.route)
		for _, line := range []string{"operationId: " + op.id, "summary: " + op.summary, "tags: [" + op.tag + "]"} {
			if !strings.Contains(spec, "\n      "+line+"\n") {
				t.Errorf("spec has no %q (route %s)", line, op.route)
			}
		}
	}
	slices.Sort(tableRoutes)
	if !slices.Equal(tableRoutes, routes) {
		t.Fatalf("test table routes %q, spec routes %q", tableRoutes, routes)
	}

	// The server's HTTP port handler, docs on (as -docs is by default).
	// The recorder sees requests outside /docs/ (a favicon, say) too.
	rec := &recorder{h: httpapi.New(httpapi.DefaultConfig())}
	srv := httptest.NewServer(rec) // 127.0.0.1:0
	defer srv.Close()

	for _, page := range []string{"redocs", "swagger"} {
		resp, err := http.Get(srv.URL + "/docs/" + page)
		if err != nil {
			t.Fatal(err)
		}
		var raw bytes.Buffer
		_, err = raw.ReadFrom(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /docs/%s: %d, %v", page, resp.StatusCode, err)
		}
		for _, op := range operations {
			if strings.Contains(raw.String(), op.summary) {
				t.Fatalf("/docs/%s HTML already contains %q: the check would not prove rendering", page, op.summary)
			}
		}
	}
	rec.take()

	// Swagger UI shows every operation on one page.
	t.Run("swagger", func(t *testing.T) {
		dom := render(t, chromium, srv.URL+"/docs/swagger", rec)
		for _, op := range operations {
			method, path, _ := strings.Cut(op.route, " ")
			for _, want := range []string{
				op.summary,
				`data-path="` + path + `"`,
				`href="#/` + op.tag + `/` + op.id + `"`,
				`opblock-` + strings.ToLower(method),
			} {
				if !strings.Contains(dom, want) {
					t.Errorf("%s: rendered page has no %q", op.route, want)
				}
			}
		}
	})
	// Redoc shows the operations of one tag at a time: #/topics, ...
	for _, tag := range []string{"Topics", "Messages", "Operations"} {
		t.Run("redocs#"+tag, func(t *testing.T) {
			dom := render(t, chromium, srv.URL+"/docs/redocs#/"+strings.ToLower(tag), rec)
			// The vendor's attribution is hidden by the page's style.
			if !strings.Contains(dom, `#redoc a[href^="https://redocly.com"] { display: none !important; }`) {
				t.Error("the rendered Redoc page lacks the rule hiding the vendor's attribution")
			}
			for _, op := range operations {
				if op.tag != tag {
					continue
				}
				_, path, _ := strings.Cut(op.route, " ")
				for _, want := range []string{op.summary, ">" + path + "<", `href="#/` + strings.ToLower(tag+"/"+op.id) + `"`} {
					if !strings.Contains(dom, want) {
						t.Errorf("%s: rendered page has no %q", op.route, want)
					}
				}
			}
		})
	}
}

// render loads pageURL in headless Chromium with every host but 127.0.0.1
// unresolvable, and returns the DOM once the page's scripts are done. It
// fails the test if the page's title was not rendered into the body, if the
// server answered any of the page's requests with an error, or if the page
// asked any other host for anything.
func render(t *testing.T, chromium, pageURL string, rec *recorder) string {
	t.Helper()
	u, err := url.Parse(pageURL)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	netLog := filepath.Join(dir, "netlog.json")
	args := []string{
		"--headless",
		"--disable-gpu",
		"--disable-dev-shm-usage",
		"--user-data-dir=" + filepath.Join(dir, "profile"),
		"--no-first-run",
		"--no-default-browser-check",
		"--disable-background-networking",
		"--disable-component-update",
		"--disable-default-apps",
		"--disable-extensions",
		"--disable-sync",
		// The network is unavailable: no name resolves but the test server's.
		"--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE " + u.Hostname(),
		// Every request the browser makes, to see what the page asked for.
		"--log-net-log=" + netLog,
		// Run the page's timers ahead until it has been idle this long.
		"--virtual-time-budget=20000",
		"--dump-dom",
		pageURL,
	}
	if os.Geteuid() == 0 {
		args = append([]string{"--no-sandbox"}, args...) // Chromium's sandbox refuses to run as root
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, args...)
	// Chromium starts several processes; on a timeout, kill them all.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	t.Logf("chromium %s: %v, %d bytes of DOM", u.Path+"#"+u.Fragment, time.Since(start).Round(time.Millisecond), stdout.Len())
	if err != nil {
		t.Fatalf("chromium %s: %v (context: %v)\nstderr:\n%s", pageURL, err, ctx.Err(), tail(stderr.String(), 3000))
	}
	dom := stdout.String()

	paths, failures := rec.take()
	if len(failures) > 0 {
		t.Errorf("the server answered the page's requests with errors: %q", failures)
	}
	if !slices.Contains(paths, "/docs/openapi.yaml") {
		t.Errorf("the page never fetched /docs/openapi.yaml; requests: %q", paths)
	}
	for _, remote := range pageRequests(t, netLog, u.Host) {
		t.Errorf("the page asked another host for %s", remote)
	}

	// The <title> is in the raw page; a rendered page shows the title again.
	body := regexp.MustCompile(`(?s)<title>.*?</title>`).ReplaceAllString(dom, "")
	if !strings.Contains(body, "haraqa HTTP API") {
		t.Errorf("%s: the API title was not rendered; DOM:\n%s\nstderr:\n%s", pageURL, tail(dom, 3000), tail(stderr.String(), 3000))
	}
	return dom
}

// pageRequests reads Chromium's NetLog and returns the URLs the page (any
// request made for a document on the test server) asked for on any other
// host. Chromium's own requests (updates, accounts) belong to no page and
// are left out.
func pageRequests(t *testing.T, netLog, host string) []string {
	t.Helper()
	b, err := os.ReadFile(netLog)
	if err != nil {
		t.Fatal(err)
	}
	var log struct {
		Constants struct {
			LogEventTypes map[string]int `json:"logEventTypes"`
		} `json:"constants"`
		Events []struct {
			Type   int `json:"type"`
			Params struct {
				URL        string `json:"url"`
				Initiator  string `json:"initiator"`
				IsolateKey string `json:"network_isolation_key"`
			} `json:"params"`
		} `json:"events"`
	}
	if err := json.Unmarshal(b, &log); err != nil {
		t.Fatalf("chromium NetLog: %v", err)
	}
	start, ok := log.Constants.LogEventTypes["URL_REQUEST_START_JOB"]
	if !ok {
		t.Fatal("chromium NetLog has no URL_REQUEST_START_JOB events")
	}
	site := "http://" + strings.Split(host, ":")[0] // the NetLog names sites without the port
	var remote []string
	seenPage := false
	for _, e := range log.Events {
		if e.Type != start || e.Params.URL == "" {
			continue
		}
		fromPage := strings.HasPrefix(e.Params.Initiator, site) || strings.HasPrefix(e.Params.IsolateKey, site+" ")
		if !fromPage {
			continue
		}
		seenPage = true
		u, err := url.Parse(e.Params.URL)
		if err == nil && (u.Scheme == "data" || u.Scheme == "blob") {
			continue // made inside the browser
		}
		if err != nil || u.Host != host {
			remote = append(remote, e.Params.URL)
		}
	}
	if !seenPage {
		t.Fatalf("chromium NetLog shows no request of the page: cannot tell what it loaded")
	}
	return remote
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
