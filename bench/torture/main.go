// Command torture runs the haraqa server binary as a subprocess and
// attacks it: kill -9 under concurrent producers, kill -9 under
// idempotent Producers that resend to the server restarted on the same
// port (every message must be stored exactly once), volumes damaged while
// it is stopped, a full disk and a descriptor limit while it runs, and
// 1,000 hostile connections beside a well-behaved producer and consumer;
// then (threats) each row of the second security review's threat table
// against a server with -auth-file, one tenant attacking another; then
// (failover) three servers as one cluster of replicated topics, their
// leaders killed under idempotent producers with acks=all; then
// (cluster-faults) the same cluster's leaders cut short and restarted, a
// follower's segment damaged while it is down, a leader frozen with
// SIGSTOP under producers with and without idempotence, and leader kills
// under Producers with batches in flight; then (cluster-attack) the
// cluster surface attacked: commands and connections without the
// members' secret, a connection storm, a log flood, a tenant reading
// cluster status or flooding group commits, 500 replicated topics.
// Every phase prints one line of what it checked (threats one per row
// too); the exit status is 1 if any acknowledged message was lost,
// changed or stored twice, or a check failed.
//
//	go run ./bench/torture                       # everything (make torture)
//	go run ./bench/torture -cycles 3 -attack 5s  # shorter
//	go run ./bench/torture -phases crash,faults  # some phases only
//	go run ./bench/torture -phases cluster-faults # a cluster's leaders cut short, frozen
//	go run ./bench/torture -phases cluster-attack # the cluster port and replication attacked
//	go run ./bench/torture -phases threats -threat-rows 1,3,D  # some rows of threats
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// config holds the command's flags.
type config struct {
	dir       string        // parent of the temporary directory
	keep      bool          // keep the temporary directory
	phases    string        // comma-separated phases to run
	cycles    int           // kill -9 cycles (crash, idempotent)
	faults    int           // volume-fault cycles
	producers int           // concurrent producers in the kill cycles (crash, idempotent)
	hostile   int           // hostile connections
	kinds     string        // kinds of hostile connections; empty: all
	idle      time.Duration // well-behaved load measured on the idle server
	attack    time.Duration // hostile load duration
	budget    int64         // -max-buffered-bytes passed when the server has it
	slack     int64         // RSS allowed over the budget
	extra     string        // extra flags for the hostile phase's server, space-separated
	seed      uint64
}

// env is what every phase shares.
type env struct {
	cfg config
	bin string // the haraqa binary
	dir string // temporary directory of this run
	rnd *rand.Rand
	// bufferBudget is whether the server takes -max-buffered-bytes.
	bufferBudget bool
}

// phase is one torture; run returns its one-line summary.
type phase struct {
	name string
	run  func(ctx context.Context, e *env) (string, error)
}

var phases = []phase{
	{"crash", runCrash},
	{"idempotent", runIdempotent},
	{"faults", runFaults},
	{"enospc", runENOSPC},
	{"emfile", runEMFILE},
	{"hostile", runHostile},
	{"threats", runThreats},
	{"failover", runFailover},
	{"cluster-faults", runClusterFaults},
	{"cluster-attack", runClusterAttack},
}

func main() {
	os.Exit(run())
}

func run() int {
	var cfg config
	flag.StringVar(&cfg.dir, "dir", os.TempDir(), "parent directory of the run's volumes")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the volumes and logs")
	flag.StringVar(&cfg.phases, "phases", "crash,idempotent,faults,enospc,emfile,hostile,threats,failover,cluster-faults,cluster-attack", "phases to run")
	flag.IntVar(&cfg.cycles, "cycles", 10, "kill -9 cycles")
	flag.IntVar(&cfg.faults, "faults", 10, "volume-fault cycles")
	flag.IntVar(&cfg.producers, "producers", 6, "concurrent producers in the kill cycles")
	flag.IntVar(&cfg.hostile, "hostile", 1000, "hostile connections")
	flag.StringVar(&cfg.kinds, "kinds", "", "hostile connection kinds, comma-separated (default all): "+attackerNames())
	flag.DurationVar(&cfg.idle, "idle", 5*time.Second, "well-behaved load on the idle server")
	flag.DurationVar(&cfg.attack, "attack", 30*time.Second, "hostile load duration")
	flag.Int64Var(&cfg.budget, "budget", 256<<20, "-max-buffered-bytes given to the server, if it has the flag")
	flag.Int64Var(&cfg.slack, "slack", 256<<20, "RSS allowed above the budget (runtime, page tables, caches)")
	flag.StringVar(&cfg.extra, "server-args", "", "extra flags for the servers of the hostile and threats phases, space-separated (e.g. -pprof); its serving line is printed")
	flag.Uint64Var(&cfg.seed, "seed", uint64(time.Now().UnixNano()), "random seed")
	flag.Parse()
	if *threatChildAddr != "" {
		return runVictimChild(*threatChildAddr, *threatChildCA, *threatChildSeq)
	}

	e, err := setup(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "torture:", err)
		return 1
	}
	keep := cfg.keep
	defer func() {
		if !keep {
			os.RemoveAll(e.dir)
		}
	}()
	fmt.Printf("torture: seed %d, binary %s\n", cfg.seed, e.bin)
	failed := 0
	for _, p := range phases {
		if !strings.Contains(","+cfg.phases+",", ","+p.name+",") {
			continue
		}
		begun := time.Now()
		line, err := p.run(context.Background(), e)
		took := time.Since(begun).Round(100 * time.Millisecond)
		if err != nil {
			failed++
			fmt.Printf("%-10s FAIL (%s): %s: %v\n", p.name, took, line, err)
			continue
		}
		fmt.Printf("%-10s ok (%s): %s\n", p.name, took, line)
	}
	if failed > 0 {
		fmt.Printf("torture: %d phase(s) failed; volumes and logs kept in %s\n", failed, e.dir)
		keep = true
		return 1
	}
	return 0
}

// setup makes the run's directory and builds the server into it.
func setup(cfg config) (*env, error) {
	dir, err := os.MkdirTemp(cfg.dir, "haraqa-torture-")
	if err != nil {
		return nil, err
	}
	bin, err := buildServer(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &env{cfg: cfg, bin: bin, dir: dir, rnd: rand.New(rand.NewPCG(cfg.seed, 13)),
		bufferBudget: hasFlag(bin, "max-buffered-bytes")}, nil
}

// volumes returns n fresh volume paths under the run's directory, in
// a directory of name it makes.
func (e *env) volumes(name string, n int) []string {
	vols := make([]string, n)
	for i := range vols {
		vols[i] = filepath.Join(e.dir, name, fmt.Sprintf("vol%d", i+1))
	}
	_ = os.MkdirAll(filepath.Join(e.dir, name), 0o755)
	return vols
}

func attackerNames() string {
	names := make([]string, len(attackers))
	for i, a := range attackers {
		names[i] = a.name
	}
	return strings.Join(names, ",")
}
