package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/haraqa/haraqa/client"
)

const (
	// consumeChunk is the most messages read per ConsumeInto call (a call
	// makes as many requests as it needs); output is flushed after each.
	consumeChunk = 10000
	// outputBufferBytes is the size of the stdout buffer.
	outputBufferBytes = 64 << 10
)

var consumeCmd = &command{
	name:    "consume",
	args:    "TOPIC",
	opts:    "[-group NAME] [-offset N|end|@TIME | -since DURATION] [-limit N] [-f] [-d DELIM | -0 | -format json]",
	summary: "print messages, one per line; -f follows; -group reads as a group",
	help: `Prints the messages of TOPIC from -offset on (by default the oldest kept),
each followed by a newline (-d another delimiter, -0 a NUL byte). Messages are
printed as they are, so one that holds the delimiter reads as several: use -0
or -format json for such data. A negative -offset counts back from the end:
-1 is the last message, -10 the last ten; one reaching back past the oldest
message kept starts at the oldest (-1000 on a topic of 10 prints all 10). -offset end starts at the end: only
messages produced from then on (with -f). -offset @TIME starts at the first
message the server appended at or after TIME (RFC 3339, such as
@2026-12-01T09:00:00Z, or a date, midnight UTC); -since 15m is the same for
the time 15 minutes ago.

Without -f, hrqa exits once it has printed the messages up to the end of the
topic (or -limit of them). With -f it then waits for new messages and prints
each as it arrives, until -limit messages or Ctrl-C, which ends it with exit
status 0. If the server goes away or stops (a restart), -f says so once on
stderr, dials again until it is back, says so, and goes on from where it was.
A topic that does not exist is an error, as is an offset past the
end or before the oldest message kept.

With -group NAME, hrqa reads as a member of consumer group NAME: it starts
where the group committed last (-offset applies only to a group that has
not committed; a new group starts at the oldest offset kept), and commits
what it printed: once it has printed and flushed them, so a message is
never committed before it is printed (at-least-once: after a crash the
next reader prints it again). With -f it commits after each response it
prints and when interrupted. While it runs it holds the group's lease: a
second "consume -group" of the same group and topic fails at once with
"group busy" rather than waiting (after a kill -9 the lease ends within
10 s). See "hrqa groups" to list, inspect, reset or delete groups.

-format json prints one object per line:
  {"offset":7,"time":"2025-01-02T15:04:05.123456789Z","value":"hello"}
"time" is when the server appended the message (UTC). "value" is the message
as a string when it is valid UTF-8; otherwise it is base64, and the object
says "encoding":"base64". A message with headers has them in order as
"headers":[{"key":"trace","value":"abc"}], each value as a string or, when
not UTF-8, base64 with "encoding":"base64". The text formats print values
only.

Examples:
  hrqa consume orders
  hrqa consume orders -offset -1 -f           # the last message, then follow
  hrqa consume orders -offset 100 -limit 10
  hrqa consume orders -offset @2026-12-01T09:00:00Z
  hrqa consume orders -since 1h -format json
  hrqa consume orders -offset end -f          # only new messages
  hrqa consume files -0 | xargs -0 ls -ld
  hrqa consume orders -format json | jq -r .value
  hrqa consume orders -group billing -limit 100  # the next 100 for billing`,
	setup: func(fs *flag.FlagSet) action {
		var d delimFlags
		d.register(fs, "follows")
		var start startFlag
		fs.Var(&start, "offset", "first offset; negative counts back from the end (-1 is the last message); end: only new messages; @TIME: the first appended at or after TIME, RFC 3339 (default the oldest kept)")
		since := fs.Duration("since", 0, "start at the first message appended at most this long ago (e.g. 15m, 2h)")
		limit := fs.Int("limit", 0, "stop after this many messages; 0: no limit")
		follow := fs.Bool("f", false, "follow: wait for new messages until interrupted")
		group := fs.String("group", "", "read as consumer group NAME: from its committed offset, committing what is printed")
		format := fs.String("format", "text", "text (the values, each followed by the delimiter) or json (offset, time and value per line)")
		return func(ctx context.Context, e *env, args []string) error {
			topic, err := oneTopic(args)
			if err != nil {
				return err
			}
			delim, err := d.bytes(fs)
			switch {
			case err != nil:
				return err
			case *limit < 0:
				return usagef("-limit must not be negative, got %d", *limit)
			case isSet(fs, "since") && isSet(fs, "offset"):
				return usagef("-since and -offset exclude each other")
			case *since < 0:
				return usagef("-since must not be negative, got %s", *since)
			case checkFormat(*format) != nil:
				return checkFormat(*format)
			case *format == "json" && (isSet(fs, "d") || d.nul):
				return usagef("-format json excludes -d and -0")
			}
			c, err := e.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			cs := &consumer{
				c: c, e: e, topic: topic, limit: *limit,
				p: newPrinter(e.stdout, delim, *format == "json"),
			}
			if isSet(fs, "since") {
				start.since(*since)
			}
			if *group != "" {
				if err := client.ValidGroup(*group); err != nil {
					return usagef("-group %q: use 1 to 255 characters of A-Z a-z 0-9 . _ -", *group)
				}
				err = cs.runGroup(ctx, *group, &start, *follow)
				if *follow && ctx.Err() != nil && err == nil {
					return nil
				}
				return explainGroup(explain(err, topic), topic, *group)
			}
			err = cs.run(ctx, &start, *follow)
			if *follow && ctx.Err() != nil {
				return nil // Ctrl-C is how -f ends
			}
			return explain(err, topic)
		}
	},
}

// consumer prints the messages of one topic.
type consumer struct {
	c       *client.Client
	e       *env
	topic   string
	limit   int // 0: no limit
	printed int
	p       *printer
}

// run prints from where start says (unset: the oldest) to the end of the
// topic, then with follow waits for more.
func (cs *consumer) run(ctx context.Context, start *startFlag, follow bool) error {
	info, err := cs.c.TopicInfo(ctx, cs.topic)
	if err != nil {
		return err
	}
	offset, err := start.resolve(ctx, cs.c, cs.topic, info)
	if err != nil {
		return err
	}
	next, err := cs.catchUp(ctx, offset)
	if err != nil || !follow || cs.done() {
		return err
	}
	return cs.follow(ctx, next)
}

func (cs *consumer) done() bool { return cs.limit > 0 && cs.printed >= cs.limit }

// catchUp prints the messages from offset to the end of the topic and
// returns the offset after them.
func (cs *consumer) catchUp(ctx context.Context, offset int64) (int64, error) {
	var msgs []client.Message
	for !cs.done() {
		n := consumeChunk
		if cs.limit > 0 {
			n = min(n, cs.limit-cs.printed)
		}
		var next int64
		var err error
		msgs, next, err = cs.c.ConsumeInto(ctx, msgs[:0], cs.topic, offset, n)
		if errors.Is(err, client.ErrOffsetOutOfRange) {
			return offset, cs.outOfRange(ctx, offset, err)
		}
		if err != nil {
			return offset, err
		}
		for _, m := range msgs {
			if err := cs.p.print(m); err != nil {
				return offset, err
			}
		}
		cs.printed += len(msgs)
		if err := cs.p.w.Flush(); err != nil {
			return offset, err
		}
		offset = next // absolute even when offset was negative
		if len(msgs) < n {
			break // the end of the topic
		}
	}
	return offset, nil
}

// follow prints the messages from offset on as they arrive, until ctx ends.
func (cs *consumer) follow(ctx context.Context, offset int64) error {
	lost := false
	for m, err := range cs.c.Messages(ctx, cs.topic, offset) {
		if errors.Is(err, client.ErrConnection) || errors.Is(err, client.ErrShuttingDown) {
			// The client dials again (a server that is stopping is
			// likely restarting: a rolling update); say so once per outage.
			if !lost {
				fmt.Fprintf(cs.e.stderr, "hrqa: %s; retrying\n", message(err, cs.e.addr))
				lost = true
			}
			continue
		}
		if err != nil {
			return err
		}
		if lost {
			fmt.Fprintf(cs.e.stderr, "hrqa: connected to %s again; following from offset %d\n", cs.e.addr, m.Offset)
			lost = false
		}
		if err := cs.p.print(m); err != nil {
			return err
		}
		if err := cs.p.w.Flush(); err != nil {
			return err
		}
		cs.printed++
		if cs.done() {
			return nil
		}
	}
	return nil
}

// outOfRange explains an offset outside the topic.
func (cs *consumer) outOfRange(ctx context.Context, offset int64, err error) error {
	info, ierr := cs.c.TopicInfo(ctx, cs.topic)
	if ierr != nil {
		return failf(err, "offset %d is outside topic %q", offset, cs.topic)
	}
	return failf(err, "offset %d is outside topic %q: its oldest offset is %d, its next %d",
		offset, cs.topic, info.Oldest, info.Next)
}

// printer writes messages to a buffered stdout.
type printer struct {
	w     *bufio.Writer
	delim []byte        // after each value, in text format
	json  *json.Encoder // nil: text format
}

func newPrinter(w io.Writer, delim []byte, asJSON bool) *printer {
	p := &printer{w: bufio.NewWriterSize(w, outputBufferBytes), delim: delim}
	if asJSON {
		p.json = json.NewEncoder(p.w)
		p.json.SetEscapeHTML(false)
	}
	return p
}

// jsonMessage is a message in -format json.
type jsonMessage struct {
	Offset   int64        `json:"offset"`
	Time     time.Time    `json:"time"`
	Value    string       `json:"value"`
	Encoding string       `json:"encoding,omitempty"` // "base64" when Value is
	Headers  []jsonHeader `json:"headers,omitempty"`
}

// jsonHeader is a message header in -format json.
type jsonHeader struct {
	Key      string `json:"key"`
	Value    string `json:"value"`
	Encoding string `json:"encoding,omitempty"` // "base64" when Value is
}

// print writes m; errors are the buffer's, so sticky.
func (p *printer) print(m client.Message) error {
	if p.json == nil {
		p.w.Write(m.Value)
		_, err := p.w.Write(p.delim)
		return err
	}
	v := jsonMessage{Offset: m.Offset, Time: m.Time.UTC()}
	if utf8.Valid(m.Value) {
		v.Value = string(m.Value)
	} else {
		v.Value, v.Encoding = base64.StdEncoding.EncodeToString(m.Value), "base64"
	}
	for _, h := range m.Headers {
		jh := jsonHeader{Key: h.Key, Value: string(h.Value)}
		if !utf8.Valid(h.Value) {
			jh.Value, jh.Encoding = base64.StdEncoding.EncodeToString(h.Value), "base64"
		}
		v.Headers = append(v.Headers, jh)
	}
	return p.json.Encode(v)
}

// runGroup prints as a member of group: from its committed offset (where
// start says, then the oldest, when it has none) to the end of the topic,
// then with follow waits for more; it commits what it printed after each
// response and before it returns.
func (cs *consumer) runGroup(ctx context.Context, group string, start *startFlag, follow bool) (err error) {
	opts := []client.GroupOption{client.WithoutLeaseWait()}
	var from *int64
	if start.set {
		info, err := cs.c.TopicInfo(ctx, cs.topic)
		if err != nil {
			return err
		}
		off, err := start.resolve(ctx, cs.c, cs.topic, info)
		if err != nil {
			return err
		}
		from = &off
		opts = append(opts, client.WithStartOffset(off))
	}
	g, err := cs.c.NewGroupReader(group, cs.topic, opts...)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := g.Close(); err == nil {
			err = cerr
		}
	}()
	st, err := g.Start(ctx)
	if errors.Is(err, client.ErrOffsetOutOfRange) && from != nil {
		return cs.outOfRange(ctx, *from, err)
	}
	if err != nil {
		return err
	}
	pos := st.Start
	for !cs.done() && (follow || pos < st.Next) {
		msgs, err := g.Next(ctx)
		if err != nil {
			if ctx.Err() != nil && follow {
				break // Ctrl-C: commit what was printed, below
			}
			if errors.Is(err, client.ErrOffsetOutOfRange) {
				return cs.outOfRange(ctx, pos, err)
			}
			return err
		}
		for _, m := range msgs {
			if cs.done() {
				break
			}
			if err := cs.p.print(m); err != nil {
				return err
			}
			cs.printed++
			pos = m.Offset + 1
		}
		if err := cs.p.w.Flush(); err != nil {
			return err
		}
		if err := g.CommitTo(ctx, pos); err != nil {
			if ctx.Err() != nil && follow {
				break // Ctrl-C during the commit: done again below
			}
			return err
		}
	}
	// Interrupted (follow): the context is gone, the commit is not.
	cctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	return g.CommitTo(cctx, pos)
}
