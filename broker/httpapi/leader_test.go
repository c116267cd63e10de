package httpapi_test

import (
	"strings"
	"testing"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/httpapi"
	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/storage"
)

// fakeLeader is a cluster in which every topic is replicated and this
// server's writes meet the errors set: writable from Producing, committed
// from the answer Appended gives. The other methods are not called by a
// produce or a consume and are left to the nil interface.
type fakeLeader struct {
	service.Replicas
	writable  error
	committed error
}

func (f *fakeLeader) Producing(string, bool) (bool, error)               { return true, f.writable }
func (f *fakeLeader) Replicated(string) bool                             { return true }
func (f *fakeLeader) Appended(_ string, _ int64, _ bool, fn func(error)) { fn(f.committed) }

// startLeader is a server of the cluster f with topic t created.
func startLeader(t *testing.T, f *fakeLeader) *server {
	t.Helper()
	s := startREST(t, httpapi.DefaultConfig(), func(_ *storage.Options, bc *broker.Config) { bc.Replication = service.Replication{Replicas: f} })
	if err := s.Store.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOutcomeUnknownNotRedirected: a produce whose lead moved before it
// was committed is answered 504, never 307 (following a redirect sends
// the body again), with a line that says it may have been written, that
// sending it again may store it twice, and where the topic is led now.
func TestOutcomeUnknownNotRedirected(t *testing.T) {
	f := &fakeLeader{committed: &service.OutcomeUnknownError{Topic: "t", Leader: "10.0.0.2:14353", LeaderHTTP: "http://10.0.0.2:4353"}}
	s := startLeader(t, f)
	r := noRedirect(t, "POST", s.url+"/topics/t", "abc", "X-Sizes", "3").want(t, "produce, outcome unknown", 504)
	if loc := r.h.Get("Location"); loc != "" {
		t.Fatalf("outcome unknown answered with Location %q: a client following it stores the body twice", loc)
	}
	for _, want := range []string{`topic "t"`, "may or may not be kept", "may store them twice", "http://10.0.0.2:4353"} {
		if !strings.Contains(r.body, want) {
			t.Errorf("body %q should say %q", r.body, want)
		}
	}
	if r.h.Get("Retry-After") != "" {
		t.Errorf("outcome unknown with Retry-After %q: a resend may store it twice", r.h.Get("Retry-After"))
	}

	f.committed = &service.OutcomeUnknownError{Topic: "t"}
	r = noRedirect(t, "POST", s.url+"/topics/t", "abc", "X-Sizes", "3").want(t, "produce, outcome unknown, no leader", 504)
	if !strings.Contains(r.body, "no leader is elected yet") {
		t.Errorf("body %q should say no leader is elected yet", r.body)
	}
}

// TestNoLeaderRetryAfter: a write to a topic with no leader is 503 with
// Retry-After and a line naming the topic and why; a known leader is
// still a 307 to it.
func TestNoLeaderRetryAfter(t *testing.T) {
	f := &fakeLeader{writable: &service.NotLeaderError{Topic: "t"}}
	s := startLeader(t, f)
	r := noRedirect(t, "POST", s.url+"/topics/t", "abc", "X-Sizes", "3").want(t, "produce, no leader", 503)
	if got := r.h.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1", got)
	}
	for _, want := range []string{`topic "t"`, "no leader", "retry shortly"} {
		if !strings.Contains(r.body, want) {
			t.Errorf("body %q should say %q", r.body, want)
		}
	}

	f.writable = &service.NotLeaderError{Topic: "t", Leader: "10.0.0.2:14353", LeaderHTTP: "http://10.0.0.2:4353"}
	r = noRedirect(t, "POST", s.url+"/topics/t?x=1", "abc", "X-Sizes", "3").want(t, "produce, led elsewhere", 307)
	if loc := r.h.Get("Location"); loc != "http://10.0.0.2:4353/topics/t?x=1" {
		t.Errorf("Location %q, want the leader's", loc)
	}
}
