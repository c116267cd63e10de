// Command hrqa is the command-line client of haraqa: it lists and manages
// topics, produces messages from its arguments or a pipe, and prints or
// follows a topic.
//
//	hrqa [-addr HOST:PORT[,HOST:PORT...]] [-token TOKEN] COMMAND [ARGUMENTS] [FLAGS]
//
// Commands:
//
//	topics list [PREFIX]                 list the topics (starting with PREFIX)
//	topics create TOPIC                  create a topic
//	topics delete TOPIC                  delete a topic and its messages
//	topics info TOPIC                    show a topic's offsets and size
//	produce TOPIC [MESSAGE...]           send the arguments, or stdin one message per line
//	consume TOPIC                        print the messages, one per line; -f follows;
//	                                     -group NAME reads and commits as a consumer group
//	truncate TOPIC -before OFFSET|TIME   drop the messages before an offset or a time
//	groups list TOPIC                    list a topic's consumer groups, offsets and lag
//	groups info TOPIC GROUP              show a group's offsets on a topic
//	groups reset TOPIC GROUP -to WHERE   set where a group reads next: oldest, end, OFFSET
//	groups delete TOPIC GROUP            forget a group's offset on a topic
//	cluster status                       members, the Raft leader, each replicated topic's
//	                                     leader, epoch, in-sync set and replica lag
//	cluster add HOST:PORT/HTTP/CLUSTER   add a server started with -cluster-join; topics move onto it
//	cluster remove HOST:PORT             move a member's topics to the others, then drop it
//	ping                                 check that the server answers
//	token new                            print a fresh token and its auth-file line
//	help [COMMAND]                       show the help of hrqa or of a command
//
// The server's address is -addr, else $HARAQA_ADDR, else 127.0.0.1:14353.
// A comma-separated list (-addr a:14353,b:14353,c:14353) spreads topics
// over several servers, as the Go client does (docs/scaling.md): a topic
// is found on the server that holds it, a new one is placed by its name,
// and "topics list" merges them all.
// A server started with -auth-file needs a token: -token, else
// $HARAQA_TOKEN, else none. A server started with -tls-cert speaks TLS
// only: give -tls (the system's roots) or -tls-ca FILE, and -tls-cert FILE
// -tls-key FILE when it asks for a client certificate; $HARAQA_TLS,
// $HARAQA_TLS_CA, $HARAQA_TLS_CERT, $HARAQA_TLS_KEY and
// $HARAQA_TLS_SERVER_NAME are their defaults.
// Flags may come before or after the arguments; "hrqa COMMAND -h" shows a
// command's flags and examples.
//
// Exit status: 0 on success; 1 on a failure, with a one-line message on
// stderr; 2 on a usage error. A closed output pipe ends hrqa quietly with
// status 0 ("hrqa consume t | head"). Ctrl-C (SIGINT or SIGTERM) ends
// "consume -f" quietly with status 0 and interrupts any other command
// quietly with status 130; a second Ctrl-C exits at once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/haraqa/haraqa/client"
)

// Exit statuses.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130 // 128 + SIGINT, as shells report it
)

// defaultAddr is the server's address without -addr or $HARAQA_ADDR.
const defaultAddr = "127.0.0.1:14353"

// dialTimeout bounds connecting to the server and its first answer, so a
// missing server is reported at once rather than after retries.
const dialTimeout = 3 * time.Second

func main() {
	// Without this a write to a closed stdout pipe kills the process with
	// SIGPIPE; ignored, the write fails with EPIPE and hrqa ends quietly.
	signal.Ignore(syscall.SIGPIPE)
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		cancel()
		<-sigs
		os.Exit(exitInterrupted)
	}()
	e := &env{stdin: os.Stdin, stdout: output{os.Stdout}, stderr: os.Stderr,
		addr: os.Getenv("HARAQA_ADDR"), token: os.Getenv("HARAQA_TOKEN")}
	if e.addr != "" {
		e.addrFrom = "$HARAQA_ADDR"
	}
	e.tls.fromEnv(os.Getenv)
	os.Exit(run(ctx, e, os.Args[1:]))
}

// env is what a command runs with.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	addr           string // server address, from -addr or $HARAQA_ADDR
	addrFrom       string // where addr came from: "-addr", "$HARAQA_ADDR", "" the default
	token          string // presented to the server, from -token or $HARAQA_TOKEN; "" none
	tls            tlsFlags
}

// output is the standard output. It marks its write errors as
// *outputError, so that a closed pipe there is told from a broken
// connection to the server.
type output struct{ w io.Writer }

func (o output) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	if err != nil {
		err = &outputError{err: err}
	}
	return n, err
}

// outputError is a failed write to the standard output.
type outputError struct{ err error }

func (e *outputError) Error() string { return "writing the output: " + e.err.Error() }
func (e *outputError) Unwrap() error { return e.err }

// dial connects to the server at e.addr.
func (e *env) dial(ctx context.Context) (*client.Client, error) {
	if err := e.checkAddr(); err != nil {
		return nil, err
	}
	opts, err := e.tls.options()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	opts = append(opts, client.WithDialTimeout(dialTimeout), client.WithRetries(2, 100*time.Millisecond))
	if e.token != "" {
		opts = append(opts, client.WithToken(e.token), client.WithClientName("hrqa"))
	}
	return client.Dial(ctx, e.addr, opts...)
}

// command is one hrqa command.
type command struct {
	name    string // "consume", "topics list"
	args    string // the positional arguments, for the usage line
	opts    string // the main flags, for the usage line
	summary string // one line for "hrqa help"
	help    string // description and examples for "hrqa help NAME"
	// setup defines the command's flags on fs and returns its action,
	// which runs once the flags are parsed, with the positional arguments.
	setup func(fs *flag.FlagSet) action
}

type action func(ctx context.Context, e *env, args []string) error

// flagSet returns the command's flags, -addr, -token and the TLS flags
// included, and its action.
func (c *command) flagSet() (*flag.FlagSet, action) {
	fs := flag.NewFlagSet("hrqa "+c.name, flag.ContinueOnError)
	fs.String("addr", "", "server address, HOST:PORT, or a comma-separated list of servers (default $HARAQA_ADDR, else "+defaultAddr+")")
	fs.String("token", "", "token for a server started with -auth-file (default $HARAQA_TOKEN)")
	registerTLS(fs)
	return fs, c.setup(fs)
}

// usage is the command's usage line.
func (c *command) usage() string {
	return strings.Join(strings.Fields("hrqa "+c.name+" "+c.args+" "+c.opts), " ")
}

// commands in the order "hrqa help" lists them.
var commands []*command

func init() {
	commands = []*command{
		topicsListCmd, topicsCreateCmd, topicsReplicasCmd, topicsDeleteCmd, topicsInfoCmd, topicsMoveCmd,
		produceCmd, consumeCmd, truncateCmd,
		groupsListCmd, groupsInfoCmd, groupsResetCmd, groupsDeleteCmd,
		clusterStatusCmd, clusterAddCmd, clusterRemoveCmd, pingCmd, tokenNewCmd, helpCmd,
	}
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// run runs the command line args and returns the exit status.
func run(ctx context.Context, e *env, args []string) int {
	if e.addr == "" {
		e.addr = defaultAddr
	}
	if len(args) == 0 {
		printHelp(e.stderr)
		return exitUsage
	}
	cmd, rest, err := findCommand(e, args)
	if errors.Is(err, flag.ErrHelp) {
		printHelp(e.stdout)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "hrqa: %v\nRun 'hrqa help' for usage.\n", err)
		return exitUsage
	}
	fs, act := cmd.flagSet()
	pos, err := parseFlags(fs, rest)
	if err == nil {
		if addr := fs.Lookup("addr").Value.String(); addr != "" {
			e.addr, e.addrFrom = addr, "-addr"
		}
		if tok := fs.Lookup("token").Value.String(); tok != "" {
			e.token = tok
		}
		e.tls.apply(fs)
		err = act(ctx, e, pos)
	}
	var ue *usageError
	var oe *outputError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		printCommandHelp(e.stdout, cmd, fs)
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "hrqa %s: %v\nusage: %s\nRun 'hrqa %s -h' for help.\n",
			cmd.name, err, cmd.usage(), cmd.name)
		return exitUsage
	case errors.As(err, &oe) && errors.Is(oe, syscall.EPIPE):
		return exitOK // the reader of stdout went away, as with "| head"
	case ctx.Err() != nil:
		return exitInterrupted // a failure after Ctrl-C is its doing
	}
	fmt.Fprintf(e.stderr, "hrqa: %s%s\n", message(err, e.addr), e.addrHint(err))
	return exitFailure
}

// globalFlags are the flags but the TLS ones that may come before the
// command, each with the env field it sets.
var globalFlags = map[string]func(e *env) *string{
	"addr":  func(e *env) *string { return &e.addr },
	"token": func(e *env) *string { return &e.token },
}

// findCommand reads the flags before the command (globalFlags, the TLS
// flags and -h) and the command's name, and returns the command and the
// arguments after it.
func findCommand(e *env, args []string) (*command, []string, error) {
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		field, known := globalFlags[name]
		isTLS, takesValue := isTLSFlag(name)
		switch {
		case name == "h" || name == "help":
			return nil, nil, flag.ErrHelp
		case !known && !isTLS:
			return nil, nil, fmt.Errorf("unknown flag %s before the command", args[0])
		case isTLS && !takesValue: // -tls, -tls=false
			if !hasValue {
				value = "true"
			}
			e.tls.set(name, value)
			args = args[1:]
			continue
		case hasValue:
			args = args[1:]
		case len(args) < 2:
			return nil, nil, fmt.Errorf("flag -%s needs a value", name)
		default:
			value, args = args[1], args[2:]
		}
		if value == "" {
			return nil, nil, fmt.Errorf("flag -%s needs a value", name)
		}
		if isTLS {
			e.tls.set(name, value)
		} else {
			*field(e) = value
			if name == "addr" {
				e.addrFrom = "-addr"
			}
		}
	}
	if len(args) == 0 {
		return nil, nil, errors.New("no command given")
	}
	name, rest := args[0], args[1:]
	if name == "topics" {
		if len(rest) > 0 && (rest[0] == "-h" || rest[0] == "-help" || rest[0] == "--help") {
			return nil, nil, flag.ErrHelp
		}
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			return nil, nil, errors.New("topics needs a subcommand: list, create, delete or info")
		}
		name, rest = "topics "+rest[0], rest[1:]
	} else if name == "cluster" {
		if len(rest) > 0 && (rest[0] == "-h" || rest[0] == "-help" || rest[0] == "--help") {
			return nil, nil, flag.ErrHelp
		}
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			return nil, nil, errors.New("cluster needs a subcommand: status, add or remove")
		}
		name, rest = "cluster "+rest[0], rest[1:]
	} else if name == "groups" {
		if len(rest) > 0 && (rest[0] == "-h" || rest[0] == "-help" || rest[0] == "--help") {
			return nil, nil, flag.ErrHelp
		}
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			return nil, nil, errors.New("groups needs a subcommand: list, info, reset or delete")
		}
		name, rest = "groups "+rest[0], rest[1:]
	} else if name == "token" {
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			return nil, nil, errors.New("token needs a subcommand: new")
		}
		name, rest = "token "+rest[0], rest[1:]
	}
	cmd := lookup(name)
	if cmd == nil {
		return nil, nil, fmt.Errorf("unknown command %q", name)
	}
	return cmd, rest, nil
}

// oneTopic checks that args is exactly one topic name.
func oneTopic(args []string) (string, error) {
	switch len(args) {
	case 0:
		return "", usagef("missing TOPIC")
	case 1:
		return args[0], nil
	}
	return "", usagef("unexpected arguments after the topic: %s", strings.Join(args[1:], " "))
}
