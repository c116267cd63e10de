package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/haraqa/haraqa/broker/httpapi"
)

// TestHostile2Row9WatchesReleased: watches naming one quiet topic many
// times, opened and closed one after another, leave no storage watch
// armed once closed, hold one each while open, and a watch naming more
// entries than MaxWatchTopics (repeats included) is refused.
func TestHostile2Row9WatchesReleased(t *testing.T) {
	s := startREST(t, httpapi.DefaultConfig())
	do(t, "PUT", s.url+"/topics/quiet", "").want(t, "create quiet", 201)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws := "ws" + strings.TrimPrefix(s.url, "http") + "/ws/topics"
	names := strings.TrimSuffix(strings.Repeat("quiet,", httpapi.DefaultMaxWatchTopics), ",")
	armed := func() int {
		t.Helper()
		n, err := s.Store.Watches("quiet")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// waitArmed waits up to 5 s for want storage watches on quiet: the
	// server arms them after it answers the upgrade, and releases them
	// after it reads the close.
	waitArmed := func(want int, what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for n := armed(); n != want; n = armed() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d storage watches armed on the topic, want %d", what, n, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i := range 100 {
		c, resp, err := websocket.Dial(ctx, ws, &websocket.DialOptions{HTTPHeader: http.Header{"X-Topics": {names}}})
		if err != nil {
			t.Fatalf("watch %d: %v (%v)", i, err, resp)
		}
		waitArmed(1, fmt.Sprintf("watch %d open", i))
		c.Close(websocket.StatusNormalClosure, "")
		waitArmed(0, fmt.Sprintf("watch %d closed", i))
	}
	up := []string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}
	do(t, "GET", s.url+"/ws/topics", "", append(up, "X-Topics", names+",quiet")...).want(t, "one name past MaxWatchTopics", 400)
	if n := armed(); n != 0 {
		t.Fatalf("%d storage watches armed after every watch closed", n)
	}
}
