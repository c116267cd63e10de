package broker_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// TestFilterWorkersBounded: with one filter worker, costly list-topics
// regexes sent at once from many connections run one at a time, and those
// past the queue's bound (64 per worker) are refused with
// CodeLimitReached naming FilterWorkers instead of each taking a core;
// every other one is answered with the right names, and pings on another
// connection are answered meanwhile.
func TestFilterWorkersBounded(t *testing.T) {
	const conns = 200
	s := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) { c.FilterWorkers, c.MaxConnsPerAddr = 1, conns+1 })
	admin := dialRaw(t, s.Addr)
	for i := range 2 {
		admin.ok(protocol.AppendCreateTopicRequest(nil, admin.id(), string(rune('b'+i))+strings.Repeat("a", 20)))
	}
	// Within protocol's bounds (4,001 instructions) and slow to match
	// against names of a's: milliseconds each.
	costly := "(?:a?){1000}z"
	cs := make([]*rawConn, conns)
	for i := range cs {
		cs[i] = dialRaw(t, s.Addr)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused, answered := 0, 0
	for _, c := range cs {
		wg.Go(func() {
			r := c.roundTrip(protocol.AppendListTopicsRequest(nil, c.id(), "", costly))
			mu.Lock()
			defer mu.Unlock()
			switch r.Code {
			case protocol.CodeOK:
				if lr, err := protocol.ParseListTopicsResponse(r.Payload); err != nil || lr.Count != 0 {
					t.Errorf("list answered %d names %v, want none", lr.Count, err)
				}
				answered++
			case protocol.CodeLimitReached:
				if !strings.Contains(r.errMsg(), "FilterWorkers") {
					t.Errorf("refusal %q does not name FilterWorkers", r.errMsg())
				}
				refused++
			default:
				t.Errorf("list: code %v %q", r.Code, r.errMsg())
			}
		})
	}
	admin.ping() // the loops serve while the filters wait
	wg.Wait()
	if refused == 0 || answered == 0 {
		t.Fatalf("%d answered, %d refused: want some of each (one worker, 64 waiting at most)", answered, refused)
	}
	t.Logf("%d answered, %d refused", answered, refused)
	if got := admin.list("", "^c"); len(got) != 1 {
		t.Fatalf("list after the burst: %q", got)
	}
}
