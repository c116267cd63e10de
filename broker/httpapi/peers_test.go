package httpapi_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/haraqa/haraqa/broker/httpapi"
)

// fakeLocator answers from a table, and counts the questions.
type fakeLocator struct {
	mu    sync.Mutex
	where map[string]string // topic -> base URL; missing: here
	err   error
	asked []string // "topic" or "topic create"
}

func (f *fakeLocator) set(topic, base string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.where == nil {
		f.where = make(map[string]string)
	}
	f.where[topic] = base
}

func (f *fakeLocator) Locate(_ context.Context, topic string, create bool) (string, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := topic
	if create {
		q += " create"
	}
	f.asked = append(f.asked, q)
	if f.err != nil {
		return "", false, f.err
	}
	base, ok := f.where[topic]
	return base, !ok, nil
}

func (f *fakeLocator) questions() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.asked...)
}

// noRedirect does one request and returns the answer as is, 307 included.
func noRedirect(t *testing.T, method, url, body string, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
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

// TestPeersRedirect: a request for a topic the Locator puts on another
// server is answered 307 to it, same path and query, for every route on
// /topics/{topic}; following the redirect reaches the topic, method and
// body kept; the server's own topics never reach the Locator.
func TestPeersRedirect(t *testing.T) {
	loc := &fakeLocator{}
	a := startREST(t, httpapi.Config{Peers: loc})
	b := startREST(t, httpapi.Config{})
	do(t, "PUT", b.url+"/topics/far", "").want(t, "create on b", 201)
	do(t, "PUT", a.url+"/topics/near", "").want(t, "create on a", 201)
	loc.set("far", b.url)

	r := noRedirect(t, "GET", a.url+"/topics/far?id=0&limit=5", "").want(t, "consume far on a", 307)
	if got := r.h.Get("Location"); got != b.url+"/topics/far?id=0&limit=5" {
		t.Fatalf("Location %q, want b's URL with the same path and query", got)
	}
	for _, m := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		r := noRedirect(t, m, a.url+"/topics/far", "").want(t, m+" far on a", 307)
		if got := r.h.Get("Location"); got != b.url+"/topics/far" {
			t.Fatalf("%s: Location %q", m, got)
		}
	}
	noRedirect(t, "GET", a.url+"/topics/far/info", "").want(t, "info far on a", 307)

	// Followed: the produce lands on b, the consume reads it back.
	do(t, "POST", a.url+"/topics/far", "helloabc", "X-Sizes", "5:3").want(t, "produce far through a", 200)
	r = do(t, "GET", a.url+"/topics/far?id=0", "").want(t, "consume far through a", 200)
	if r.body != "helloabc" || r.h.Get("X-Sizes") != "5:3" {
		t.Fatalf("consume far through a: %q, X-Sizes %q", r.body, r.h.Get("X-Sizes"))
	}

	before := len(loc.questions())
	do(t, "POST", a.url+"/topics/near", "xyz", "X-Sizes", "3").want(t, "produce near on a", 200)
	noRedirect(t, "GET", a.url+"/topics/near?id=0", "").want(t, "consume near on a", 200)
	if q := loc.questions()[before:]; len(q) != 0 {
		t.Fatalf("requests for a's own topic asked the Locator: %q", q)
	}

	// Nowhere else: served here, as without peers.
	do(t, "GET", a.url+"/topics/none?id=0", "").want(t, "consume of a topic no server has", 404)
	do(t, "PUT", a.url+"/topics/new", "").want(t, "create placed here", 201)
	q := loc.questions()
	if q[len(q)-2] != "none" || q[len(q)-1] != "new create" {
		t.Fatalf("questions %q: want a consume asked without create, a create with", q[len(q)-2:])
	}
	// Listing stays local.
	r = do(t, "GET", a.url+"/topics", "", "Accept", "text/plain").want(t, "list on a", 200)
	if r.body != "near\nnew\n" {
		t.Fatalf("list on a: %q, want a's own topics only", r.body)
	}
}

// TestPeersUnavailable: when the Locator cannot tell, the request fails
// at once with 503 and the Locator's words.
func TestPeersUnavailable(t *testing.T) {
	loc := &fakeLocator{err: errors.New("peer 10.0.0.9:14353 did not answer")}
	a := startREST(t, httpapi.Config{Peers: loc})
	r := do(t, "GET", a.url+"/topics/far?id=0", "").want(t, "consume with a peer down", 503)
	if !strings.Contains(r.body, "10.0.0.9:14353") || !strings.Contains(r.body, "peer unavailable") {
		t.Fatalf("body %q should name the peer", r.body)
	}
	do(t, "PUT", a.url+"/topics/own", "").want(t, "create with a peer down", 503)
}

// TestNoPeers: without a Locator a missing topic is this server's 404,
// and a create is served here, as before peers existed.
func TestNoPeers(t *testing.T) {
	a := startREST(t, httpapi.Config{})
	do(t, "GET", a.url+"/topics/far?id=0", "").want(t, "consume of a missing topic", 404)
	noRedirect(t, "POST", a.url+"/topics/far", "x", "X-Sizes", "1").want(t, "produce to a missing topic", 404)
	do(t, "PUT", a.url+"/topics/far", "").want(t, "create", 201)
	do(t, "DELETE", a.url+"/topics/far", "").want(t, "delete", 204)
}
