// Package peer is a server's connection to another server's binary port:
// what the members of a cluster ask each other (a follower its leader:
// replica fetch and wait, epoch end, producer owners; the controller a
// member: log ends) and what the HTTP port's -peers forwarding asks (topic
// info). It speaks package protocol's frames over net.Conn (or TLS) and
// nothing else: the public client (package client) is for applications,
// and the server never imports it.
//
// A Conn pipelines: requests from several goroutines go out on the one
// connection as they come, and the server answers them in order; one
// reader goroutine hands each answer to its request by correlation id.
// A Conn never retries and never dials again: once it fails (ErrConnection)
// or is closed (ErrClosed) every request fails, and its owner dials anew.
//
// A server's answer other than OK is returned as a *protocol.Error
// (wrapped), which errors.Is matches by code:
//
//	errors.Is(err, &protocol.Error{Code: protocol.CodeNotLeader})
package peer
