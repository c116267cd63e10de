package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/haraqa/haraqa/client"
)

// victimProd is the victim's producer number in its messages.
const victimProd = 700

// victimSeqBlock is how many sequence numbers each victim process may
// use: a restarted one goes on from the next block, so a producer's
// sequences only grow.
const victimSeqBlock = 1 << 28

// The victim runs in a process of its own (this binary, started with
// -threat-victim-addr): in the same process its goroutine would wait in the Go
// scheduler's run queue behind hundreds of attacking goroutines, and its
// p99 would measure that queue rather than the server. An attacker is
// another machine's load; the victim's own process is what a tenant has.
var (
	threatChildAddr = flag.String("threat-victim-addr", "", "threats: run as the victim process against this binary port (internal)")
	threatChildCA   = flag.String("threat-victim-ca", "", "threats: the victim process's TLS CA file (internal)")
	threatChildSeq  = flag.Int("threat-victim-seq", 0, "threats: the victim process's first sequence number (internal)")
)

// victimTokenEnv carries the victim's token to its process, out of ps.
const victimTokenEnv = "HARAQA_TORTURE_VICTIM_TOKEN"

// victimLat is a histogram of produce latencies, in microseconds.
type victimLat struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

func newVictimLat() *victimLat { return &victimLat{h: hdrhistogram.New(1, 60_000_000, 3)} }

func (l *victimLat) add(d time.Duration) {
	l.mu.Lock()
	_ = l.h.RecordValue(max(d.Microseconds(), 1))
	l.mu.Unlock()
}

// merge adds o's samples to l.
func (l *victimLat) merge(o *victimLat) {
	o.mu.Lock()
	c := o.h.Export()
	o.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.h.Merge(hdrhistogram.Import(c))
}

func (l *victimLat) p99() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Duration(l.h.ValueAtQuantile(99)) * time.Microsecond
}

func (l *victimLat) count() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.h.TotalCount()
}

// threatVictim is the well-behaved tenant: a process of its own on 127.0.0.1
// with its own token, which produces one message to the row's topic,
// waits for the ack, pauses a millisecond, and so on, and reports each
// ack and its latency; every acknowledged message goes in the ledger.
type threatVictim struct {
	check   *client.Client // reading back, in this process
	l       *ledger
	cmd     *exec.Cmd
	in      io.WriteCloser
	replies chan string
	window  atomic.Pointer[victimLat]
	errMu   sync.Mutex
	nerr    int
	first   error
	done    chan struct{} // closed when the process's output ends
}

func startVictim(ctx context.Context, g *threatRig) (*threatVictim, error) {
	check, err := g.dial(ctx, g.tok.victim)
	if err != nil {
		return nil, err
	}
	v := &threatVictim{check: check, l: g.ledger, replies: make(chan string, 1), done: make(chan struct{})}
	self, err := os.Executable()
	if err != nil {
		check.Close()
		return nil, err
	}
	seq := v.l.next(victimProd, victimSeqBlock)
	args := []string{"-threat-victim-addr", g.srv.addr, "-threat-victim-seq", strconv.Itoa(seq)}
	if g.ca != "" {
		args = append(args, "-threat-victim-ca", g.ca)
	}
	name, args := schedOther(self, args)
	v.cmd = exec.Command(name, args...)
	v.cmd.Env = append(os.Environ(), victimTokenEnv+"="+g.tok.victim)
	v.cmd.Stderr = os.Stderr
	out, err := v.cmd.StdoutPipe()
	if err == nil {
		v.in, err = v.cmd.StdinPipe()
	}
	if err == nil {
		err = v.cmd.Start()
	}
	if err != nil {
		check.Close()
		return nil, fmt.Errorf("victim process: %w", err)
	}
	go v.read(out)
	if r := v.reply(); r != "ready" {
		v.close()
		return nil, fmt.Errorf("victim process: %s", r)
	}
	return v, nil
}

// read takes the victim process's lines: "ack TOPIC BASE SEQ MICROS",
// "err TEXT", or a reply to a command.
func (v *threatVictim) read(out io.Reader) {
	defer close(v.done)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "ack "):
			f := strings.Fields(line)
			if len(f) != 5 {
				v.noteErr(fmt.Errorf("victim process: bad line %q", line))
				continue
			}
			base, _ := strconv.ParseInt(f[2], 10, 64)
			seq, _ := strconv.Atoi(f[3])
			us, _ := strconv.ParseInt(f[4], 10, 64)
			if err := v.l.record(f[1], base, victimProd, seq, 1); err != nil {
				v.noteErr(err)
				continue
			}
			if w := v.window.Load(); w != nil {
				w.add(time.Duration(us) * time.Microsecond)
			}
		case strings.HasPrefix(line, "err "):
			v.l.failed()
			v.noteErr(errors.New(strings.TrimPrefix(line, "err ")))
		default:
			v.replies <- line
		}
	}
}

// reply waits for the victim process's answer to a command.
func (v *threatVictim) reply() string {
	select {
	case r := <-v.replies:
		return r
	case <-v.done:
		return "the victim process ended"
	case <-time.After(30 * time.Second):
		return "the victim process did not answer in 30s"
	}
}

// do sends a command and waits for its answer.
func (v *threatVictim) do(cmd string) error {
	if _, err := fmt.Fprintln(v.in, cmd); err != nil {
		return fmt.Errorf("victim process: %s: %w", cmd, err)
	}
	if r := v.reply(); r != "ok" {
		return fmt.Errorf("victim process: %s: %s", cmd, r)
	}
	return nil
}

func (v *threatVictim) noteErr(err error) {
	v.errMu.Lock()
	v.nerr++
	if v.first == nil {
		v.first = err
	}
	v.errMu.Unlock()
}

// takeErrors returns the produces failed since the last call, and the first.
func (v *threatVictim) takeErrors() (int, error) {
	v.errMu.Lock()
	defer v.errMu.Unlock()
	n, first := v.nerr, v.first
	v.nerr, v.first = 0, nil
	return n, first
}

// record sends the latencies to w from now on; nil: nowhere.
func (v *threatVictim) record(w *victimLat) { v.window.Store(w) }

// idleWindow moves the victim to topic and measures it for d before the
// attack.
func (v *threatVictim) idleWindow(ctx context.Context, topic string, d time.Duration) (*victimLat, error) {
	if err := v.check.CreateTopic(ctx, topic); err != nil && !errors.Is(err, client.ErrTopicExists) {
		return nil, err
	}
	if err := v.do("topic " + topic); err != nil {
		return nil, err
	}
	v.takeErrors()
	w := newVictimLat()
	v.record(w)
	time.Sleep(d)
	v.record(nil)
	if n, first := v.takeErrors(); n > 0 {
		return nil, first
	}
	if w.count() == 0 {
		return nil, errors.New("no produce acknowledged in the idle window")
	}
	return w, nil
}

// park stops the victim's produces until the next idleWindow; every ack
// it had is in the ledger when it returns.
func (v *threatVictim) park() error { return v.do("park") }

// pause stops the victim's produces until resume.
func (v *threatVictim) pause() error  { return v.do("pause") }
func (v *threatVictim) resume() error { return v.do("resume") }

// verify checks every message acknowledged on topic is stored once.
func (v *threatVictim) verify(ctx context.Context, topic string) (checked, error) {
	return v.l.verify(ctx, v.check, topic)
}

func (v *threatVictim) close() {
	_ = v.in.Close() // the process ends at the end of its input
	waited := make(chan struct{})
	go func() { <-v.done; _ = v.cmd.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(15 * time.Second):
		_ = v.cmd.Process.Kill()
		<-waited
	}
	v.check.Close()
}

// runVictimChild is the victim process: it dials addr, then produces
// while it has a topic, between the commands it reads from stdin
// ("topic NAME", "park", "pause", "resume"), and ends with its input.
func runVictimChild(addr, caFile string, seq int) int {
	opts := []client.Option{client.WithToken(os.Getenv(victimTokenEnv)),
		client.WithDialTimeout(2 * time.Second), client.WithRequestTimeout(10 * time.Second), client.WithRetries(0, 0)}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		opts = append(opts, client.WithTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}))
	}
	out := bufio.NewWriter(os.Stdout)
	if err := shortSlice(victimSlice); err != nil {
		fmt.Fprintln(os.Stderr, "victim process: scheduler slice:", err)
	}
	c, err := client.Dial(context.Background(), addr, opts...)
	if err != nil {
		fmt.Fprintln(out, "error", err)
		out.Flush()
		return 1
	}
	defer c.Close()
	cmds := make(chan string)
	go func() {
		defer close(cmds)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			cmds <- sc.Text()
		}
	}()
	fmt.Fprintln(out, "ready")
	out.Flush()
	topic, paused := "", false
	for {
		select {
		case cmd, ok := <-cmds:
			if !ok {
				out.Flush()
				return 0
			}
			name, arg, _ := strings.Cut(cmd, " ")
			switch name {
			case "topic":
				topic = arg
			case "park":
				topic = ""
			case "pause":
				paused = true
			case "resume":
				paused = false
			}
			fmt.Fprintln(out, "ok")
			out.Flush()
			continue
		case <-time.After(time.Millisecond):
		}
		if topic == "" || paused {
			continue
		}
		begun := time.Now()
		base, err := c.Produce(context.Background(), topic, payload(victimProd, seq))
		took := time.Since(begun)
		if err != nil {
			fmt.Fprintln(out, "err", strings.ReplaceAll(err.Error(), "\n", "; "))
			out.Flush()
			time.Sleep(10 * time.Millisecond)
			seq++
			continue
		}
		fmt.Fprintln(out, "ack", topic, base, seq, took.Microseconds())
		out.Flush() // at once, so that the ack falls in the window it was measured in
		seq++
	}
}
