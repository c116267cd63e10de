package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/haraqa/haraqa/broker/auth"
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

// errTooManyWatchers answers a watch over Config.MaxWatchers.
var errTooManyWatchers = errors.New("httpapi: too many topic watches")

// watchWriteTimeout bounds the sending of one notice: a client that does
// not read its websocket is dropped.
const watchWriteTimeout = 10 * time.Second

// GET /ws/topics, X-Topics: a,b
func (a *API) watchTopics(w http.ResponseWriter, r *http.Request) {
	st, grant, ok := a.ready(w, r)
	if !ok {
		return
	}
	var topics []string
	for t := range strings.SplitSeq(r.Header.Get("X-Topics"), ",") {
		if t = strings.TrimSpace(t); t != "" {
			topics = append(topics, t)
		}
	}
	switch {
	case !strings.EqualFold(r.Header.Get("Upgrade"), "websocket"):
		a.fail(w, badRequestAs(sentinelWebsocket, "GET /ws/topics is a websocket: send Upgrade: websocket"))
		return
	case len(topics) == 0:
		a.fail(w, badRequestAs(sentinelTopic, "X-Topics must name at least one topic, comma-separated"))
		return
	case len(topics) > a.cfg.MaxWatchTopics:
		a.fail(w, badRequestAs(sentinelTopic, "X-Topics names %d topics, at most %d (MaxWatchTopics)", len(topics), a.cfg.MaxWatchTopics))
		return
	}
	next := make(map[string]int64, len(topics))
	for _, t := range topics {
		if err := protocol.ValidTopic(t); err != nil {
			a.fail(w, invalidTopic(t, err))
			return
		}
		if a.cfg.Auth != nil && !grant.Allow(auth.Consume, t) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="haraqa", error="insufficient_scope"`)
			a.fail(w, ErrForbidden)
			return
		}
		info, err := st.store.Info(t)
		if err != nil {
			a.fail(w, err)
			return
		}
		next[t] = info.Next
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

	// Each topic has at most one watch armed, so the channel never blocks.
	woken := make(chan string, len(topics))
	cancels := make(map[string]func() bool, len(topics))
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
	}()
	arm := func(t string) error {
		cancel, err := st.store.Watch(t, next[t], func() { woken <- t })
		if err == nil {
			cancels[t] = cancel
		}
		return err
	}
	for _, t := range topics {
		if err := arm(t); err != nil {
			_ = c.Close(websocket.StatusGoingAway, "topic "+t+" is gone")
			return
		}
	}
	for {
		select {
		case <-ctx.Done():
			_ = c.Close(websocket.StatusGoingAway, "server closing")
			return
		case t := <-woken:
			info, err := st.store.Info(t)
			if err != nil { // deleted, or the store closed
				_ = c.Close(websocket.StatusGoingAway, "topic "+t+" is gone")
				return
			}
			if info.Next > next[t] {
				next[t] = info.Next
				wctx, cancel := context.WithTimeout(ctx, watchWriteTimeout)
				err := c.Write(wctx, websocket.MessageText, []byte(t))
				cancel()
				if err != nil {
					return
				}
			}
			if err := arm(t); err != nil {
				_ = c.Close(websocket.StatusGoingAway, "topic "+t+" is gone")
				return
			}
		}
	}
}
