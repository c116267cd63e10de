package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/broker/httpapi"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// metric returns the value of the sample whose line starts with name.
func metric(t *testing.T, body, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no sample %s in /metrics", name)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

var discard = slog.New(slog.DiscardHandler)

func TestHealthReady(t *testing.T) {
	s := brokertest.Start(t, 1)
	api := httpapi.New(httpapi.Config{Prometheus: true, Logger: discard})
	hs := httptest.NewServer(api)
	defer hs.Close()

	if code, _ := get(t, hs.URL+"/healthz"); code != 200 {
		t.Fatalf("/healthz %d", code)
	}
	if code, body := get(t, hs.URL+"/readyz"); code != 503 || body != "recovering\n" {
		t.Fatalf("/readyz before Ready: %d %q, want 503 saying why", code, body)
	}
	if code, body := get(t, hs.URL+"/metrics"); code != 200 || strings.Contains(body, "haraqa_topics") || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics before Ready: %d", code)
	}
	api.Ready(s.Broker)
	if code, _ := get(t, hs.URL+"/readyz"); code != 200 {
		t.Fatalf("/readyz after Ready: %d", code)
	}
}

// TestMetricsMove drives traffic over both protocols and checks that the
// metrics follow it.
func TestMetricsMove(t *testing.T) {
	s := startREST(t, httpapi.DefaultConfig(), func(so *storage.Options, _ *broker.Config) {
		so.Fsync = storage.FsyncAlways
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, s.Addr, client.WithAutoCreate(true))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Produce(ctx, "m", []byte("a"), []byte("b"), []byte("c")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Consume(ctx, "m", 0, 3); err != nil {
		t.Fatal(err)
	}
	do(t, "POST", s.url+"/topics/m", "dede", "X-Sizes", "2:2").want(t, "produce", 200)
	do(t, "GET", s.url+"/topics/m?id=3", "").want(t, "consume", 200)
	do(t, "PUT", s.url+"/topics/idle", "").want(t, "create", 201)

	_, body := get(t, s.url+"/metrics")
	for name, want := range map[string]float64{
		`haraqa_produced_messages_total{topic="m"}`:                                           5,
		`haraqa_consumed_messages_total{topic="m"}`:                                           5,
		`haraqa_produced_messages_total{topic="idle"}`:                                        0,
		`haraqa_topic_next_offset{topic="m"}`:                                                 5,
		`haraqa_topics`:                                                                       2,
		`haraqa_request_duration_seconds_count{op="produce"}`:                                 1,
		`haraqa_request_duration_seconds_count{op="consume"}`:                                 1,
		`haraqa_http_request_duration_seconds_count{code="200",route="POST /topics/{topic}"}`: 1,
		`haraqa_http_request_duration_seconds_count{code="201",route="PUT /topics/{topic}"}`:  1,
	} {
		if got := metric(t, body, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	for _, name := range []string{
		`haraqa_produced_bytes_total{topic="m"}`,
		`haraqa_consumed_bytes_total{topic="m"}`,
		`haraqa_topic_bytes{topic="m"}`,
		`haraqa_consume_sent_bytes_total{path="zero_copy"}`,
		`haraqa_fsync_duration_seconds_count`,
		`haraqa_connections`,
		`haraqa_volume_segments{volume="` + s.Volumes[0] + `"}`,
		`haraqa_volume_bytes{volume="` + s.Volumes[0] + `"}`,
	} {
		if metric(t, body, name) <= 0 {
			t.Errorf("%s is not above 0", name)
		}
	}
	// Deleted topics leave the metrics, once the snapshot served expires.
	do(t, "DELETE", s.url+"/topics/idle", "").want(t, "delete", 204)
	deadline := time.Now().Add(15 * time.Second)
	for _, body := get(t, s.url+"/metrics"); strings.Contains(body, `topic="idle"`); _, body = get(t, s.url+"/metrics") {
		if time.Now().After(deadline) {
			t.Fatal("a deleted topic still has metrics")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClusterRoutesWithoutCluster: a server not in a cluster answers its
// cluster routes 400, and a member entry past the bound is refused
// before anything reads it as one.
func TestClusterRoutesWithoutCluster(t *testing.T) {
	s := brokertest.Start(t, 1)
	api := httpapi.New(httpapi.Config{Logger: discard})
	api.Ready(s.Broker)
	hs := httptest.NewServer(api)
	defer hs.Close()
	for _, c := range []struct {
		method, path, body string
	}{
		{"GET", "/cluster", ""},
		{"POST", "/cluster/members", "127.0.0.1:1/2/3"},
		{"POST", "/cluster/members", " \n"},
		{"POST", "/cluster/members", strings.Repeat("a", protocol.MaxMemberEntry+1)},
		{"DELETE", "/cluster/members/127.0.0.1:1", ""},
	} {
		req, _ := http.NewRequest(c.method, hs.URL+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Errors") == "" {
			t.Errorf("%s %s (%d bytes): %d %q, want 400 with X-Errors", c.method, c.path, len(c.body), resp.StatusCode, b)
		}
	}
}
