package httpapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
)

// routeCluster registers the cluster's routes, the binary port's ops 19
// and 21 through the same service calls (docs/replication.md):
//
//	GET    /cluster               the cluster status as JSON (any valid token)
//	POST   /cluster/members       add the server whose -peers entry is the body
//	DELETE /cluster/members/{id}  remove member id (its binary address)
//
// The status shows a token the topics it holds a right on, and the
// members only with the replication or admin right on every topic
// (service.Service.ClusterStatus).
// Adding and removing need the replication right on every topic (the
// cluster's token). A server that is not in a cluster answers 400.
func (a *API) routeCluster() {
	a.route("GET /cluster", a.clusterStatus)
	a.route("POST /cluster/members", a.addMember)
	a.route("DELETE /cluster/members/{id}", a.removeMember)
}

func (a *API) clusterStatus(w http.ResponseWriter, r *http.Request) {
	st, c, ok := a.ready(w, r)
	if !ok {
		return
	}
	cs, err := st.svc.ClusterStatus(c)
	var b []byte
	if err == nil {
		b, err = json.Marshal(cs)
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// errMemberEntry refuses a member entry that is empty or too long.
var errMemberEntry = fmt.Errorf("%w: a member entry is host:port/http/cluster, 1 to %d bytes", protocol.ErrInvalidArgument, protocol.MaxMemberEntry)

func (a *API) addMember(w http.ResponseWriter, r *http.Request) {
	st, c, ok := a.ready(w, r)
	if !ok {
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, protocol.MaxMemberEntry+1))
	if err != nil {
		a.fail(w, fmt.Errorf("%w: reading the body: %w", protocol.ErrInvalidArgument, err))
		return
	}
	entry := strings.TrimSpace(string(body))
	if entry == "" || len(entry) > protocol.MaxMemberEntry {
		a.fail(w, errMemberEntry)
		return
	}
	a.changeMember(w, st, c, protocol.MemberAdd, entry)
}

func (a *API) removeMember(w http.ResponseWriter, r *http.Request) {
	st, c, ok := a.ready(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if len(id) > protocol.MaxMemberEntry {
		a.fail(w, errMemberEntry)
		return
	}
	a.changeMember(w, st, c, protocol.MemberRemove, id)
}

// changeMember records the change and answers 202: the cluster moves the
// topics afterwards (GET /cluster follows them).
func (a *API) changeMember(w http.ResponseWriter, st *state, c service.Caller, action uint8, entry string) {
	if err := st.svc.ClusterMember(c, action, entry); err != nil {
		a.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(w, "recorded; the topics move next\n")
}
