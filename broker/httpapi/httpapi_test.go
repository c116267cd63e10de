package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/broker/httpapi"
	"github.com/haraqa/haraqa/client"
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

func TestHealthReadyMetrics(t *testing.T) {
	s := brokertest.Start(t, 1)
	api := httpapi.New(httpapi.Config{Prometheus: true})
	hs := httptest.NewServer(api)
	defer hs.Close()

	if code, _ := get(t, hs.URL+"/healthz"); code != 200 {
		t.Fatalf("/healthz %d", code)
	}
	if code, body := get(t, hs.URL+"/readyz"); code != 503 {
		t.Fatalf("/readyz before Ready: %d %q", code, body)
	}
	if code, body := get(t, hs.URL+"/metrics"); code != 200 || strings.Contains(body, "haraqa_produced") || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics before Ready: %d", code)
	}
	api.Ready(s.Store, s.Broker)
	if code, _ := get(t, hs.URL+"/readyz"); code != 200 {
		t.Fatalf("/readyz after Ready: %d", code)
	}
	_, body := get(t, hs.URL+"/metrics")
	before := metric(t, body, "haraqa_produced_messages_total")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, s.Addr)
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
	_, body = get(t, hs.URL+"/metrics")
	if got := metric(t, body, "haraqa_produced_messages_total"); got != before+3 {
		t.Fatalf("produced messages %v, want %v", got, before+3)
	}
	if metric(t, body, `haraqa_consumed_bytes_total{path="zero_copy"}`) == 0 {
		t.Fatal("no zero-copy consume bytes counted")
	}
	if metric(t, body, "haraqa_connections") < 1 || metric(t, body, "haraqa_topics") != 1 {
		t.Fatal("connections or topics gauge wrong")
	}
	if code, _ := get(t, hs.URL+"/nope"); code != 404 {
		t.Fatalf("unknown route: %d", code)
	}
}

func TestMetricsOff(t *testing.T) {
	hs := httptest.NewServer(httpapi.New(httpapi.Config{Prometheus: false}))
	defer hs.Close()
	if code, _ := get(t, hs.URL+"/metrics"); code != 404 {
		t.Fatalf("/metrics with Prometheus off: %d, want 404", code)
	}
}
