// Command haraqa-bench loads a haraqa server through the Go client and
// measures throughput and latency, optionally against the plainest way to
// move the same bytes on this machine (-ceiling).
//
//	haraqa-bench -embedded -mode produce -size 1024 -batch 1000 -messages 500000 -ceiling
//	haraqa-bench -addr 127.0.0.1:14353 -mode both -producers 4 -duration 10s
//	haraqa-bench -addr a:14353,b:14353,c:14353 -topics 3 -producers 3 -mode produce
//	haraqa-bench -matrix -matrix-out docs/benchmarks.md
//	haraqa-bench -embedded -tls -mode produce -size 1024 -batch 1000 -messages 200000
//
// The result is a table on stdout (-json: one JSON object); a progress
// bar goes to stderr when it is a terminal, else a line of progress each
// second. A ratio to the ceiling above 1 is flagged as a starved ceiling. Exit status: 0 when every
// request succeeded and, with consumers, every message was read exactly
// once and intact; 1 otherwise or when the run failed; 2 for a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/haraqa/haraqa/bench"
	"github.com/haraqa/haraqa/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, term.IsTerminal(int(os.Stderr.Fd())))
	stop()
	os.Exit(code)
}

// options are the parsed flags.
type options struct {
	cfg        bench.Config
	json       bool
	report     string
	cpuProfile string
	matrix     bool
	mcfg       bench.MatrixConfig
	tls        tlsFlags
}

// tlsFlags are -tls, -tls-ca, -tls-cert, -tls-key and -tls-server-name,
// as hrqa's, with the same environment variables as defaults.
type tlsFlags struct {
	on                        bool
	ca, cert, key, serverName string
}

// register defines the TLS flags on fs, their defaults read with getenv.
func (t *tlsFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	on := false
	switch strings.ToLower(getenv("HARAQA_TLS")) {
	case "", "0", "f", "false", "no", "off":
	default:
		on = true
	}
	fs.BoolVar(&t.on, "tls", on, "speak TLS, trusting the system's roots; with -embedded the server gets a self-signed certificate made in memory (default $HARAQA_TLS)")
	fs.StringVar(&t.ca, "tls-ca", getenv("HARAQA_TLS_CA"), "speak TLS, trusting the CA certificates in this PEM file (default $HARAQA_TLS_CA)")
	fs.StringVar(&t.cert, "tls-cert", getenv("HARAQA_TLS_CERT"), "client certificate PEM file, for a server that requires one (default $HARAQA_TLS_CERT)")
	fs.StringVar(&t.key, "tls-key", getenv("HARAQA_TLS_KEY"), "key PEM file of -tls-cert (default $HARAQA_TLS_KEY)")
	fs.StringVar(&t.serverName, "tls-server-name", getenv("HARAQA_TLS_SERVER_NAME"), "name the server's certificate must carry, when not the host of -addr (default $HARAQA_TLS_SERVER_NAME)")
}

// defaultDuration is the length of a run given neither -messages nor
// -duration.
const defaultDuration = 5 * time.Second

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{cfg: bench.DefaultConfig(), mcfg: bench.DefaultMatrixConfig()}
	c := &o.cfg
	var mode, single string
	fs := o.flagSet(&mode, &single, stderr)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q", bench.ErrUsage, fs.Arg(0))
	}
	c.Mode, c.Single = bench.Mode(mode), bench.Single(single)
	tc, err := client.TLSConfigFromFiles(o.tls.ca, o.tls.cert, o.tls.key, o.tls.serverName, o.tls.on)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", bench.ErrUsage, err)
	}
	c.TLS = tc
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.matrix {
		return o, o.matrixFlags(set)
	}
	return o, o.runFlags(set)
}

// flagSet declares the flags, into o and, for the mode and the single
// produce kind, into mode and single.
func (o *options) flagSet(mode, single *string, stderr io.Writer) *flag.FlagSet {
	c := &o.cfg
	fs := flag.NewFlagSet("haraqa-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if a := os.Getenv("HARAQA_ADDR"); a != "" {
		c.Addr = a
	}
	fs.StringVar(&c.Addr, "addr", c.Addr, "server's binary protocol address, or a comma-separated list of servers the topics spread over (-topics N measures their aggregate; default $HARAQA_ADDR, else shown)")
	fs.StringVar(&c.Token, "token", os.Getenv("HARAQA_TOKEN"), "token for a server started with -auth-file, with the admin right on the benchmark's topics (default $HARAQA_TOKEN)")
	fs.StringVar(&c.HTTPAddr, "http-addr", "", "server's HTTP port (host:port), read for the zero-copy share; without it and without -embedded the share is unknown")
	fs.BoolVar(&c.Embedded, "embedded", false, "start an in-process server on fresh temporary volumes, removed afterwards")
	fs.IntVar(&c.Volumes, "volumes", c.Volumes, "volumes of the embedded server")
	fs.StringVar(&c.Fsync, "fsync", c.Fsync, "fsync policy of the embedded server: never, interval or always")
	fs.IntVar(&c.Entries, "entries", c.Entries, "messages per segment of the embedded server")
	fs.Int64Var(&c.Ballast, "ballast", c.Ballast, "GC ballast of the embedded server in bytes, as the haraqa binary's -ballast; it defers the client's collections too (this process is both)")
	fs.StringVar(&c.Dir, "dir", c.Dir, "where the embedded server's volumes and the ceiling's files go")
	fs.StringVar(mode, "mode", string(c.Mode), "produce, consume (fill untimed, then read it all, timed) or both (at once, end-to-end latency)")
	fs.IntVar(&c.Topics, "topics", c.Topics, "topics; producer i writes topic i mod topics")
	fs.IntVar(&c.Producers, "producers", c.Producers, "concurrent producers")
	fs.IntVar(&c.Consumers, "consumers", c.Consumers, "concurrent consumers (consume: they split the topics' offsets; both: consumer j follows topic j mod topics)")
	fs.IntVar(&c.Size, "size", c.Size, fmt.Sprintf("message size in bytes, at least %d (the header)", bench.HeaderSize))
	fs.IntVar(&c.Batch, "batch", c.Batch, "messages per produce request")
	fs.StringVar(single, "single", string(c.Single), "with -batch 1: produce (Client.Produce, waiting for each ack) or producer (client.Producer and futures)")
	fs.DurationVar(&c.Linger, "linger", c.Linger, "with -single producer: the Producer's linger time (0: send each message at once while a batch slot is free)")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", c.MaxInFlight, "with -single producer: the Producer's batch slots, batches sent and not yet answered")
	fs.Int64Var(&c.Messages, "messages", 0, "messages to produce in all (or give -duration)")
	fs.DurationVar(&c.Duration, "duration", 0, fmt.Sprintf("how long to produce (or give -messages; default %s)", defaultDuration))
	fs.StringVar(&c.Compress, "compress", c.Compress, "batch compression: none, s2 or zstd")
	fs.BoolVar(&c.Idempotent, "idempotent", c.Idempotent, "idempotent produce (a producer id and sequence in every batch), as the client does by default; -idempotent=false for plain batches")
	fs.Func("acks", "produces to replicated topics answered once every in-sync replica has them (all, the client's default) or once the leader has them (leader)", func(v string) error {
		switch v {
		case "all", "leader":
			c.AcksLeader = v == "leader"
			return nil
		}
		return fmt.Errorf("%q: want all or leader", v)
	})
	fs.DurationVar(&c.Warmup, "warmup", c.Warmup, "untimed run of the same workload first, on topics deleted afterwards (0: none)")
	fs.Float64Var(&c.Rate, "rate", 0, "pace the producers at this many messages/s in all; latency counts from each message's intended send time (0: as fast as acknowledged)")
	fs.BoolVar(&c.Ceiling, "ceiling", false, "also measure the plainest way to move the same bytes on this machine, and the ratio to it")
	fs.BoolVar(&c.SharedClient, "shared-client", false, "one client (one pipelined connection) for every producer and consumer instead of one each")
	fs.BoolVar(&c.Keep, "keep", false, "keep the topics on the server afterwards (not with -embedded)")
	fs.StringVar(&c.TopicPrefix, "topic-prefix", "", "name the topics PREFIX-0, PREFIX-1, ... (default: bench- and a time stamp)")
	o.tls.register(fs, os.Getenv)
	fs.BoolVar(&o.json, "json", false, "print the result as one JSON object")
	fs.StringVar(&o.report, "report", "", "write a self-contained HTML report with charts to this file")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.BoolVar(&o.matrix, "matrix", false, "run the standard matrix (sizes x batches x volumes x modes, embedded, with -ceiling) and write its medians")
	fs.StringVar(&o.mcfg.Out, "matrix-out", "", "with -matrix: markdown file whose bench-matrix section is rewritten (default: print the section)")
	fs.IntVar(&o.mcfg.Reps, "reps", o.mcfg.Reps, "with -matrix: repetitions of each cell (medians are reported)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: haraqa-bench [flags]\n\n"+
			"Loads a haraqa server (-addr, or an in-process one with -embedded) and reports\n"+
			"throughput and latency. Examples:\n\n"+
			"  haraqa-bench -embedded -mode produce -size 1024 -batch 1000 -messages 500000 -ceiling\n"+
			"  haraqa-bench -embedded -mode both -producers 4 -duration 10s -report run.html\n"+
			"  haraqa-bench -matrix -matrix-out docs/benchmarks.md\n\nflags:\n")
		fs.PrintDefaults()
	}
	return fs
}

// matrixFlags checks that only flags -matrix takes were given, and takes
// them into the matrix configuration.
func (o *options) matrixFlags(set map[string]bool) error {
	for name := range set {
		switch name {
		case "duration":
			o.mcfg.Duration = o.cfg.Duration
		case "warmup":
			o.mcfg.Warmup = o.cfg.Warmup
		case "dir":
			o.mcfg.Dir = o.cfg.Dir
		case "matrix", "matrix-out", "reps", "cpuprofile":
		default:
			return fmt.Errorf("%w: -%s does not apply to -matrix (it takes -reps, -matrix-out, -duration, -warmup, -dir)", bench.ErrUsage, name)
		}
	}
	return o.mcfg.Validate()
}

// runFlags checks the flags of one run against each other and validates
// its configuration.
func (o *options) runFlags(set map[string]bool) error {
	c := &o.cfg
	only := func(names []string, why string) error {
		for _, name := range names {
			if set[name] {
				return fmt.Errorf("%w: -%s %s", bench.ErrUsage, name, why)
			}
		}
		return nil
	}
	if err := only([]string{"matrix-out", "reps"}, "applies to -matrix only"); err != nil {
		return err
	}
	if !c.Embedded {
		if err := only([]string{"volumes", "fsync", "entries", "ballast"}, "applies to -embedded only"); err != nil {
			return err
		}
	} else if err := only([]string{"addr", "http-addr", "keep"}, "does not apply to -embedded"); err != nil {
		return err
	}
	if set["single"] && c.Batch != 1 {
		return fmt.Errorf("%w: -single applies to -batch 1 only", bench.ErrUsage)
	}
	if !set["messages"] && !set["duration"] {
		c.Duration = defaultDuration
	}
	return c.Validate()
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, tty bool) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "haraqa-bench:", err)
		return 2
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "haraqa-bench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "haraqa-bench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	// A bar on a terminal; elsewhere (a pipe, a log) a line each second,
	// so a long run is not silent until it ends.
	var progress, lines io.Writer
	if tty {
		progress = stderr
	} else {
		lines = stderr
	}
	if o.matrix {
		return runMatrix(ctx, o, stdout, stderr)
	}
	ui := bench.UI{Progress: progress, Lines: lines, Log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	res, err := bench.Run(ctx, o.cfg, ui)
	if err != nil {
		fmt.Fprintln(stderr, "haraqa-bench:", err)
		if errors.Is(err, bench.ErrUsage) {
			return 2
		}
		return 1
	}
	if o.json {
		err = res.WriteJSON(stdout)
	} else {
		err = res.WriteTable(stdout)
	}
	if err == nil && o.report != "" {
		err = writeReport(o.report, res)
	}
	if err != nil {
		fmt.Fprintln(stderr, "haraqa-bench:", err)
		return 1
	}
	if !res.OK() {
		fmt.Fprintf(stderr, "haraqa-bench: FAILED: %d failed requests, %d messages missing, %d duplicated, %d corrupt\n",
			res.Errors, res.Gaps, res.Duplicates, res.Corrupt)
		return 1
	}
	return 0
}

func writeReport(path string, res *bench.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := bench.WriteReport(f, res); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func runMatrix(ctx context.Context, o *options, stdout, stderr io.Writer) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "haraqa-bench:", err)
		return 1
	}
	if o.mcfg.Out != "" {
		// Before the run, not after it: a hand-written section between the
		// markers would make the rewrite refuse minutes later.
		if err := bench.CheckSection(o.mcfg.Out); err != nil {
			fmt.Fprintln(stderr, "haraqa-bench:", err)
			return 1
		}
	}
	o.mcfg.Exe = exe
	o.mcfg.Log = stderr
	m, err := bench.RunMatrix(ctx, o.mcfg)
	if m != nil {
		section := m.Markdown()
		var werr error
		if o.mcfg.Out == "" {
			_, werr = io.WriteString(stdout, section)
		} else {
			werr = bench.RewriteSection(o.mcfg.Out, section)
		}
		if werr != nil {
			err = errors.Join(err, werr)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "haraqa-bench:", err)
		return 1
	}
	return 0
}
