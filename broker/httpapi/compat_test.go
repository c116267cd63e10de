package httpapi_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/haraqa/haraqa/broker/httpapi"
)

// TestOriginalClientExpectations sends what the original haraqa HTTP client
// sends and checks what it reads back, row by row of docs/http.md,
// "Migrating from haraqa 0.x".
func TestOriginalClientExpectations(t *testing.T) {
	s := startREST(t, httpapi.DefaultConfig())
	u := s.url + "/topics"
	xerr := func(r reply, want string) {
		t.Helper()
		if got := r.h.Get("X-Errors"); got != want {
			t.Fatalf("X-Errors %q, want %q (body %q)", got, want, r.body)
		}
	}

	// PUT is idempotent; names may hold ':' and '@'.
	do(t, "PUT", u+"/c1", "").want(t, "create", 201)
	do(t, "PUT", u+"/c1", "").want(t, "create again", 201)
	chat := "chat:bob@example.com:alice@example.com"
	do(t, "PUT", u+"/"+chat, "").want(t, "create with : and @", 201)

	// GET /topics: CSV by default, JSON and HTML on request; /topics/ too.
	for _, path := range []string{u, u + "/"} {
		r := do(t, "GET", path, "").want(t, "list "+path, 200)
		got := strings.Split(r.body, ",")
		slices.Sort(got)
		if !slices.Equal(got, []string{"c1", chat}) || !strings.HasPrefix(r.h.Get("Content-Type"), "text/csv") {
			t.Fatalf("list %s: %q %q, want the names joined by commas as text/csv", path, r.body, r.h.Get("Content-Type"))
		}
	}
	r := do(t, "GET", u, "", "Accept", "application/json").want(t, "list json", 200)
	var list struct{ Topics []string }
	if err := json.Unmarshal([]byte(r.body), &list); err != nil || len(list.Topics) != 2 {
		t.Fatalf("list json: %q %v", r.body, err)
	}
	r = do(t, "GET", u, "", "Accept", "text/html").want(t, "list html", 200)
	if !strings.HasPrefix(r.h.Get("Content-Type"), "text/html") || !strings.Contains(r.body, "<li>c1</li>") {
		t.Fatalf("list html: %q %q", r.body, r.h.Get("Content-Type"))
	}

	// Consume at and past the end: 204 "no content", which its poll loop waits on.
	do(t, "POST", u+"/c1", "helloabc", "X-Sizes", "5:3").want(t, "produce", 200)
	xerr(do(t, "GET", u+"/c1", "", "X-Id", "2").want(t, "consume at the end", 204), "no content")
	xerr(do(t, "GET", u+"/c1", "", "X-Id", "100").want(t, "consume past the end", 204), "no content")

	// The client's sentinels in X-Errors, the description in the body.
	r = do(t, "GET", u+"/nosuch", "", "X-Id", "0").want(t, "consume a missing topic", 404)
	xerr(r, "topic does not exist")
	if !strings.Contains(r.body, `"nosuch"`) {
		t.Fatalf("the body %q does not describe the error", r.body)
	}
	xerr(do(t, "POST", u+"/c1", "x").want(t, "produce without X-Sizes", 400), "invalid header: X-Sizes")
	xerr(do(t, "POST", u+"/c1", "xy", "X-Sizes", "1:x").want(t, "produce with bad X-Sizes", 400), "invalid header: X-Sizes")
	xerr(do(t, "GET", u+"/c1", "", "X-Id", "abc").want(t, "consume a bad id", 400), "invalid message id")
	xerr(do(t, "GET", u+"/c1", "", "X-Id", "0", "X-Limit", "zero").want(t, "consume a bad limit", 400), "invalid message limit")
	r = do(t, "PUT", u+"/a%2Fb", "").want(t, "create a bad name", 400)
	xerr(r, "invalid topic")
	if strings.Count(r.body, "invalid topic name") != 1 {
		t.Fatalf("the body %q repeats its prefix", r.body)
	}
	xerr(do(t, "PATCH", u+"/c1", "{not json", "Content-Type", "application/json").want(t, "truncate with bad JSON", 400), "invalid body: invalid json entry")

	// DELETE of a missing topic is 204.
	do(t, "DELETE", u+"/nosuch", "").want(t, "delete a missing topic", 204)

	// PATCH with the original JSON bodies answers minOffset and maxOffset.
	for _, body := range []string{`{"truncate":1}`, `{"before":"2000-01-01T00:00:00Z"}`} {
		r = do(t, "PATCH", u+"/c1", body, "Content-Type", "application/json").want(t, "truncate "+body, 200)
		var off struct{ MinOffset, MaxOffset int64 }
		if err := json.Unmarshal([]byte(r.body), &off); err != nil || off.MinOffset != 1 || off.MaxOffset != 2 {
			t.Fatalf("PATCH %s: %q %v, want minOffset 1, maxOffset 2", body, r.body, err)
		}
	}

	// GET / goes to the docs.
	req, _ := http.NewRequest("GET", s.url+"/", nil)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/docs/" {
		t.Fatalf("GET /: %d to %q, want 302 to /docs/", resp.StatusCode, resp.Header.Get("Location"))
	}
}
