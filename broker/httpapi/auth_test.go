package httpapi_test

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/haraqa/haraqa/broker/brokertest"
	hserver "github.com/haraqa/haraqa/broker/server"
)

const (
	tokPC   = "http-token-produce-consume"
	tokC    = "http-token-consume"
	tokA    = "http-token-admin"
	tokLogs = "http-token-logs"
	// tokTA is a tenant's admin, on orders.* alone; tokM holds the metrics
	// right on orders.*, tokMAll on every topic.
	tokTA   = "http-token-tenant-admin"
	tokM    = "http-token-metrics-orders"
	tokMAll = "http-token-metrics-all"
)

func sha(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}

// startAuthHTTP starts a server with an HTTP port and an auth file, and
// returns the HTTP port's base URL.
func startAuthHTTP(t *testing.T, authMetrics bool) string {
	t.Helper()
	u, _ := startAuthHTTPWith(t, func(c *hserver.Config) { c.HTTP.AuthMetrics = authMetrics })
	return u
}

// startAuthHTTPWith is startAuthHTTP with the defaults as adjust leaves
// them; it returns the server too.
func startAuthHTTPWith(t *testing.T, adjust func(*hserver.Config)) (string, *brokertest.Server) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "auth")
	rules := sha(tokPC) + " produce,consume orders.*\n" + sha(tokC) + " consume orders.*\n" +
		sha(tokA) + " admin *\n" + sha(tokLogs) + " consume logs\n" + sha(tokTA) + " admin orders.*\n" +
		sha(tokM) + " metrics orders.*\n" + sha(tokMAll) + " metrics *\n"
	if err := os.WriteFile(file, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := brokertest.Config(t.TempDir())
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.AuthFile = file
	adjust(&cfg)
	s, err := brokertest.StartConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return "http://" + s.Server.HTTPAddr().String(), s
}

func doAuth(t *testing.T, method, url, token, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestAuthHTTPRights(t *testing.T) {
	u := startAuthHTTP(t, false)
	for _, topic := range []string{"orders.eu", "billing", "logs"} {
		doAuth(t, "PUT", u+"/topics/"+topic, tokA, "")
		if r, b := doAuth(t, "POST", u+"/topics/"+topic, tokA, "m", "X-Sizes", "1"); r.StatusCode != 200 {
			t.Fatalf("admin produce to %s: %d %s", topic, r.StatusCode, b)
		}
	}
	for i, tc := range []struct {
		method, path, token, body string
		want                      int
	}{
		{"GET", "/topics/orders.eu?id=0&limit=1", "", "", 401},
		{"GET", "/topics/orders.eu?id=0&limit=1", "wrong", "", 401},
		{"GET", "/topics", "", "", 401},
		{"GET", "/topics/orders.eu?id=0&limit=1", tokC, "", 200},
		{"GET", "/topics/billing?id=0&limit=1", tokC, "", 403}, // a token for another topic
		{"GET", "/topics/logs?id=0&limit=1", tokLogs, "", 200},
		{"POST", "/topics/orders.eu", tokPC, "x", 200},
		{"POST", "/topics/orders.eu", tokC, "x", 403},
		{"POST", "/topics/billing", tokPC, "x", 403},
		{"GET", "/topics/orders.eu/info", tokC, "", 200},
		{"GET", "/topics/billing/info", tokC, "", 403},
		{"PUT", "/topics/orders.x", tokPC, "", 403},
		{"PUT", "/topics/orders.x", tokA, "", 201},
		{"PATCH", "/topics/orders.eu?id=0", tokPC, "", 403},
		{"DELETE", "/topics/orders.eu", tokC, "", 403},
		{"DELETE", "/topics/orders.eu", tokPC, "", 403},
		{"DELETE", "/topics/orders.x", tokA, "", 204},
		{"GET", "/healthz", "", "", 200},
		{"GET", "/readyz", "", "", 200},
		{"GET", "/metrics", "", "", 200},
		{"GET", "/docs/openapi.yaml", "", "", 200},
	} {
		r, b := doAuth(t, tc.method, u+tc.path, tc.token, tc.body, "X-Sizes", "1")
		if r.StatusCode != tc.want {
			t.Errorf("%d: %s %s with %q: %d %q, want %d", i, tc.method, tc.path, tc.token, r.StatusCode, b, tc.want)
		}
		if r.StatusCode == 401 && !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%d: 401 without WWW-Authenticate: Bearer", i)
		}
	}
	r, b := doAuth(t, "GET", u+"/topics", tokC, "")
	if r.StatusCode != 200 || b != "orders.eu" {
		t.Errorf("list with a consume token on orders.*: %d %q", r.StatusCode, b)
	}
}

func TestAuthHTTPMetrics(t *testing.T) {
	u := startAuthHTTP(t, true)
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/metrics", "", 401},
		{"/metrics", tokC, 403},
		{"/metrics", tokA, 200}, // admin holds the metrics right
		{"/metrics", tokM, 200},
		{"/metrics", tokMAll, 200},
		{"/docs/openapi.yaml", "", 401},
		{"/docs/openapi.yaml", tokC, 200},
		{"/docs/openapi.yaml", tokA, 200},
		{"/healthz", "", 200},
	} {
		if r, b := doAuth(t, "GET", u+tc.path, tc.token, ""); r.StatusCode != tc.want {
			t.Errorf("%s with %q: %d %q, want %d", tc.path, tc.token, r.StatusCode, b, tc.want)
		}
	}
}

func TestAuthHTTPRateLimit(t *testing.T) {
	u := startAuthHTTP(t, false)
	got429 := false
	for i := 0; i < 50 && !got429; i++ {
		r, _ := doAuth(t, "GET", u+"/topics", "wrong", "")
		got429 = r.StatusCode == http.StatusTooManyRequests
	}
	if !got429 {
		t.Fatal("50 wrong tokens were never answered 429")
	}
	// Only the failing token is limited: a missing token is 401 and costs
	// nothing, a good token from the same address is served.
	for range 10 {
		if r, _ := doAuth(t, "GET", u+"/topics", "", ""); r.StatusCode != http.StatusUnauthorized {
			t.Fatalf("no token while another is limited: %d, want 401", r.StatusCode)
		}
	}
	if r, _ := doAuth(t, "GET", u+"/topics", tokA, ""); r.StatusCode != http.StatusOK {
		t.Fatalf("a good token while a wrong one is limited: %d, want 200", r.StatusCode)
	}
	if r, _ := doAuth(t, "GET", u+"/topics", "wrong", ""); r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the wrong token again: %d, want 429", r.StatusCode)
	}
	if r, _ := doAuth(t, "GET", u+"/healthz", "", ""); r.StatusCode != 200 {
		t.Fatalf("/healthz while limited: %d", r.StatusCode)
	}
}
