package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
)

// This file: GET /ws/topics, the original haraqa's topic watch. The client
// names topics in X-Topics (comma-separated); the server upgrades to a
// websocket and sends one text message, the topic's name, each time a
// listed topic is written to (several writes between two messages may make
// one). It reads nothing from the client but its close.

// Watch bounds (Config.MaxWatchers, Config.MaxWatchTopics).
const (
	DefaultMaxWatchers    = 1024
	DefaultMaxWatchTopics = 100
)

// watchWriteTimeout bounds the sending of one notice: a client that does
// not read its websocket is dropped.
const watchWriteTimeout = 10 * time.Second

// GET /ws/topics, X-Topics: a,b
func (a *API) watchTopics(w http.ResponseWriter, r *http.Request) {
	st, caller, ok := a.ready(w, r)
	if !ok {
		return
	}
	next, err := a.watchedTopics(r, st.svc, caller)
	if err != nil {
		a.forbid(w, err)
		return
	}
	if n := a.watchers.Add(1); n > int64(a.cfg.MaxWatchers) {
		a.watchers.Add(-1)
		a.fail(w, fmt.Errorf("%w: %d open, at most %d (MaxWatchers)", errTooManyWatchers, n-1, a.cfg.MaxWatchers))
		return
	}
	defer a.watchers.Add(-1)

	// A watch outlives the server's read and write timeouts.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	opts := &websocket.AcceptOptions{}
	if a.cfg.CORS {
		opts.OriginPatterns = []string{"*"} // as the REST routes: any origin, tokens decide
	}
	c, err := websocket.Accept(w, r, opts)
	if err != nil {
		return // Accept has answered, 400 or 403
	}
	defer c.CloseNow()
	ctx := c.CloseRead(r.Context()) // ends when the client closes, or at shutdown
	topic, err := (&watch{svc: st.svc, caller: caller, next: next}).run(ctx, c)
	switch {
	case ctx.Err() != nil:
		_ = c.Close(websocket.StatusGoingAway, "server closing")
	case err != nil && topic != "":
		_ = c.Close(websocket.StatusGoingAway, "topic "+topic+" is gone")
	}
}

// watchedTopics returns the next offset of each topic X-Topics names, once
// the request is checked: a websocket upgrade, MaxWatchTopics, valid
// names, the consume right on each topic.
func (a *API) watchedTopics(r *http.Request, svc *service.Service, caller service.Caller) (map[string]int64, error) {
	var topics []string
	for t := range strings.SplitSeq(r.Header.Get("X-Topics"), ",") {
		if t = strings.TrimSpace(t); t != "" {
			topics = append(topics, t)
		}
	}
	switch {
	case !strings.EqualFold(r.Header.Get("Upgrade"), "websocket"):
		return nil, badRequestAs(sentinelWebsocket, "GET /ws/topics is a websocket: send Upgrade: websocket")
	case len(topics) == 0:
		return nil, badRequestAs(sentinelTopic, "X-Topics must name at least one topic, comma-separated")
	case len(topics) > a.cfg.MaxWatchTopics:
		return nil, badRequestAs(sentinelTopic, "X-Topics names %d topics, at most %d (MaxWatchTopics)", len(topics), a.cfg.MaxWatchTopics)
	}
	next := make(map[string]int64, len(topics))
	for _, t := range topics {
		if err := service.ValidTopic(t); err != nil {
			return nil, err
		}
		if err := svc.Allow(caller, protocol.OpConsume, t); err != nil {
			return nil, err
		}
		info, err := svc.Info(caller, t)
		if err != nil {
			return nil, err
		}
		next[t] = info.Next
	}
	return next, nil
}

// watch is one open topic watch: the offset past which each topic's next
// write is told.
type watch struct {
	svc     *service.Service
	caller  service.Caller
	next    map[string]int64
	woken   chan string
	cancels map[string]func() bool
}

// run sends a topic's name each time it is written to, until ctx ends, a
// write fails, or a topic is gone (deleted, or the store closed), which it
// returns.
func (wt *watch) run(ctx context.Context, c *websocket.Conn) (gone string, err error) {
	// Each topic has at most one watch armed, so the channel never blocks.
	wt.woken = make(chan string, len(wt.next))
	wt.cancels = make(map[string]func() bool, len(wt.next))
	defer func() {
		for _, cancel := range wt.cancels {
			cancel()
		}
	}()
	for t := range wt.next {
		if err := wt.arm(t); err != nil {
			return t, err
		}
	}
	for {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case t := <-wt.woken:
			info, err := wt.svc.Info(wt.caller, t)
			if err != nil {
				return t, err
			}
			if info.Next > wt.next[t] {
				wt.next[t] = info.Next
				wctx, cancel := context.WithTimeout(ctx, watchWriteTimeout)
				err := c.Write(wctx, websocket.MessageText, []byte(t))
				cancel()
				if err != nil {
					return "", err
				}
			}
			if err := wt.arm(t); err != nil {
				return t, err
			}
		}
	}
}

// arm watches topic t past its next offset told.
func (wt *watch) arm(t string) error {
	cancel, err := wt.svc.Watch(wt.caller, t, wt.next[t], func() { wt.woken <- t })
	if err == nil {
		wt.cancels[t] = cancel
	}
	return err
}
