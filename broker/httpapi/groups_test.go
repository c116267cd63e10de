package httpapi_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/httpapi"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// TestConsumerGroupHeader: X-Consumer-Group without an id reads from the
// group's committed offset and commits past what the response holds.
func TestConsumerGroupHeader(t *testing.T) {
	cfg := httpapi.DefaultConfig()
	cfg.Prometheus = true
	s := startREST(t, cfg)
	if err := s.Store.CreateTopic("work"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		if _, err := s.Log(t, "work").Append(protocol.AppendBatch(nil, []byte(fmt.Sprint(i))), storage.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	u := s.url + "/topics/work"
	for _, want := range []string{"12", "34", "5"} {
		r := do(t, "GET", u, "", "X-Consumer-Group", "web", "X-Limit", "2")
		if r.code != 200 || r.body != want {
			t.Fatalf("got %d %q, want %q", r.code, r.body, want)
		}
	}
	if r := do(t, "GET", u, "", "X-Consumer-Group", "web"); r.code != 204 || r.h.Get("X-Id") != "5" {
		t.Fatalf("at the end: %d, X-Id %q", r.code, r.h.Get("X-Id"))
	}
	// A negative id reads from the group too; a given id reads from there
	// and commits nothing.
	if r := do(t, "GET", u+"?id=-1", "", "X-Consumer-Group", "other", "X-Limit", "1"); r.body != "1" || r.h.Get("X-Committed") != "1" {
		t.Fatalf("negative id: %q, X-Committed %q", r.body, r.h.Get("X-Committed"))
	}
	if r := do(t, "GET", u+"?id=3&limit=1", "", "X-Consumer-Group", "other"); r.body != "4" || r.h.Get("X-Committed") != "" {
		t.Fatalf("explicit id: %q, X-Committed %q", r.body, r.h.Get("X-Committed"))
	}
	if o, err := s.Log(t, "work").FetchOffset("other"); err != nil || o.Committed != 1 {
		t.Fatalf("other: %+v, %v", o, err)
	}
	// A group a member of the binary protocol holds: 409, nothing read.
	if _, err := s.Log(t, "work").Lease("other", "m", time.Minute); err != nil {
		t.Fatal(err)
	}
	if r := do(t, "GET", u, "", "X-Consumer-Group", "other"); r.code != 409 {
		t.Fatalf("leased group: %d %q", r.code, r.body)
	}
	if r := do(t, "GET", u, "", "X-Consumer-Group", "../x"); r.code != 400 {
		t.Fatalf("bad group: %d %q", r.code, r.body)
	}
	// A group that committed nothing read yet lags by the whole topic.
	if err := s.Log(t, "work").CommitOffset("late", storage.Commit{Offset: 0}); err != nil {
		t.Fatal(err)
	}
	_, body := get(t, s.url+"/metrics")
	if v := metric(t, body, `haraqa_consumer_group_lag_messages{group="web",topic="work"}`); v != 0 {
		t.Errorf("web lag %v", v)
	}
	if v := metric(t, body, `haraqa_consumer_group_lag_messages{group="late",topic="work"}`); v != 5 {
		t.Errorf("late lag %v", v)
	}
	if v := metric(t, body, `haraqa_consumer_group_committed_offset{group="web",topic="work"}`); v != 5 {
		t.Errorf("web committed %v", v)
	}
}
