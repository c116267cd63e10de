package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// Rows 1 and 8: memory taken before identity, and by HTTP requests.

const (
	preHelloConns = 12       // connections announcing a 64 MiB frame before hello
	preHelloFrame = 64 << 20 // the frame they announce, length field included
	httpMemGets   = 8        // GETs of the 64 MiB message, never read
	httpMemPosts  = 8        // 64 MiB POST bodies held one byte short
	httpMemMsg    = 64<<20 - 4096
	chunk         = 1 << 20 // bytes an attacker writes at a time
	httpMemHeader = "POST /topics/a.post8 HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\nX-Sizes: %d\r\n\r\n"
)

// attackPreHelloFrames: 12 connections without hello each announce a 64 MiB
// frame and send all of it but its last byte. Each must be closed by the
// server (a pre-hello frame is bounded by -max-prehello-frame) and RSS
// stay low.
func attackPreHelloFrames(ctx context.Context, r *rowRun) (string, error) {
	frame := make([]byte, preHelloFrame-1)
	binary.LittleEndian.PutUint32(frame, preHelloFrame-4)
	frame[4], frame[5] = 1, byte(protocol.OpProduce)
	binary.LittleEndian.PutUint32(frame[8:], 1)
	var refused, failed atomic.Int64
	var wg sync.WaitGroup
	for range preHelloConns {
		wg.Go(func() {
			c, err := r.rig.rawDial(attackerIP(r.id, 0))
			if err != nil {
				failed.Add(1)
				return
			}
			defer c.Close()
			if closedByServer(c, frame, r.stop) {
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	line := fmt.Sprintf("%d pre-hello %d MiB frames, all but the last byte, from %s: refused %d/%d within %s",
		preHelloConns, preHelloFrame>>20, attackerIP(r.id, 0), refused.Load(), preHelloConns, time.Since(r.begun).Round(100*time.Millisecond))
	if n := failed.Load(); n > 0 {
		line += fmt.Sprintf(" (%d not connected)", n)
	}
	if refused.Load() < preHelloConns {
		return line, fmt.Errorf("%d connections still open at the end of the attack", preHelloConns-refused.Load())
	}
	return line, nil
}

// closedByServer writes data to c, a chunk at a time, until stop, and
// reports whether the server closed c first.
func closedByServer(c net.Conn, data []byte, stop <-chan struct{}) bool {
	closed := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, c); close(closed) }()
	go writeUntil(c, data, stop)
	select {
	case <-closed:
		return true
	case <-stop:
		return false
	}
}

// writeUntil writes data to c a chunk at a time until done, an error or
// stop.
func writeUntil(c net.Conn, data []byte, stop <-chan struct{}) {
	for off := 0; off < len(data); {
		select {
		case <-stop:
			return
		default:
		}
		_ = c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		n, err := c.Write(data[off:min(off+chunk, len(data))])
		off += n
		if err != nil && !isTimeout(err) {
			return
		}
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// attackHTTPMemory: a 7 KB stored batch holding a 64 MiB message, fetched
// by 8 GETs that never read; and 8 POSTs of 64 MiB held one byte short.
// HTTP bodies and responses in flight count against -max-buffered-bytes,
// so RSS stays under the limit.
func attackHTTPMemory(ctx context.Context, r *rowRun) (string, error) {
	g := r.rig
	a, err := g.rawHello(attackerIP(r.id, 0), g.tok.attacker)
	if err != nil {
		return "attacker hello", err
	}
	defer a.Close()
	batch := protocol.AppendBatchCodec(nil, protocol.CodecZstd, make([]byte, httpMemMsg))
	code, _, err := a.do(func(id uint32) []byte {
		return protocol.AppendProduceRequest(nil, id, "a.big8", protocol.ProduceCreateTopic, batch)
	})
	if err != nil {
		return "produce the 64 MiB message", err
	}
	if code != protocol.CodeOK {
		return fmt.Sprintf("a %d KB batch holding a 64 MiB message refused at produce (code %d): nothing to fetch", len(batch)>>10, code), nil
	}
	if code, _, err = a.do(func(id uint32) []byte { return protocol.AppendCreateTopicRequest(nil, id, "a.post8") }); err != nil || code != protocol.CodeOK {
		return "create a.post8", fmt.Errorf("code %d: %v", code, err)
	}
	get := fmt.Sprintf("GET /topics/a.big8?id=0&limit=1 HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer %s\r\n\r\n", g.tok.attacker)
	post := fmt.Sprintf(httpMemHeader, g.tok.attacker, httpMemMsg, httpMemMsg)
	body := make([]byte, httpMemMsg-1)
	statuses := make([]int, httpMemGets+httpMemPosts)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Go(func() {
			if i < httpMemGets {
				statuses[i] = holdHTTP(g, attackerIP(r.id, i), get, nil, r.stop)
			} else {
				statuses[i] = holdHTTP(g, attackerIP(r.id, i), post, body, r.stop)
			}
		})
	}
	wg.Wait()
	return fmt.Sprintf("a %d KB batch holding a 64 MiB message: %d GETs never read (%s), %d POSTs of 64 MiB held one byte short (%s)",
		len(batch)>>10, httpMemGets, statusCounts(statuses[:httpMemGets]), httpMemPosts, statusCounts(statuses[httpMemGets:])), nil
}

// holdHTTP sends head and body on a connection from ip, reads no more
// than the status line of the answer, and holds the connection until
// stop. It returns the status, 0 if none came.
func holdHTTP(g *threatRig, ip, head string, body []byte, stop <-chan struct{}) int {
	c, err := dialer(ip).Dial("tcp", g.http)
	if err != nil {
		return -1
	}
	defer c.Close()
	var status atomic.Int64
	go func() {
		line, err := bufio.NewReader(c).ReadString('\n')
		if f := strings.Fields(line); err == nil && len(f) >= 2 {
			n, _ := strconv.Atoi(f[1])
			status.Store(int64(n))
		}
	}()
	if _, err := io.WriteString(c, head); err == nil {
		writeUntil(c, body, stop)
	}
	<-stop
	return int(status.Load())
}

// statusCounts is "200 x8" for the statuses (0: no answer, held; -1: not
// connected).
func statusCounts(statuses []int) string {
	labels := make([]string, len(statuses))
	for i, s := range statuses {
		switch s {
		case 0:
			labels[i] = "held, no answer"
		case -1:
			labels[i] = "not connected"
		default:
			labels[i] = strconv.Itoa(s)
		}
	}
	return joinCounts(labels)
}
