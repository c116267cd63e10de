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

func main() {
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

	dir, err := os.MkdirTemp("", "httpmem")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	args := []string{"-http", strconv.Itoa(*httpPort), "-tcp", strconv.Itoa(*tcpPort), "-listen", "127.0.0.1", "-log-level", "warn"}
	args = append(append(args, strings.Fields(*extra)...), dir)
	cmd := exec.Command(*bin, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	base := fmt.Sprintf("http://127.0.0.1:%d", *httpPort)
	waitReady(base)
	pid := cmd.Process.Pid

	for _, t := range []string{"big", "p"} {
		req, _ := http.NewRequest("PUT", base+"/topics/"+t, nil)
		if r, err := http.DefaultClient.Do(req); err != nil || r.StatusCode != http.StatusCreated {
			log.Fatalf("create %s: %v %v", t, r, err)
		}
	}
	if *mode == "get" {
		fill(*tcpPort, *codec, *per, *total)
	}
	fmt.Printf("rss after filling: %d MiB\n", rssMiB(pid))

	var stop atomic.Bool
	var ok, refused, other atomic.Int64
	var wg sync.WaitGroup
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *n}}
	const postMsgs = 63 // of 1 MiB: a batch under the 64 MiB frame limit
	body := bytes.Repeat([]byte("p"), postMsgs<<20)
	sizes := strings.TrimSuffix(strings.Repeat("1048576:", postMsgs), ":")
	for i := range *n {
		wg.Go(func() {
			for !stop.Load() {
				var req *http.Request
				if *mode == "get" {
					req, _ = http.NewRequest("GET", fmt.Sprintf("%s/topics/big?id=%d", base, (i*1024)%max(1, *total-*per)), nil)
				} else {
					req, _ = http.NewRequest("POST", base+"/topics/p", bytes.NewReader(body))
					req.Header.Set("X-Sizes", sizes)
				}
				r, err := cl.Do(req)
				if err != nil {
					other.Add(1)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				_, _ = io.Copy(io.Discard, r.Body)
				r.Body.Close()
				switch r.StatusCode {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests, http.StatusServiceUnavailable:
					refused.Add(1)
				default:
					other.Add(1)
				}
			}
		})
	}
	var peak, sum, cnt int64
	began := time.Now()
	for time.Since(began) < *dur {
		time.Sleep(250 * time.Millisecond)
		v := rssMiB(pid)
		peak = max(peak, v)
		if time.Since(began) > *dur/3 { // past the warm-up
			sum += v
			cnt++
		}
	}
	stop.Store(true)
	wg.Wait()
	fmt.Printf("mode=%s n=%d: rss peak %d MiB, mean (last two thirds) %d MiB; answers: %d ok, %d refused, %d other\n",
		*mode, *n, peak, sum/max(cnt, 1), ok.Load(), refused.Load(), other.Load())
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
