package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

var helpCmd = &command{
	name:    "help",
	args:    "[COMMAND]",
	summary: "show the help of hrqa or of a command",
	help: `Examples:
  hrqa help
  hrqa help consume
  hrqa help topics list`,
	setup: func(fs *flag.FlagSet) action {
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) == 0 || (len(args) == 1 && args[0] == "topics") {
				printHelp(e.stdout)
				return nil
			}
			cmd := lookup(strings.Join(args, " "))
			if cmd == nil {
				return usagef("unknown command %q", strings.Join(args, " "))
			}
			cfs, _ := cmd.flagSet()
			printCommandHelp(e.stdout, cmd, cfs)
			return nil
		}
	},
}

// printHelp writes the overview of hrqa.
func printHelp(w io.Writer) {
	fmt.Fprint(w, `hrqa is the command-line client of haraqa.

usage: hrqa [-addr HOST:PORT] [-token TOKEN] [-tls | -tls-ca FILE] COMMAND [ARGUMENTS] [FLAGS]

commands:
`)
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s %s\t%s\n", c.name, c.args, c.summary)
	}
	tw.Flush()
	fmt.Fprint(w, `
The server's address is -addr, else $HARAQA_ADDR, else `+defaultAddr+`.
A server started with -auth-file needs a token: -token, else $HARAQA_TOKEN.
For a server with TLS: -tls (system roots) or -tls-ca FILE, and -tls-cert FILE
-tls-key FILE if it asks for a client certificate (or $HARAQA_TLS_CA etc.).
Flags may come before or after the arguments.
Exit status: 0 on success, 1 on a failure, 2 on a usage error.

examples:
  seq 1 3 | hrqa produce numbers          # three messages: 1, 2, 3
  hrqa consume numbers                    # print them and exit
  hrqa consume numbers -offset -1 -f      # the last one, then follow

Run 'hrqa help COMMAND' or 'hrqa COMMAND -h' for a command's flags and examples.
`)
}

// printCommandHelp writes a command's usage, flags and examples.
func printCommandHelp(w io.Writer, cmd *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: %s\n\n%s.\n\nflags:\n", cmd.usage(), capitalize(cmd.summary))
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprintf(w, "\n%s\n", cmd.help)
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
