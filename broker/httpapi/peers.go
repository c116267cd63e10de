package httpapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/haraqa/haraqa/broker/service"
)

// A Locator finds where a topic lives when this server is one of several
// sharing the topics (the haraqa binary's -peers flag). It is asked only
// for a topic this server does not have; the requests for its own topics
// never reach it.
type Locator interface {
	// Locate returns the base URL of the HTTP port of the server topic
	// lives on ("http://host:port"), or here true to serve the request on
	// this server as if it had no peers (the topic is on none of them,
	// and, with create, placement puts it here). With create (a create
	// or a produce), a topic no server has is placed as the Go client
	// places it: base is then the server placement chooses. An error
	// means it cannot tell, a peer not answering; it should name the
	// peer and come back within a few seconds.
	Locate(ctx context.Context, topic string, create bool) (base string, here bool, err error)
}

// elsewhere answers a request on /topics/{topic} for a topic that lives on
// another server: 307 to that server, same path and query, or 503 when
// the Locator cannot tell. It reports whether it answered; without a
// Locator, or for a topic this server has, it does nothing.
func (a *API) elsewhere(w http.ResponseWriter, r *http.Request, s *service.Service, name string) bool {
	if a.cfg.Peers == nil || s.HasTopic(name) {
		return false
	}
	create := r.Method == http.MethodPut || r.Method == http.MethodPost
	base, here, err := a.cfg.Peers.Locate(r.Context(), name, create)
	switch {
	case err != nil:
		a.fail(w, fmt.Errorf("%w: %w", ErrPeerUnavailable, err))
		return true
	case here:
		return false
	}
	redirect(w, r, base, "topic "+name+" is on "+base+"\n")
	return true
}
