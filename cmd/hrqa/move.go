package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/haraqa/haraqa/client"
)

var topicsMoveCmd = &command{
	name:    "topics move",
	args:    "TOPIC",
	opts:    "-to HOST:PORT",
	summary: "move a topic to another server, keeping its offsets",
	help: `Copies TOPIC from its server (-addr; with several, the one that has it) to
the server at -to, batch by batch with the offsets and append times they
have (so offsets, consumers' positions and "consume -since" answers stay the
same), copies its consumer groups' committed offsets, checks that both
servers hold the same oldest and next offsets, and then deletes TOPIC from
its old server. -to is one binary address (the server's -tcp port).

Stop the topic's producers first, or point them at the new server: messages
produced on the old server after the last check are deleted with it; the
copy goes on in rounds while the old server grows, up to 10. The new server
creates the topic; if it already holds produced messages of TOPIC the move
is refused and nothing is deleted. A move cut short leaves the old topic in
place: run it again (the new server takes up where the copy stopped). It
needs the admin right on both servers. Leases are not copied.

Examples:
  hrqa topics move orders -to 10.0.0.7:14353
  hrqa -addr a:14353,b:14353 topics move orders -to c:14353`,
	setup: func(fs *flag.FlagSet) action {
		to := fs.String("to", "", "the binary address (HOST:PORT) of the server to move the topic to")
		return func(ctx context.Context, e *env, args []string) error {
			topic, err := oneTopic(args)
			if err != nil {
				return err
			}
			if *to == "" || strings.Contains(*to, ",") {
				return usagef("-to: give the one server (HOST:PORT) to move %q to", topic)
			}
			src, err := e.dial(ctx)
			if err != nil {
				return err
			}
			defer src.Close()
			de := *e
			de.addr, de.addrFrom = *to, "-to"
			dst, err := de.dial(ctx)
			if err != nil {
				return failf(err, "%s", message(err, *to))
			}
			defer dst.Close()
			res, err := src.MoveTopic(ctx, topic, dst)
			if err != nil {
				return explainMove(err, topic, e.addr, *to)
			}
			groups := "groups"
			if res.Groups == 1 {
				groups = "group"
			}
			_, err = fmt.Fprintf(e.stdout, "moved %s to %s: offsets %d to %d, %d batches, %d %s\n",
				topic, *to, res.Oldest, res.Next, res.Batches, res.Groups, groups)
			return err
		}
	},
}

// explainMove names the server an error of a move came from.
func explainMove(err error, topic, from, to string) error {
	var sv *client.ServerError
	addr := from
	if errors.As(err, &sv) {
		addr = sv.Addr
	}
	switch {
	case errors.Is(err, client.ErrImportRefused):
		return failf(err, "%s already holds messages of topic %q produced there; nothing was moved (delete it there first if it is not needed)", to, topic)
	case errors.Is(err, client.ErrTopicNotFound) && addr != to:
		return failf(err, "topic %q does not exist on %s", topic, addr)
	}
	return failf(err, "moving %q: %s: %s", topic, addr, message(err, addr))
}
