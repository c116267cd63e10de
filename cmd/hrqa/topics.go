package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"text/tabwriter"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/client/admin"
)

var topicsListCmd = &command{
	name:    "topics list",
	args:    "[PREFIX]",
	opts:    "[-match REGEX]",
	summary: "list the topics, one per line",
	help: `Lists the topics whose names start with PREFIX (all without it), sorted.

Examples:
  hrqa topics list
  hrqa topics list orders.
  hrqa topics list -match 'eu|us$'`,
	setup: func(fs *flag.FlagSet) action {
		match := fs.String("match", "", "only the topics matching this regular expression (RE2, unanchored)")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) > 1 {
				return usagef("expected at most one PREFIX, got %d arguments", len(args))
			}
			if _, err := regexp.Compile(*match); err != nil {
				return usagef("-match: %v", err)
			}
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			c, err := e.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			topics, err := c.ListTopicsRegex(ctx, prefix, *match)
			if err != nil {
				return err
			}
			w := bufio.NewWriter(e.stdout)
			for _, t := range topics {
				fmt.Fprintln(w, t)
			}
			return w.Flush()
		}
	},
}

var topicsCreateCmd = &command{
	name:    "topics create",
	args:    "TOPIC",
	summary: "create a topic",
	help: `Creates an empty topic; it is an error if it exists. (produce creates a
missing topic by itself.) Names are 1 to 255 characters of A-Z a-z 0-9 . _ - : @,
neither "." nor "..", and case-sensitive.

Examples:
  hrqa topics create orders`,
	setup: func(fs *flag.FlagSet) action {
		return func(ctx context.Context, e *env, args []string) error {
			return withTopic(ctx, e, args, func(c *client.Client, topic string) error {
				return c.CreateTopic(ctx, topic)
			})
		}
	},
}

var topicsReplicasCmd = &command{
	name:    "topics replicas",
	args:    "TOPIC N",
	summary: "create a topic on N replicas of a cluster, or change its replication factor",
	help: `On a cluster of servers (-cluster): creates TOPIC on N replicas, or, when it
exists, moves it to N replicas, placed as a new topic's would be. Its new
replicas copy its log and join its in-sync set, then the servers it leaves
delete their copies; the command returns once the change is recorded: follow
with hrqa cluster status (MOVING TO). N may not be below the servers'
-min-insync nor above their number, and a topic that still moves cannot be
changed again. Without a cluster only N = 1 is taken. Needs the admin right.

Examples:
  hrqa topics replicas orders 3
  hrqa topics replicas -addr 10.0.0.5:14353 audit 5`,
	setup: func(fs *flag.FlagSet) action {
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) != 2 {
				return usagef("topics replicas takes a topic and a number of replicas")
			}
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 {
				return usagef("%q is not a number of replicas", args[1])
			}
			return withTopic(ctx, e, args[:1], func(c *client.Client, topic string) error {
				return admin.New(c).SetReplicas(ctx, topic, n)
			})
		}
	},
}

var topicsDeleteCmd = &command{
	name:    "topics delete",
	args:    "TOPIC",
	summary: "delete a topic and its messages",
	help: `Deletes a topic and all its messages; it is an error if it does not exist.

Examples:
  hrqa topics delete orders`,
	setup: func(fs *flag.FlagSet) action {
		return func(ctx context.Context, e *env, args []string) error {
			return withTopic(ctx, e, args, func(c *client.Client, topic string) error {
				return c.DeleteTopic(ctx, topic)
			})
		}
	},
}

var topicsInfoCmd = &command{
	name:    "topics info",
	args:    "TOPIC",
	opts:    "[-format text|json]",
	summary: "show a topic's offsets and size",
	help: `Shows the oldest offset kept, the offset the next message will get, the
number of messages kept (next - oldest), the bytes on the server's disk and
the number of segment files.

Examples:
  hrqa topics info orders
  hrqa topics info orders -format json`,
	setup: func(fs *flag.FlagSet) action {
		format := fs.String("format", "text", "output format: text or json")
		return func(ctx context.Context, e *env, args []string) error {
			if err := checkFormat(*format); err != nil {
				return err
			}
			return withTopic(ctx, e, args, func(c *client.Client, topic string) error {
				info, err := c.TopicInfo(ctx, topic)
				if err != nil {
					return err
				}
				if *format == "json" {
					return json.NewEncoder(e.stdout).Encode(struct {
						Topic    string `json:"topic"`
						Oldest   int64  `json:"oldest"`
						Next     int64  `json:"next"`
						Messages int64  `json:"messages"`
						Bytes    int64  `json:"bytes"`
						Segments int    `json:"segments"`
					}{topic, info.Oldest, info.Next, info.Next - info.Oldest, info.Bytes, info.Segments})
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintf(tw, "topic\t%s\n", topic)
				fmt.Fprintf(tw, "oldest\t%d\n", info.Oldest)
				fmt.Fprintf(tw, "next\t%d\n", info.Next)
				fmt.Fprintf(tw, "messages\t%d\n", info.Next-info.Oldest)
				fmt.Fprintf(tw, "bytes\t%d\n", info.Bytes)
				fmt.Fprintf(tw, "segments\t%d\n", info.Segments)
				return tw.Flush()
			})
		}
	},
}

// withTopic runs f with a client and the one topic args name, and explains
// its error.
func withTopic(ctx context.Context, e *env, args []string, f func(c *client.Client, topic string) error) error {
	topic, err := oneTopic(args)
	if err != nil {
		return err
	}
	c, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return explain(f(c, topic), topic)
}
