package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/haraqa/haraqa/client"
)

var truncateCmd = &command{
	name:    "truncate",
	args:    "TOPIC -before OFFSET|TIME",
	summary: "drop the messages before an offset or a time",
	help: `Drops the messages of TOPIC before an offset or appended before a time, and
prints the topic's new oldest offset. Truncation is exact: no message before
it can be read afterwards. The disk space comes back a segment file at a time:
the server deletes the files that hold only dropped messages, and the rest of
the first file stays on disk, unreadable, until the whole file goes
("hrqa topics info" counts only readable bytes).

-before takes:
  an offset          5000 drops offsets 0 to 4999
  a negative offset  -1000 keeps the last 1000 messages
  an RFC 3339 time   2025-01-02T15:04:05Z, or with a zone: 2025-01-02T16:04:05+01:00
  a Go duration      24h drops what was appended more than 24 hours ago (also 90m, 1h30m)

Examples:
  hrqa truncate orders -before 5000
  hrqa truncate orders -before -1000
  hrqa truncate logs -before 168h`,
	setup: func(fs *flag.FlagSet) action {
		before := fs.String("before", "", "OFFSET, -N (keep the last N), RFC 3339 TIME or DURATION ago; required")
		return func(ctx context.Context, e *env, args []string) error {
			topic, err := oneTopic(args)
			if err != nil {
				return err
			}
			if *before == "" {
				return usagef("missing -before OFFSET|TIME")
			}
			b, err := parseBefore(*before, time.Now())
			if err != nil {
				return err
			}
			return withTopic(ctx, e, []string{topic}, func(c *client.Client, topic string) error {
				oldest, err := b.truncate(ctx, c, topic)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(e.stdout, "truncated %s: oldest offset now %d\n", topic, oldest)
				return err
			})
		}
	},
}

// before is the argument of truncate -before: an offset or a time.
type before struct {
	offset int64 // negative counts back from the end
	time   time.Time
	byTime bool
}

// parseBefore reads an offset, an RFC 3339 time or a duration before now.
func parseBefore(s string, now time.Time) (before, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return before{offset: n}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return before{time: t, byTime: true}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return before{}, usagef("-before %s: a duration must not be negative", s)
		}
		return before{time: now.Add(-d), byTime: true}, nil
	}
	return before{}, usagef("-before %q: want an offset, an RFC 3339 time (2025-01-02T15:04:05Z) or a duration (24h)", s)
}

func (b before) truncate(ctx context.Context, c *client.Client, topic string) (int64, error) {
	if b.byTime {
		return c.TruncateTime(ctx, topic, b.time)
	}
	offset := b.offset
	if offset < 0 {
		info, err := c.TopicInfo(ctx, topic)
		if err != nil {
			return 0, err
		}
		offset = max(info.Next+offset, 0)
	}
	oldest, err := c.Truncate(ctx, topic, offset)
	if errors.Is(err, client.ErrOffsetOutOfRange) {
		if info, ierr := c.TopicInfo(ctx, topic); ierr == nil {
			return 0, failf(err, "offset %d is past the end of topic %q: its next offset is %d", offset, topic, info.Next)
		}
	}
	return oldest, err
}

var pingCmd = &command{
	name:    "ping",
	args:    "",
	summary: "check that the server answers",
	help: `Connects to the server, sends a ping and prints the round trip time.

Examples:
  hrqa ping
  hrqa ping -addr 10.0.0.5:14353
  HARAQA_ADDR=10.0.0.5:14353 hrqa ping`,
	setup: func(fs *flag.FlagSet) action {
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) > 0 {
				return usagef("ping takes no arguments")
			}
			c, err := e.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			start := time.Now()
			if err := c.Ping(ctx); err != nil {
				return err
			}
			_, err = fmt.Fprintf(e.stdout, "%s answered in %v\n", e.addr, time.Since(start).Round(time.Microsecond))
			return err
		}
	},
}
