package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/haraqa/haraqa/client"
)

// groupJSON is a group in -format json.
type groupJSON struct {
	Topic     string `json:"topic"`
	Group     string `json:"group"`
	Committed *int64 `json:"committed"` // null: none
	Start     int64  `json:"start"`
	Next      int64  `json:"next"`
	Lag       int64  `json:"lag"`
	LeaseMs   int64  `json:"lease_ms"`
}

func groupView(topic string, o client.GroupOffset) groupJSON {
	v := groupJSON{Topic: topic, Group: o.Group, Start: o.Start, Next: o.Next, Lag: o.Next - o.Start, LeaseMs: o.Lease.Milliseconds()}
	if o.Committed != client.NoOffset {
		c := o.Committed
		v.Committed = &c
	}
	return v
}

func committedText(o client.GroupOffset) string {
	if o.Committed == client.NoOffset {
		return "-"
	}
	return strconv.FormatInt(o.Committed, 10)
}

func leaseText(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

var groupsListCmd = &command{
	name:    "groups list",
	args:    "TOPIC",
	opts:    "[-topic TOPIC] [-format text|json]",
	summary: "list a topic's consumer groups, their offsets and lag",
	help: `Lists the consumer groups of TOPIC that have committed or hold a lease, by
name: the committed offset ("-" for none), the lag (the topic's next offset
minus where the group reads from) and the time left on a member's lease.

Examples:
  hrqa groups list orders
  hrqa groups list orders -format json`,
	setup: func(fs *flag.FlagSet) action {
		format := fs.String("format", "text", "output format: text or json (one object per line)")
		topicFlag := fs.String("topic", "", "the topic (instead of the argument TOPIC)")
		return func(ctx context.Context, e *env, args []string) error {
			if err := checkFormat(*format); err != nil {
				return err
			}
			if *topicFlag != "" {
				if len(args) > 0 {
					return usagef("unexpected arguments after -topic: %s", strings.Join(args, " "))
				}
				args = []string{*topicFlag}
			}
			return withTopic(ctx, e, args, func(c *client.Client, topic string) error {
				gs, err := c.ListGroups(ctx, topic)
				if err != nil {
					return err
				}
				if *format == "json" {
					enc := json.NewEncoder(e.stdout)
					for _, o := range gs {
						if err := enc.Encode(groupView(topic, o)); err != nil {
							return err
						}
					}
					return nil
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "GROUP\tCOMMITTED\tLAG\tLEASE")
				for _, o := range gs {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", o.Group, committedText(o), o.Next-o.Start, leaseText(o.Lease))
				}
				return tw.Flush()
			})
		}
	},
}

// groupFlags are a group command's -topic and -group, which name what
// the arguments TOPIC GROUP do, in either order.
type groupFlags struct{ topic, group *string }

func addGroupFlags(fs *flag.FlagSet) groupFlags {
	return groupFlags{
		topic: fs.String("topic", "", "the topic (instead of the argument TOPIC)"),
		group: fs.String("group", "", "the group (instead of the argument GROUP)"),
	}
}

// topicGroup returns the topic and the group that gf and args name: each
// one by its flag or, when that is not given, by the next argument, the
// topic first (TOPIC GROUP).
func topicGroup(gf groupFlags, args []string) (string, string, error) {
	topic, group := *gf.topic, *gf.group
	rest := args
	var missing []string
	if topic == "" {
		if len(rest) > 0 {
			topic, rest = rest[0], rest[1:]
		} else {
			missing = append(missing, "TOPIC (or -topic)")
		}
	}
	if group == "" {
		if len(rest) > 0 {
			group, rest = rest[0], rest[1:]
		} else {
			missing = append(missing, "GROUP (or -group)")
		}
	}
	if len(missing) > 0 {
		return "", "", usagef("missing %s", strings.Join(missing, " and "))
	}
	if len(rest) > 0 {
		return "", "", usagef("unexpected arguments after the topic and the group: %s", strings.Join(rest, " "))
	}
	return topic, group, nil
}

// withGroup runs f with a client, the topic and the group gf and args
// name, and explains its error.
func withGroup(ctx context.Context, e *env, gf groupFlags, args []string, f func(c *client.Client, topic, group string) error) error {
	topic, group, err := topicGroup(gf, args)
	if err != nil {
		return err
	}
	c, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	err = f(c, topic, group)
	if errors.Is(err, client.ErrTopicNotFound) && group != topic && client.ValidGroup(topic) == nil {
		// The group names a topic: the arguments were likely given in
		// the Go client's order (group, topic).
		if _, ierr := c.TopicInfo(ctx, group); ierr == nil {
			return failf(err, "topic %q does not exist, but %q is a topic: the topic and the group look swapped (hrqa groups takes TOPIC GROUP, or -topic %s -group %s)", topic, group, group, topic)
		}
	}
	return explainGroup(explain(err, topic), topic, group)
}

// explainGroup says what a group error means.
func explainGroup(err error, topic, group string) error {
	var f *failure
	switch {
	case err == nil || errors.As(err, &f):
		return err
	case errors.Is(err, client.ErrGroupBusy):
		return failf(err, "group %q on topic %q is busy: another member holds its lease (it ends when that member stops, within its lease, 10 s by default)", group, topic)
	case errors.Is(err, client.ErrCommitConflict):
		return failf(err, "group %q on topic %q was committed by someone else meanwhile", group, topic)
	case errors.Is(err, client.ErrInvalidArgument) && client.ValidGroup(group) != nil:
		return failf(err, "invalid group name %q: use 1 to 255 characters of A-Z a-z 0-9 . _ -", group)
	}
	return err
}

var groupsInfoCmd = &command{
	name:    "groups info",
	args:    "TOPIC GROUP",
	opts:    "[-topic TOPIC] [-group GROUP] [-format text|json]",
	summary: "show a consumer group's offsets on a topic",
	help: `Shows the committed offset of GROUP on TOPIC ("-" for none), where it reads
from next (the committed offset, or the oldest offset kept when a truncation
passed it or the group has none), the topic's next offset, the lag and the
time left on a member's lease.

The topic comes first, then the group (the Go client's FetchOffset takes the
group first); -topic and -group name them in any order instead.

Examples:
  hrqa groups info orders billing
  hrqa groups info -group billing -topic orders`,
	setup: func(fs *flag.FlagSet) action {
		format := fs.String("format", "text", "output format: text or json")
		gf := addGroupFlags(fs)
		return func(ctx context.Context, e *env, args []string) error {
			if err := checkFormat(*format); err != nil {
				return err
			}
			return withGroup(ctx, e, gf, args, func(c *client.Client, topic, group string) error {
				o, err := c.FetchOffset(ctx, group, topic)
				if err != nil {
					return err
				}
				if *format == "json" {
					return json.NewEncoder(e.stdout).Encode(groupView(topic, o))
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintf(tw, "topic\t%s\n", topic)
				fmt.Fprintf(tw, "group\t%s\n", group)
				fmt.Fprintf(tw, "committed\t%s\n", committedText(o))
				fmt.Fprintf(tw, "start\t%d\n", o.Start)
				fmt.Fprintf(tw, "next\t%d\n", o.Next)
				fmt.Fprintf(tw, "lag\t%d\n", o.Next-o.Start)
				fmt.Fprintf(tw, "lease\t%s\n", leaseText(o.Lease))
				return tw.Flush()
			})
		}
	},
}

var groupsResetCmd = &command{
	name:    "groups reset",
	args:    "TOPIC GROUP",
	opts:    "[-topic TOPIC] [-group GROUP] -to oldest|end|OFFSET",
	summary: "set where a consumer group reads from next",
	help: `Commits -to as GROUP's offset on TOPIC: "oldest" (read everything kept again),
"end" (skip to new messages) or an offset. It fails while a member reads the
group (holds its lease).

Examples:
  hrqa groups reset orders billing -to oldest
  hrqa groups reset orders billing -to 1200`,
	setup: func(fs *flag.FlagSet) action {
		to := fs.String("to", "", "oldest, end or an offset")
		gf := addGroupFlags(fs)
		return func(ctx context.Context, e *env, args []string) error {
			if _, _, err := topicGroup(gf, args); err != nil {
				return err
			}
			var off int64
			switch *to {
			case "oldest", "end":
			case "":
				return usagef("-to is required: oldest, end or an offset")
			default:
				n, err := strconv.ParseInt(*to, 10, 64)
				if err != nil || n < 0 {
					return usagef("-to %q: want oldest, end or an offset", *to)
				}
				off = n
			}
			return withGroup(ctx, e, gf, args, func(c *client.Client, topic, group string) error {
				if *to == "oldest" || *to == "end" {
					info, err := c.TopicInfo(ctx, topic)
					if err != nil {
						return err
					}
					if off = info.Oldest; *to == "end" {
						off = info.Next
					}
				}
				if err := c.CommitOffset(ctx, group, topic, off); err != nil {
					if errors.Is(err, client.ErrOffsetOutOfRange) {
						return failf(err, "offset %d is past the end of topic %q", off, topic)
					}
					return err
				}
				_, err := fmt.Fprintf(e.stdout, "group %s on %s reads from %d next\n", group, topic, off)
				return err
			})
		}
	},
}

var groupsDeleteCmd = &command{
	name:    "groups delete",
	args:    "TOPIC GROUP",
	opts:    "[-topic TOPIC] [-group GROUP]",
	summary: "forget a consumer group's offset on a topic",
	help: `Deletes GROUP's committed offset on TOPIC: the group starts again from the
oldest offset kept. It fails while a member reads the group; a group that
does not exist is not an error.

Examples:
  hrqa groups delete orders billing`,
	setup: func(fs *flag.FlagSet) action {
		gf := addGroupFlags(fs)
		return func(ctx context.Context, e *env, args []string) error {
			return withGroup(ctx, e, gf, args, func(c *client.Client, topic, group string) error {
				return c.DeleteGroup(ctx, group, topic)
			})
		}
	},
}
