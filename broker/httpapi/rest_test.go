package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/broker/httpapi"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// server is a broker with its HTTP API on real loopback listeners.
type server struct {
	*brokertest.Server
	api *httpapi.API
	url string
}

func startREST(t *testing.T, cfg httpapi.Config, opts ...brokertest.Option) *server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = discard
	}
	api := httpapi.New(cfg)
	opts = append(opts, func(so *storage.Options, bc *broker.Config) {
		so.OnFsync = api.ObserveFsync
		bc.ObserveRequest = api.ObserveRequest
	})
	s := brokertest.Start(t, 1, opts...)
	api.Ready(s.Broker)
	hs := httptest.NewServer(api)
	t.Cleanup(hs.Close)
	return &server{Server: s, api: api, url: hs.URL}
}

type reply struct {
	code int
	h    http.Header
	body string
}

func do(t *testing.T, method, url string, body string, hdr ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// want checks the status and, for errors, the X-Errors header and body.
func (r reply) want(t *testing.T, what string, code int) reply {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: status %d (%q, X-Errors %q), want %d", what, r.code, r.body, r.h.Get("X-Errors"), code)
	}
	if code >= 400 {
		// X-Errors is the body's one line, or the original client's
		// sentinel for it.
		msg := r.h.Get("X-Errors")
		if msg == "" || strings.Count(r.body, "\n") != 1 || strings.TrimSuffix(r.body, "\n") != msg && !slices.Contains(sentinels, msg) {
			t.Fatalf("%s: error body %q and X-Errors %q should be the same one line, or X-Errors a sentinel", what, r.body, msg)
		}
	}
	return r
}

// sentinels are the original haraqa client's X-Errors strings.
var sentinels = []string{"topic does not exist", "topic already exists", "invalid header: X-Sizes",
	"invalid message id", "invalid message limit", "invalid topic", "invalid body: body cannot be empty",
	"invalid body: invalid json entry", "invalid websocket", "no content", "server closing"}

func TestRESTRoundTrip(t *testing.T) {
	s := startREST(t, httpapi.DefaultConfig())
	u := s.url + "/topics"

	do(t, "PUT", u+"/web", "").want(t, "create", 201)
	do(t, "PUT", u+"/web", "").want(t, "create again (idempotent)", 201)
	do(t, "PUT", u+"/web2", "").want(t, "create web2", 201)
	do(t, "PUT", u+"/other", "").want(t, "create other", 201)

	if r := do(t, "GET", u, "").want(t, "list", 200); r.body != "other,web,web2" || !strings.HasPrefix(r.h.Get("Content-Type"), "text/csv") {
		t.Fatalf("list: %q %q", r.body, r.h.Get("Content-Type"))
	}
	if r := do(t, "GET", u+"?prefix=web", "", "Accept", "text/plain"); r.body != "web\nweb2\n" {
		t.Fatalf("list prefix as text: %q", r.body)
	}
	r := do(t, "GET", u+"?regex=^w.*2$", "", "Accept", "application/json").want(t, "list regex json", 200)
	var list struct{ Topics []string }
	if err := json.Unmarshal([]byte(r.body), &list); err != nil || !slices.Equal(list.Topics, []string{"web2"}) || r.h.Get("Content-Type") != "application/json" {
		t.Fatalf("list json: %q %v", r.body, err)
	}
	if r := do(t, "GET", u+"?prefix=zzz", "", "Accept", "application/json"); r.body != "{\"topics\":[]}\n" {
		t.Fatalf("empty list json: %q", r.body)
	}

	r = do(t, "POST", u+"/web", "helloabc", "X-Sizes", "5:0:3").want(t, "produce", 200)
	var pr struct{ Offset, Count int64 }
	if err := json.Unmarshal([]byte(r.body), &pr); err != nil || pr.Offset != 0 || pr.Count != 3 || r.h.Get("X-Id") != "0" {
		t.Fatalf("produce reply %q %v", r.body, err)
	}
	r = do(t, "POST", u+"/web", "xyz", "X-Sizes", "1:2").want(t, "produce 2", 200)
	if r.h.Get("X-Id") != "3" {
		t.Fatalf("second produce X-Id %q, want 3", r.h.Get("X-Id"))
	}

	r = do(t, "GET", u+"/web?id=0&limit=3", "").want(t, "consume", 200)
	if r.body != "helloabc" || r.h.Get("X-Sizes") != "5:0:3" || r.h.Get("X-Id") != "0" || r.h.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("consume: %q sizes %q id %q", r.body, r.h.Get("X-Sizes"), r.h.Get("X-Id"))
	}
	// Across batches, by headers, from the middle of a batch.
	r = do(t, "GET", u+"/web", "", "X-Id", "1", "X-Limit", "3").want(t, "consume by headers", 200)
	if r.body != "abcx" || r.h.Get("X-Sizes") != "0:3:1" || r.h.Get("X-Id") != "1" {
		t.Fatalf("consume by headers: %q sizes %q", r.body, r.h.Get("X-Sizes"))
	}
	// The query wins over the headers; no limit reads to the end.
	r = do(t, "GET", u+"/web?id=2", "", "X-Id", "0").want(t, "consume to the end", 200)
	if r.body != "abcxyz" || r.h.Get("X-Sizes") != "3:1:2" {
		t.Fatalf("consume to the end: %q %q", r.body, r.h.Get("X-Sizes"))
	}
	r = do(t, "GET", u+"/web?id=-1", "").want(t, "consume last", 200)
	if r.body != "yz" || r.h.Get("X-Id") != "4" {
		t.Fatalf("consume id=-1: %q id %q", r.body, r.h.Get("X-Id"))
	}
	r = do(t, "GET", u+"/web?id=5", "").want(t, "consume at the end", 204)
	if r.h.Get("X-Id") != "5" || r.body != "" {
		t.Fatalf("204: id %q body %q", r.h.Get("X-Id"), r.body)
	}
	if r := do(t, "GET", u+"/web?id=9", "").want(t, "consume past the end", 204); r.h.Get("X-Errors") != "no content" {
		t.Fatalf("consume past the end: X-Errors %q, want no content", r.h.Get("X-Errors"))
	}

	r = do(t, "GET", u+"/web/info", "").want(t, "info", 200)
	var info struct {
		Topic                         string
		Oldest, Next, Bytes, Segments int64
	}
	if err := json.Unmarshal([]byte(r.body), &info); err != nil || info.Topic != "web" || info.Oldest != 0 || info.Next != 5 || info.Bytes == 0 || info.Segments != 1 {
		t.Fatalf("info %q %v", r.body, err)
	}

	r = do(t, "PATCH", u+"/web?before=2", "").want(t, "truncate", 200)
	if err := json.Unmarshal([]byte(r.body), &info); err != nil || info.Oldest != 2 || info.Next != 5 {
		t.Fatalf("truncate reply %q %v", r.body, err)
	}
	r = do(t, "GET", u+"/web?id=0", "").want(t, "consume truncated", 416)
	if r.h.Get("X-Oldest") != "2" {
		t.Fatalf("416 X-Oldest %q, want 2", r.h.Get("X-Oldest"))
	}
	// Times whose nanoseconds do not fit an int64 are refused, not wrapped
	// around into a time that deletes everything.
	for _, bad := range []string{"1600-01-01T00:00:00Z", "1677-09-21T00:00:00Z", "2262-04-12T00:00:00Z", "9999-12-31T23:59:59Z"} {
		do(t, "PATCH", u+"/web?before="+bad, "").want(t, "truncate before "+bad, 400)
	}
	r = do(t, "GET", u+"/web/info", "").want(t, "info after refused truncates", 200)
	if err := json.Unmarshal([]byte(r.body), &info); err != nil || info.Oldest != 2 || info.Next != 5 {
		t.Fatalf("after out-of-range truncates %q %v", r.body, err)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	r = do(t, "PATCH", u+"/web?before="+future, "").want(t, "truncate by time", 200)
	if err := json.Unmarshal([]byte(r.body), &info); err != nil || info.Oldest != 5 {
		t.Fatalf("truncate by time %q %v", r.body, err)
	}

	do(t, "DELETE", u+"/web", "").want(t, "delete", 204)
	do(t, "DELETE", u+"/web", "").want(t, "delete again (idempotent)", 204)
	do(t, "GET", u+"/web?id=0", "").want(t, "consume deleted", 404)
	do(t, "GET", u+"/web/info", "").want(t, "info deleted", 404)
	do(t, "POST", u+"/web", "a", "X-Sizes", "1").want(t, "produce deleted", 404)
	do(t, "PATCH", u+"/web?before=1", "").want(t, "truncate deleted", 404)
}

func TestRESTBadInput(t *testing.T) {
	cfg := httpapi.DefaultConfig()
	cfg.MaxBodyBytes = 1024
	s := startREST(t, cfg)
	u := s.url + "/topics"
	do(t, "PUT", u+"/t", "").want(t, "create", 201)

	for _, c := range []struct{ name, body, sizes string }{
		{"missing X-Sizes", "abc", ""},
		{"malformed X-Sizes", "abc", "a:b"},
		{"negative size", "abc", "-1:4"},
		{"empty field", "abc", "1::2"},
		{"sizes short of the body", "abcd", "1:2"},
		{"sizes past the body", "abc", "2:2"},
		{"huge size", "abc", "99999999999999999999"},
	} {
		hdr := []string{}
		if c.sizes != "" {
			hdr = []string{"X-Sizes", c.sizes}
		}
		do(t, "POST", u+"/t", c.body, hdr...).want(t, c.name, 400)
	}
	do(t, "POST", u+"/missing", "a", "X-Sizes", "1").want(t, "produce to a missing topic", 404)

	big := strings.Repeat("x", 2048)
	do(t, "POST", u+"/t", big, "X-Sizes", "2048").want(t, "oversized body", 413)
	// The same without a Content-Length: the limit holds while reading.
	req, _ := http.NewRequest("POST", u+"/t", io.MultiReader(strings.NewReader(big)))
	req.ContentLength = -1
	req.Header.Set("X-Sizes", "2048")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 || resp.Header.Get("X-Errors") == "" {
		t.Fatalf("chunked oversized body: %d", resp.StatusCode)
	}

	for _, name := range []string{"..%2Fescape", "..", "a%2Fb", "%00", "a%20b", strings.Repeat("n", 256), "%2E%2E"} {
		r := do(t, "PUT", u+"/"+name, "")
		if r.code < 400 || r.code >= 500 {
			t.Fatalf("PUT /topics/%s: %d, want a 4xx", name, r.code)
		}
		r = do(t, "POST", u+"/"+name, "a", "X-Sizes", "1")
		if r.code < 400 || r.code >= 500 {
			t.Fatalf("POST /topics/%s: %d, want a 4xx", name, r.code)
		}
	}
	do(t, "PUT", u+"/"+strings.Repeat("n", 255), "").want(t, "255-byte name", 201)

	for _, q := range []string{"id=x", "id=1.5", "limit=0", "limit=-2", "limit=x", "wait=soon", "wait=-1s"} {
		do(t, "GET", u+"/t?"+q, "").want(t, "consume "+q, 400)
	}
	do(t, "GET", u+"?regex=(", "").want(t, "bad regex", 400)
	do(t, "GET", u+"?regex="+strings.Repeat("a", 5000), "").want(t, "long regex", 400)
	do(t, "GET", u+"?regex="+url.QueryEscape(strings.Repeat("(?:a?){1000}", 300)+"z"), "").want(t, "costly regex", 400)
	for _, q := range []string{"", "before=", "before=-1", "before=yesterday"} {
		do(t, "PATCH", u+"/t?"+q, "").want(t, "truncate "+q, 400)
	}
	// A replication factor: 1 only without a cluster; 201 creates, 202
	// leaves an existing topic.
	for _, q := range []string{"replicas=0", "replicas=x", "replicas=256", "replicas=3"} {
		do(t, "PUT", u+"/r?"+q, "").want(t, "create "+q, 400)
	}
	do(t, "PUT", u+"/r?replicas=1", "").want(t, "create on one replica", 201)
	do(t, "PUT", u+"/r?replicas=1", "").want(t, "again", 202)
	do(t, "GET", s.url+"/nope", "").want(t, "unknown route", 404)
	do(t, "POST", s.url+"/topics", "").want(t, "wrong method", 405)

	// No error message names a server path.
	for _, v := range s.Volumes {
		r := do(t, "GET", u+"/missing?id=0", "")
		if strings.Contains(r.body, v) || strings.Contains(r.h.Get("X-Errors"), v) {
			t.Fatalf("error names a volume path: %q", r.body)
		}
	}
}

func TestRESTLongPoll(t *testing.T) {
	s := startREST(t, httpapi.DefaultConfig())
	u := s.url + "/topics/lp"
	do(t, "PUT", u, "").want(t, "create", 201)

	start := time.Now()
	do(t, "GET", u+"?id=0&wait=100ms", "").want(t, "empty long poll", 204)
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Fatalf("wait=100ms answered after %v", took)
	}

	got := make(chan reply, 1)
	go func() {
		resp, err := http.Get(u + "?id=0&wait=10s")
		if err != nil {
			got <- reply{code: -1, body: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- reply{resp.StatusCode, resp.Header, string(b)}
	}()
	// Produce once the poll is parked: its watch shows in the broker's
	// storage as a waiter; polling the produce until the poll answers
	// works whatever the order.
	deadline := time.After(5 * time.Second)
	for {
		do(t, "POST", u, "late", "X-Sizes", "4").want(t, "produce", 200)
		select {
		case r := <-got:
			if r.code != 200 || !strings.HasPrefix(r.body, "late") {
				t.Fatalf("long poll: %d %q", r.code, r.body)
			}
			return
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("long poll not woken by a produce")
		}
	}
}

func TestRESTDecodesCompressedBatches(t *testing.T) {
	s := startREST(t, httpapi.DefaultConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var want strings.Builder
	var sizes []string
	for _, codec := range []protocol.Codec{protocol.CodecNone, protocol.CodecS2, protocol.CodecZstd} {
		c, err := client.Dial(ctx, s.Addr, client.WithCompression(codec), client.WithAutoCreate(true))
		if err != nil {
			t.Fatal(err)
		}
		msgs := [][]byte{[]byte(codec.String() + "-one"), []byte(strings.Repeat(codec.String(), 300))}
		if _, err := c.Produce(ctx, "z", msgs...); err != nil {
			t.Fatal(err)
		}
		c.Close()
		for _, m := range msgs {
			want.Write(m)
			sizes = append(sizes, strconv.Itoa(len(m)))
		}
	}
	r := do(t, "GET", s.url+"/topics/z?id=0", "").want(t, "consume", 200)
	if r.body != want.String() || r.h.Get("X-Sizes") != strings.Join(sizes, ":") {
		t.Fatalf("consume of compressed batches: sizes %q, want %q", r.h.Get("X-Sizes"), strings.Join(sizes, ":"))
	}
}

func TestRESTBeforeReady(t *testing.T) {
	hs := httptest.NewServer(httpapi.New(httpapi.DefaultConfig()))
	defer hs.Close()
	do(t, "GET", hs.URL+"/topics", "").want(t, "list while recovering", 503)
	do(t, "POST", hs.URL+"/topics/t", "a", "X-Sizes", "1").want(t, "produce while recovering", 503)
}

func TestCORS(t *testing.T) {
	on := startREST(t, httpapi.DefaultConfig())
	r := do(t, "GET", on.url+"/topics", "", "Origin", "http://example.test")
	if r.h.Get("Access-Control-Allow-Origin") != "*" || !strings.Contains(r.h.Get("Access-Control-Expose-Headers"), "X-Sizes") ||
		!strings.Contains(r.h.Get("Access-Control-Expose-Headers"), "X-Errors") {
		t.Fatalf("CORS headers: %v", r.h)
	}
	// A preflight is answered with what it asks for, as the original
	// server does (its client sends X-Consumer-Group).
	r = do(t, "OPTIONS", on.url+"/topics/t", "", "Origin", "http://example.test", "Access-Control-Request-Method", "GET",
		"Access-Control-Request-Headers", "x-limit, x-consumer-group")
	if r.code != 204 || r.h.Get("Access-Control-Allow-Methods") != "GET" ||
		r.h.Get("Access-Control-Allow-Headers") != "x-limit, x-consumer-group" {
		t.Fatalf("preflight: %d %v", r.code, r.h)
	}
	r = do(t, "OPTIONS", on.url+"/topics/t", "", "Origin", "http://example.test", "Access-Control-Request-Method", "GET")
	if r.code != 204 || !strings.Contains(r.h.Get("Access-Control-Allow-Headers"), "X-Consumer-Group") {
		t.Fatalf("preflight without request headers: %d %v", r.code, r.h)
	}

	cfg := httpapi.DefaultConfig()
	cfg.CORS = false
	off := startREST(t, cfg)
	r = do(t, "GET", off.url+"/topics", "", "Origin", "http://example.test")
	if r.h.Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("CORS header sent with CORS off")
	}
	if r := do(t, "OPTIONS", off.url+"/topics/t", "", "Access-Control-Request-Method", "POST"); r.code != 405 {
		t.Fatalf("preflight with CORS off: %d, want 405", r.code)
	}
}

func TestOptionalRoutes(t *testing.T) {
	on := startREST(t, httpapi.Config{Prometheus: true, Docs: true, Pprof: true})
	for _, p := range []string{"/metrics", "/docs/", "/docs/redocs", "/docs/swagger", "/docs/openapi.yaml", "/debug/pprof/"} {
		do(t, "GET", on.url+p, "").want(t, p, 200)
	}
	off := startREST(t, httpapi.Config{})
	for _, p := range []string{"/metrics", "/docs/", "/docs/redocs", "/docs/openapi.yaml", "/debug/pprof/"} {
		do(t, "GET", off.url+p, "").want(t, p+" when off", 404)
	}
	do(t, "GET", off.url+"/healthz", "").want(t, "/healthz", 200)
}

// TestRESTDecodedBytesBounded: batches that compress well are read a few
// KB at a time from storage, but a response stops adding them once its
// decoded messages reach MaxConsumeBytes, so that a read of small stored
// batches cannot build a body many times that size.
func TestRESTDecodedBytesBounded(t *testing.T) {
	cfg := httpapi.DefaultConfig()
	cfg.MaxConsumeBytes = 64 << 10
	s := startREST(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, s.Addr, client.WithCompression(protocol.CodecZstd), client.WithAutoCreate(true))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := bytes.Repeat([]byte("z"), 100<<10) // 100 KiB, a few hundred bytes compressed
	for range 20 {
		if _, err := c.Produce(ctx, "packed", msg); err != nil {
			t.Fatal(err)
		}
	}
	r := do(t, "GET", s.url+"/topics/packed?id=0&limit=20", "").want(t, "consume", 200)
	if len(r.body) != len(msg) || r.h.Get("X-Sizes") != strconv.Itoa(len(msg)) {
		t.Fatalf("one response holds %d bytes (X-Sizes %q): want the first message only", len(r.body), r.h.Get("X-Sizes"))
	}
	r = do(t, "GET", s.url+"/topics/packed?id=19", "").want(t, "consume the last", 200)
	if len(r.body) != len(msg) {
		t.Fatalf("last message: %d bytes", len(r.body))
	}
}

// TestRESTConsumeFromTime: GET /topics/{t}?time=RFC3339 reads from the
// first message appended at or after that time.
func TestRESTConsumeFromTime(t *testing.T) {
	s := startREST(t, httpapi.DefaultConfig())
	u := s.url + "/topics/tm"
	do(t, "PUT", u, "").want(t, "create", 201)
	do(t, "POST", u, "old", "X-Sizes", "3").want(t, "produce old", 200)
	mid := time.Now()
	do(t, "POST", u, "new", "X-Sizes", "3").want(t, "produce new", 200)

	r := do(t, "GET", u+"?time="+mid.UTC().Format(time.RFC3339Nano), "").want(t, "consume from mid", 200)
	if r.body != "new" || r.h.Get("X-Id") != "1" {
		t.Fatalf("consume from the time between the batches: %q X-Id %q, want new at 1", r.body, r.h.Get("X-Id"))
	}
	if r := do(t, "GET", u+"?time=2000-01-01T00:00:00Z", "").want(t, "consume from 2000", 200); r.body != "oldnew" {
		t.Fatalf("consume from before the oldest: %q", r.body)
	}
	if r := do(t, "GET", u+"?time="+mid.Add(time.Hour).UTC().Format(time.RFC3339), "").want(t, "consume from later", 204); r.h.Get("X-Id") != "2" {
		t.Fatalf("consume from after the newest: X-Id %q, want 2", r.h.Get("X-Id"))
	}
	do(t, "GET", u+"?time=yesterday", "").want(t, "a bad time", 400)
	do(t, "GET", u+"?time=1600-01-01T00:00:00Z", "").want(t, "a time out of range", 400)
	do(t, "GET", u+"?time=2000-01-01T00:00:00Z&id=0", "").want(t, "time and id", 400)
	do(t, "GET", s.url+"/topics/missing?time=2000-01-01T00:00:00Z", "").want(t, "a missing topic", 404)
}

// TestRESTRegexOnFilterWorkers: the HTTP port's list-topics regexes run on
// the broker's filter workers, under their bound: with one worker, a burst
// of costly filters is partly refused with 429 naming FilterWorkers, the
// rest answered, none failing otherwise.
func TestRESTRegexOnFilterWorkers(t *testing.T) {
	const requests = 200
	s := startREST(t, httpapi.DefaultConfig(), func(_ *storage.Options, c *broker.Config) { c.FilterWorkers = 1 })
	for i := range 2 {
		do(t, "PUT", s.url+"/topics/"+string(rune('b'+i))+strings.Repeat("a", 20), "").want(t, "create", 201)
	}
	u := s.url + "/topics?regex=" + url.QueryEscape("(?:a?){1000}z") // slow to match names of a's
	tr := &http.Transport{MaxConnsPerHost: requests, MaxIdleConnsPerHost: requests}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range requests {
		wg.Go(func() {
			resp, err := hc.Get(u)
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			codes[resp.StatusCode]++
			switch resp.StatusCode {
			case 200:
				if len(b) != 0 {
					t.Errorf("list answered %q, want no names", b)
				}
			case 429:
				if !strings.Contains(string(b), "FilterWorkers") {
					t.Errorf("refusal %q does not name FilterWorkers", b)
				}
			default:
				t.Errorf("list: %d %q", resp.StatusCode, b)
			}
		})
	}
	wg.Wait()
	if codes[200] == 0 || codes[429] == 0 {
		t.Fatalf("answers by status %v: want some 200 and some 429 (one worker, 64 waiting at most)", codes)
	}
	t.Logf("answers by status %v", codes)
	if r := do(t, "GET", s.url+"/topics?regex=^c", "").want(t, "list after the burst", 200); r.body != "c"+strings.Repeat("a", 20) {
		t.Fatalf("list after the burst: %q", r.body)
	}
}
