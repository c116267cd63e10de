package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/haraqa/haraqa/broker/httpapi"
)

// TestWatchTopics: GET /ws/topics sends a topic's name when it is written
// to, as the original haraqa's WatchTopics reads it; bad requests and the
// watcher bound are refused before the upgrade.
func TestWatchTopics(t *testing.T) {
	cfg := httpapi.DefaultConfig()
	cfg.MaxWatchers = 1
	s := startREST(t, cfg)
	u := s.url + "/topics"
	do(t, "PUT", u+"/w1", "").want(t, "create w1", 201)
	do(t, "PUT", u+"/w2", "").want(t, "create w2", 201)
	do(t, "PUT", u+"/quiet", "").want(t, "create quiet", 201)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws := "ws" + strings.TrimPrefix(s.url, "http") + "/ws/topics"
	c, resp, err := websocket.Dial(ctx, ws, &websocket.DialOptions{HTTPHeader: http.Header{"X-Topics": {"w1,w2"}}})
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	defer c.CloseNow()

	// The bound: a second watch is refused while the first is open.
	_, resp, err = websocket.Dial(ctx, ws, &websocket.DialOptions{HTTPHeader: http.Header{"X-Topics": {"w1"}}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second watch with MaxWatchers 1: %v %v, want 429", err, resp)
	}

	do(t, "POST", u+"/quiet", "q", "X-Sizes", "1").want(t, "produce to an unwatched topic", 200)
	for _, topic := range []string{"w2", "w1", "w2"} {
		do(t, "POST", u+"/"+topic, "m", "X-Sizes", "1").want(t, "produce "+topic, 200)
		typ, msg, err := c.Read(ctx)
		if err != nil || typ != websocket.MessageText || string(msg) != topic {
			t.Fatalf("after a write to %s the watch sent %v %q %v", topic, typ, msg, err)
		}
	}
	c.Close(websocket.StatusNormalClosure, "")

	do(t, "GET", s.url+"/ws/topics", "", "X-Topics", "w1").want(t, "not a websocket", 400)
	up := []string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}
	do(t, "GET", s.url+"/ws/topics", "", append(up, "X-Topics", "nosuch")...).want(t, "a missing topic", 404)
	do(t, "GET", s.url+"/ws/topics", "", up...).want(t, "no topics", 400)
}
