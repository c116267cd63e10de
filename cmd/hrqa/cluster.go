package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/haraqa/haraqa/client"
)

// clusterStatus is what a server's cluster status (protocol op 19) holds
// (package broker/replica, status.go).
type clusterStatus struct {
	Self   string `json:"self"`
	InStep bool   `json:"in_step"`
	// MembersHidden: the token may not see the members (it needs the
	// replication or admin right on every topic); the topics are those
	// it holds a right on.
	MembersHidden bool            `json:"members_hidden"`
	RaftLeader    string          `json:"raft_leader"`
	Members       []clusterMember `json:"members"`
	// DownUnknown: why the server could not tell which members are down.
	DownUnknown string `json:"down_unknown"`
	Topics      []struct {
		Name         string   `json:"name"`
		Replicas     []string `json:"replicas"`
		Target       []string `json:"target"`
		Leader       string   `json:"leader"`
		Epoch        int64    `json:"epoch"`
		ISR          []string `json:"isr"`
		ReplicaCount int      `json:"replica_count"`
		InSyncCount  int      `json:"in_sync_count"`
		HighWater    int64    `json:"high_water"`
		Next         int64    `json:"next"`
		ReadOnly     bool     `json:"read_only"`
		Repairing    bool     `json:"repairing"`
		Followers    []struct {
			ID     string `json:"id"`
			Next   int64  `json:"next"`
			Lag    int64  `json:"lag"`
			InSync bool   `json:"in_sync"`
		} `json:"followers"`
	} `json:"topics"`
}

// downSince is when a down member was last heard from, as the status
// sent it (RFC 3339), in local time with how long ago.
func downSince(s string) string {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return s
	}
	return fmt.Sprintf("%s (%s ago)", t.Local().Format(time.DateTime), time.Since(t).Round(time.Second))
}

// clusterMember is a member in a cluster status.
type clusterMember struct {
	ID      string `json:"id"`
	Raft    string `json:"raft"`
	HTTP    string `json:"http"`
	Leaving bool   `json:"leaving"`
	// Down: the Raft leader heard no heartbeat from it within the
	// member timeout; DownSince: when it last did (RFC 3339).
	Down      bool   `json:"down"`
	DownSince string `json:"down_since"`
}

// state is the member's STATE: member, leaving, or down since when.
func (m clusterMember) state() string {
	state := "member"
	if m.Leaving {
		state = "leaving"
	}
	if m.Down {
		state = "down since " + downSince(m.DownSince)
		if m.Leaving {
			state = "leaving, " + state
		}
	}
	return state
}

// membersHidden stands for what a status hides from a token that may
// not see the members.
const membersHidden = "(hidden)"

var clusterStatusCmd = &command{
	name:    "cluster status",
	opts:    "[-format text|json]",
	summary: "members, the Raft leader, each replicated topic's leader, epoch, in-sync set and lag",
	help: `Asks the server (the first of -addr) for its view of its cluster (a server started
with -cluster, docs/replication.md): the members, which of them leads the Raft
group (a member's STATE is member, leaving, or down since when it was last heard
from, as the Raft leader sees it), and for each replicated topic its replicas, leader, leader epoch, in-sync
set and high-water mark, and where this server's copy ends (NEXT HERE; "read-only"
once a failed write turned it so: it needs a restart; "repairing" while a copy that
recovery found damaged at the start is copied again from the leader). Ask a topic's leader to see
its followers' lag. With tokens (-auth-file) a token sees the topics it holds a
right on, as hrqa topics lists them, and the members (with the Raft leader, each
topic's replicas and lag) only with the replication or admin right on every topic;
without them the output says that the members are hidden.

Examples:
  hrqa cluster status
  hrqa cluster status -addr 10.0.0.5:14353 -format json`,
	setup: func(fs *flag.FlagSet) action {
		format := fs.String("format", "text", "output format: text or json (the server's, as it sent it)")
		return func(ctx context.Context, e *env, args []string) error {
			if err := checkFormat(*format); err != nil {
				return err
			}
			if len(args) > 0 {
				return usagef("cluster status takes no arguments")
			}
			c, err := e.dialFirst(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			b, err := c.ClusterStatus(ctx)
			if err != nil {
				return err
			}
			if *format == "json" {
				_, err = fmt.Fprintf(e.stdout, "%s\n", b)
				return err
			}
			var st clusterStatus
			if err := json.Unmarshal(b, &st); err != nil {
				return fmt.Errorf("the server's cluster status: %w", err)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			raftLeader := st.RaftLeader
			if st.MembersHidden {
				raftLeader = membersHidden
			}
			fmt.Fprintf(tw, "server\t%s\nin step\t%v\nraft leader\t%s\n", st.Self, st.InStep, raftLeader)
			if st.MembersHidden {
				fmt.Fprintf(tw, "members\t%s: the token needs the replication or admin right on every topic\n", membersHidden)
			} else {
				fmt.Fprintf(tw, "\nMEMBER\tCLUSTER PORT\tHTTP\tSTATE\n")
			}
			for _, m := range st.Members {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.ID, m.Raft, m.HTTP, m.state())
			}
			if st.DownUnknown != "" && !st.MembersHidden {
				fmt.Fprintf(tw, "\n(which members are down is not known: %s)\n", st.DownUnknown)
			}
			fmt.Fprintf(tw, "\nTOPIC\tLEADER\tEPOCH\tIN SYNC\tREPLICAS\tHIGH WATER\tNEXT HERE\tLAG\tMOVING TO\n")
			for _, t := range st.Topics {
				leader := t.Leader
				if leader == "" {
					leader = "(none)"
				}
				var lag []string
				for _, f := range t.Followers {
					lag = append(lag, fmt.Sprintf("%s:%d", f.ID, f.Lag))
				}
				next := fmt.Sprint(t.Next)
				if t.ReadOnly {
					next += " (read-only)"
				}
				if t.Repairing {
					next += " (repairing)"
				}
				replicas, inSync, n := strings.Join(t.Replicas, ","), len(t.ISR), len(t.Replicas)
				if st.MembersHidden {
					replicas, inSync, n = membersHidden, t.InSyncCount, t.ReplicaCount
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d/%d\t%s\t%d\t%s\t%s\t%s\n", t.Name, leader, t.Epoch, inSync, n,
					replicas, t.HighWater, next, strings.Join(lag, " "), strings.Join(t.Target, ","))
			}
			return tw.Flush()
		}
	},
}

var clusterAddCmd = &command{
	name:    "cluster add",
	opts:    "host:port/http/cluster",
	summary: "add a server, started with -cluster-join, to the cluster; topics move onto it",
	help: `Adds a server to the cluster of the server at -addr. Give it as in the servers'
-peers: its binary address, HTTP port and cluster port. Start it first with the
cluster's -peers plus itself and -cluster-join, so that it waits to be added
rather than form a cluster of its own. The topics then move so that each lives
where rendezvous hashing over the members places it (a few at a time): follow
with hrqa cluster status (MOVING TO). Needs the cluster's token (-token or
$HARAQA_TOKEN): the servers' -cluster-token-file, the members' secret, or with
-auth-file a token with the replication right on every topic.

Examples:
  hrqa cluster add 10.0.0.8:14353/4353/14355
  hrqa cluster add -addr 10.0.0.5:14353 10.0.0.8:14353/4353/14355`,
	setup: func(fs *flag.FlagSet) action {
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) != 1 {
				return usagef("cluster add takes one server: host:port/http/cluster")
			}
			return e.onCluster(ctx, func(c clusterClient) error { return c.AddMember(ctx, args[0]) })
		}
	},
}

var clusterRemoveCmd = &command{
	name:    "cluster remove",
	opts:    "host:port",
	summary: "remove a member: its topics move to the others, then it leaves the cluster",
	help: `Marks a member of the cluster of the server at -addr (its binary address, as
hrqa cluster status lists it) as leaving. Its topics move to the other members
(the cluster must keep as many members as a topic has replicas); once it holds
none it leaves the member list and the Raft group, and can be stopped. Follow
with hrqa cluster status. Needs the cluster's token, as cluster add.

Examples:
  hrqa cluster remove 10.0.0.8:14353
  hrqa cluster remove -addr 10.0.0.5:14353 10.0.0.8:14353`,
	setup: func(fs *flag.FlagSet) action {
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) != 1 {
				return usagef("cluster remove takes one member: host:port")
			}
			return e.onCluster(ctx, func(c clusterClient) error { return c.RemoveMember(ctx, args[0]) })
		}
	},
}

// clusterClient is what the cluster commands ask of a client.
type clusterClient interface {
	AddMember(ctx context.Context, entry string) error
	RemoveMember(ctx context.Context, id string) error
}

// onCluster runs fn with a client of the first server of -addr.
func (e *env) onCluster(ctx context.Context, fn func(clusterClient) error) error {
	c, err := e.dialFirst(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

// dialFirst dials the first server of -addr alone: the cluster commands
// ask one server.
func (e *env) dialFirst(ctx context.Context) (*client.Client, error) {
	first, _, _ := strings.Cut(e.addr, ",")
	one := *e
	one.addr = first
	return one.dial(ctx)
}
