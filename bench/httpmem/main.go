// Command httpmem measures a haraqa server's resident memory (VmRSS) while
// HTTP clients hold it busy with large consumes or large produces: the
// figures of docs/benchmarks.md, "HTTP memory". It starts the server
// binary given on a fresh volume, fills a topic, runs -n clients in a loop
// for -d and prints the peak and mean RSS with the answers' statuses.
//
//	go build -o /tmp/haraqa ./cmd/server
//	go run ./bench/httpmem -bin /tmp/haraqa -mode get -codec s2 -per 60000 -n 16
//	go run ./bench/httpmem -bin /tmp/haraqa -mode post -n 12 -d 15s
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// options are the command's flags.
type options struct {
	bin, mode, codec, extra string
	n, per, total           int
	httpPort, tcpPort       int
	dur                     time.Duration
}

func main() {
	o := parseFlags()
	dir, cmd := startServer(o)
	defer os.RemoveAll(dir)
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	base := fmt.Sprintf("http://127.0.0.1:%d", o.httpPort)
	waitReady(base)
	pid := cmd.Process.Pid

	createTopics(base, "big", "p")
	if o.mode == "get" {
		fill(o.tcpPort, o.codec, o.per, o.total)
	}
	fmt.Printf("rss after filling: %d MiB\n", rssMiB(pid))

	l := startLoad(o, base)
	peak, mean := sampleRSS(pid, o.dur)
	l.end()
	fmt.Printf("mode=%s n=%d: rss peak %d MiB, mean (last two thirds) %d MiB; answers: %d ok, %d refused, %d other\n",
		o.mode, o.n, peak, mean, l.ok.Load(), l.refused.Load(), l.other.Load())
}

// parseFlags reads the command's flags.
func parseFlags() options {
	bin := flag.String("bin", "haraqa", "server binary (go build ./cmd/server)")
	mode := flag.String("mode", "get", "get: consumes of the stored topic; post: produces of 63 MiB bodies")
	n := flag.Int("n", 16, "concurrent clients")
	dur := flag.Duration("d", 10*time.Second, "how long the clients run")
	codec := flag.String("codec", "s2", "codec of the stored batches: none, s2, zstd")
	per := flag.Int("per", 60000, "1 KiB messages per stored batch")
	total := flag.Int("total", 240000, "1 KiB messages stored")
	httpPort := flag.Int("http", 18353, "the server's HTTP port")
	tcpPort := flag.Int("tcp", 18354, "the server's binary port")
	extra := flag.String("args", "", "more server flags, space-separated")
	flag.Parse()
	return options{bin: *bin, mode: *mode, codec: *codec, extra: *extra,
		n: *n, per: *per, total: *total, httpPort: *httpPort, tcpPort: *tcpPort, dur: *dur}
}

// startServer starts the server binary on a fresh volume in a temporary
// directory, which the caller removes once it has stopped the server.
func startServer(o options) (dir string, cmd *exec.Cmd) {
	dir, err := os.MkdirTemp("", "httpmem")
	if err != nil {
		log.Fatal(err)
	}
	args := []string{"-http", strconv.Itoa(o.httpPort), "-tcp", strconv.Itoa(o.tcpPort), "-listen", "127.0.0.1", "-log-level", "warn"}
	args = append(append(args, strings.Fields(o.extra)...), dir)
	cmd = exec.Command(o.bin, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	return dir, cmd
}

// createTopics creates the topics over HTTP.
func createTopics(base string, topics ...string) {
	for _, t := range topics {
		req, _ := http.NewRequest("PUT", base+"/topics/"+t, nil)
		if r, err := http.DefaultClient.Do(req); err != nil || r.StatusCode != http.StatusCreated {
			log.Fatalf("create %s: %v %v", t, r, err)
		}
	}
}

// load is the clients' run: what they send, and their answers by kind.
type load struct {
	o     options
	base  string
	cl    *http.Client
	body  []byte // post: a produce's body
	sizes string // post: its X-Sizes header

	stop               atomic.Bool
	wg                 sync.WaitGroup
	ok, refused, other atomic.Int64
}

// postMsgs is the messages of a post's body, of 1 MiB each: a batch under
// the 64 MiB frame limit.
const postMsgs = 63

// startLoad starts o.n clients against the server at base; they run until
// end.
func startLoad(o options, base string) *load {
	l := &load{o: o, base: base,
		cl:    &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.n}},
		body:  bytes.Repeat([]byte("p"), postMsgs<<20),
		sizes: strings.TrimSuffix(strings.Repeat("1048576:", postMsgs), ":"),
	}
	for i := range o.n {
		l.wg.Go(func() { l.client(i) })
	}
	return l
}

// client is client i's loop: a request, its answer read and counted, and
// the next, until end.
func (l *load) client(i int) {
	for !l.stop.Load() {
		r, err := l.cl.Do(l.request(i))
		if err != nil {
			l.other.Add(1)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
		switch r.StatusCode {
		case http.StatusOK:
			l.ok.Add(1)
		case http.StatusTooManyRequests, http.StatusServiceUnavailable:
			l.refused.Add(1)
		default:
			l.other.Add(1)
		}
	}
}

// request is client i's next request: a consume of the stored topic from
// an offset of its own (get), or a produce of the large body (post).
func (l *load) request(i int) *http.Request {
	if l.o.mode == "get" {
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/topics/big?id=%d", l.base, (i*1024)%max(1, l.o.total-l.o.per)), nil)
		return req
	}
	req, _ := http.NewRequest("POST", l.base+"/topics/p", bytes.NewReader(l.body))
	req.Header.Set("X-Sizes", l.sizes)
	return req
}

// end stops the clients and waits for them.
func (l *load) end() {
	l.stop.Store(true)
	l.wg.Wait()
}

// sampleRSS reads pid's resident set every 250 ms for dur and returns its
// peak and its mean past the first third (the warm-up), in MiB.
func sampleRSS(pid int, dur time.Duration) (peak, mean int64) {
	var sum, cnt int64
	began := time.Now()
	for time.Since(began) < dur {
		time.Sleep(250 * time.Millisecond)
		v := rssMiB(pid)
		peak = max(peak, v)
		if time.Since(began) > dur/3 { // past the warm-up
			sum += v
			cnt++
		}
	}
	return peak, sum / max(cnt, 1)
}

// fill stores total 1 KiB messages in topic "big", per to a batch.
func fill(tcpPort int, codec string, per, total int) {
	cd := map[string]protocol.Codec{"none": protocol.CodecNone, "s2": protocol.CodecS2, "zstd": protocol.CodecZstd}[codec]
	ctx := context.Background()
	c, err := client.Dial(ctx, fmt.Sprintf("127.0.0.1:%d", tcpPort), client.WithCompression(cd))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	msg := bytes.Repeat([]byte("m"), 1024)
	msgs := make([][]byte, per)
	for j := range msgs {
		msgs[j] = msg
	}
	for range total / per {
		if _, err := c.Produce(ctx, "big", msgs...); err != nil {
			log.Fatal(err)
		}
	}
}

func waitReady(base string) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := http.Get(base + "/readyz")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			log.Fatal("the server is not ready after 20 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rssMiB is pid's resident set in MiB, from /proc.
func rssMiB(pid int) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for l := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb >> 10
		}
	}
	return 0
}
