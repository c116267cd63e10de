package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
)

// clusterStatus is what a server's cluster status (protocol op 19) holds
// (package broker/replica, Manager.Status).
type clusterStatus struct {
	Self       string `json:"self"`
	RaftLeader string `json:"raft_leader"`
	Members    []struct {
		ID   string `json:"id"`
		Raft string `json:"raft"`
		HTTP string `json:"http"`
	} `json:"members"`
	Topics []struct {
		Name      string   `json:"name"`
		Replicas  []string `json:"replicas"`
		Leader    string   `json:"leader"`
		Epoch     int64    `json:"epoch"`
		ISR       []string `json:"isr"`
		HighWater int64    `json:"high_water"`
		Next      int64    `json:"next"`
		Followers []struct {
			ID     string `json:"id"`
			Next   int64  `json:"next"`
			Lag    int64  `json:"lag"`
			InSync bool   `json:"in_sync"`
		} `json:"followers"`
	} `json:"topics"`
}

var clusterStatusCmd = &command{
	name:    "cluster status",
	opts:    "[-format text|json]",
	summary: "members, the Raft leader, each replicated topic's leader, epoch, in-sync set and lag",
	help: `Asks the server (the first of -addr) for its view of its cluster (a server started
with -cluster, docs/replication.md): the members, which of them leads the Raft
group, and for each replicated topic its replicas, leader, leader epoch, in-sync
set and high-water mark. Ask a topic's leader to see its followers' lag.

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
			first, _, _ := strings.Cut(e.addr, ",")
			one := *e
			one.addr = first
			c, err := one.dial(ctx)
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
			fmt.Fprintf(tw, "server\t%s\nraft leader\t%s\n\n", st.Self, st.RaftLeader)
			fmt.Fprintf(tw, "MEMBER\tCLUSTER PORT\tHTTP\n")
			for _, m := range st.Members {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", m.ID, m.Raft, m.HTTP)
			}
			fmt.Fprintf(tw, "\nTOPIC\tLEADER\tEPOCH\tIN SYNC\tREPLICAS\tHIGH WATER\tNEXT HERE\tLAG\n")
			for _, t := range st.Topics {
				leader := t.Leader
				if leader == "" {
					leader = "(none)"
				}
				var lag []string
				for _, f := range t.Followers {
					lag = append(lag, fmt.Sprintf("%s:%d", f.ID, f.Lag))
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d/%d\t%s\t%d\t%d\t%s\n", t.Name, leader, t.Epoch, len(t.ISR), len(t.Replicas),
					strings.Join(t.Replicas, ","), t.HighWater, t.Next, strings.Join(lag, " "))
			}
			return tw.Flush()
		}
	},
}
