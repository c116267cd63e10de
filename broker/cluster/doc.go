// Package cluster keeps a cluster's metadata in a hashicorp/raft group
// on the cluster port: which servers are members, and for each replicated
// topic its replicas, leader, leader epoch, in-sync set, log start and
// consumer groups. It moves no message: package broker/replica copies the
// logs and acts on what this package records.
//
// Open starts a member's Node. Every change is a Command proposed
// through the Raft leader (Node.Propose; a member that does not lead
// forwards it over a few kept connections, forward.go, and commands that
// arrive together go as one Raft entry, batch.go) and applied by the fsm
// to the State on every member alike, in log order. A change names the
// epoch and version it was decided on, and one the metadata moved past
// meanwhile is refused as stale (ErrStaleEpoch), so two deciders never
// both win.
//
// On the member leading the Raft group, the controller (controller.go)
// takes a member whose heartbeats fail for the member timeout as down,
// gives each topic it led the live in-sync member whose log ends
// furthest (elect.go), under the next epoch, and keeps a topic whose
// in-sync members are all down without a leader until one comes back
// (KIP-966's last replica standing). It also adds joining members as Raft
// voters once their port answers, and moves replicas when members come
// and go or a topic's replication factor changes (membership.go).
//
// A stopping member hands its leads off first (Node.HandOff), and one
// back from a crash steps back (Node.StepBack) until it has caught up.
// Consumer groups of replicated topics are commands too (groups.go), so
// a failover keeps every commit and lease.
//
// The cluster port (transport.go) takes only members: a preamble with
// the members' secret (or, with -auth-file, a token with the replication
// right on every topic) before a Raft or forward connection is served.
// docs/replication.md describes the behaviour; docs/architecture.md draws
// the packages around this one.
package cluster
