package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/httpapi"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// rawHTTP sends req on a new connection to s and returns it with a
// reader of its responses; with readBuffer > 0 its socket's receive buffer
// is that small, so that the server's writes of a large answer block.
func rawHTTP(t *testing.T, s *server, req string, readBuffer int) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", strings.TrimPrefix(s.url, "http://"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if readBuffer > 0 {
		if err := nc.(*net.TCPConn).SetReadBuffer(readBuffer); err != nil {
			t.Fatal(err)
		}
	}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(nc, req); err != nil {
		t.Fatal(err)
	}
	return nc, bufio.NewReader(nc)
}

// refused reads a response from br and checks that it is a 429 with
// Retry-After naming flag.
func refused(t *testing.T, what string, br *bufio.Reader, flag string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), flag) || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("%s: %d %q (Retry-After %q), want 429 naming %s with Retry-After", what, resp.StatusCode, body, resp.Header.Get("Retry-After"), flag)
	}
}

// TestHTTPBudget: HTTP request bodies and responses count
// against -max-buffered-bytes, the budget of the binary port. Clients hold
// POSTs that declare 8 MiB less 64 bytes and send 1 KiB: five fit the 40
// MiB budget (each is reserved once, as the batch its body is read into),
// the sixth is refused with 429 before its body is read, and so is a
// consume of an 8 MiB message stored as one small zstd batch. Once they
// are gone, clients that GET that message and do not read hold about 8
// MiB each (the decoded body, which the response is written from): four
// are served, the next 429. The total never passes the budget.
func TestHTTPBudget(t *testing.T) {
	const (
		budget  = 40 << 20
		msgSize = 8 << 20
	)
	s := startREST(t, httpapi.DefaultConfig(), func(_ *storage.Options, c *broker.Config) { c.MaxBufferedBytes = budget })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, s.Addr, client.WithCompression(protocol.CodecZstd), client.WithAutoCreate(true))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Produce(ctx, "big", bytes.Repeat([]byte("z"), msgSize)); err != nil {
		t.Fatal(err)
	}
	buffered := func() int64 { return s.Broker.Stats().BufferedBytes }
	const small = 64 << 10 // what the binary client's connection may hold meanwhile

	const postSize = msgSize - 64
	post := fmt.Sprintf("POST /topics/big HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\nX-Sizes: %d\r\n\r\n%s", postSize, postSize, strings.Repeat("x", 1024))
	var held []net.Conn
	for i := range 5 {
		nc, _ := rawHTTP(t, s, post, 0)
		held = append(held, nc)
		waitFor(t, "the held body to be reserved", func() bool { return buffered() >= int64(i+1)*postSize })
	}
	_, br := rawHTTP(t, s, post, 0)
	refused(t, "a sixth held POST", br, "-max-buffered-bytes")
	r := do(t, "GET", s.url+"/topics/big?id=0", "")
	if r.code != http.StatusTooManyRequests || !strings.Contains(r.body, "-max-buffered-bytes") {
		t.Fatalf("a consume while the budget is held: %d %q, want 429", r.code, r.body)
	}
	if b := buffered(); b > budget {
		t.Fatalf("buffered %d bytes, over the budget %d", b, budget)
	}
	for _, nc := range held {
		nc.Close()
	}
	waitFor(t, "the held bodies to leave the total", func() bool { return buffered() <= small })
	if r := do(t, "GET", s.url+"/topics/big?id=0", "").want(t, "consume", 200); len(r.body) != msgSize {
		t.Fatalf("consume: %d bytes, want %d", len(r.body), msgSize)
	}

	get := "GET /topics/big?id=0 HTTP/1.1\r\nHost: h\r\n\r\n"
	for i := range 4 {
		_, br := rawHTTP(t, s, get, 4<<10)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("held GET %d: %v %v", i, resp, err)
		}
	}
	for i := range 2 {
		_, br := rawHTTP(t, s, get, 4<<10)
		refused(t, fmt.Sprintf("GET %d past the held ones", i), br, "-max-buffered-bytes")
	}
	if b := buffered(); b > budget || b < 4*msgSize {
		t.Fatalf("buffered %d bytes with four held GETs: want about %d, at most the budget %d", b, 4*msgSize, budget)
	}
}

// TestHTTPBudgetWaits: the HTTP port's own bound (Config.MaxBufferedBytes)
// holds below the server's. A POST that does not fit waits its turn: it
// is served if the bytes come free within Config.BudgetWait, and answered
// 429 with Retry-After naming -max-http-buffered-bytes if not; one larger
// than the whole bound is refused at once. A held body counts once.
func TestHTTPBudgetWaits(t *testing.T) {
	const (
		httpBudget = 12 << 20
		heldSize   = 8 << 20
	)
	cfg := httpapi.DefaultConfig()
	cfg.MaxBufferedBytes = httpBudget
	cfg.BudgetWait = 300 * time.Millisecond
	s := startREST(t, cfg)
	do(t, "PUT", s.url+"/topics/w", "").want(t, "create", 201)
	buffered := func() int64 { return s.Broker.Stats().BufferedBytes }

	hold := fmt.Sprintf("POST /topics/w HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\nX-Sizes: %d\r\n\r\nx", heldSize, heldSize)
	nc, _ := rawHTTP(t, s, hold, 0)
	waitFor(t, "the held body to be reserved", func() bool { return buffered() >= heldSize })
	if b := buffered(); b > heldSize+1<<10 {
		t.Fatalf("a held %d-byte body holds %d bytes: want it counted once", heldSize, b)
	}

	// 6 MiB more does not fit 12: it waits, then 429.
	msg := strings.Repeat("y", 6<<20)
	began := time.Now()
	r := do(t, "POST", s.url+"/topics/w", msg, "X-Sizes", strconv.Itoa(len(msg)))
	if r.code != http.StatusTooManyRequests || !strings.Contains(r.body, "-max-http-buffered-bytes") || r.h.Get("Retry-After") == "" {
		t.Fatalf("a POST past the HTTP budget: %d %q, want 429 naming -max-http-buffered-bytes with Retry-After", r.code, r.body)
	}
	if waited := time.Since(began); waited < cfg.BudgetWait {
		t.Fatalf("refused after %s: want a wait of %s first", waited, cfg.BudgetWait)
	}
	// Larger than the whole bound: refused without a wait.
	huge := strings.Repeat("z", httpBudget+1)
	if r := do(t, "POST", s.url+"/topics/w", huge, "X-Sizes", strconv.Itoa(len(huge))); r.code != http.StatusTooManyRequests {
		t.Fatalf("a POST over the whole HTTP budget: %d %q, want 429", r.code, r.body)
	}

	// The held body goes while the next one waits: it is served.
	time.AfterFunc(50*time.Millisecond, func() { nc.Close() })
	do(t, "POST", s.url+"/topics/w", msg, "X-Sizes", strconv.Itoa(len(msg))).want(t, "a POST that waited for the held body to go", 200)
	waitFor(t, "the budget to be free", func() bool { return buffered() <= 64<<10 })
}

// TestConsumeBoundedWithinBatch: a consume's response stops at
// MaxConsumeBytes of messages within a batch too (the first message is
// always served), compressed or not, and the next consume from X-Id plus
// the count goes on where it stopped: the original client reads on.
func TestConsumeBoundedWithinBatch(t *testing.T) {
	for _, codec := range []protocol.Codec{protocol.CodecNone, protocol.CodecS2} {
		t.Run(codec.String(), func(t *testing.T) {
			cfg := httpapi.DefaultConfig()
			cfg.MaxConsumeBytes = 64 << 10
			s := startREST(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := client.Dial(ctx, s.Addr, client.WithCompression(codec), client.WithAutoCreate(true))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			const n = 300
			msgs := make([][]byte, n)
			for i := range msgs {
				msgs[i] = fmt.Appendf(bytes.Repeat([]byte{'.'}, 1020), "%04d", i)
			}
			if _, err := c.Produce(ctx, "one", msgs...); err != nil {
				t.Fatal(err)
			}
			var got []string
			for id := 0; id < n; {
				r := do(t, "GET", fmt.Sprintf("%s/topics/one?id=%d", s.url, id), "").want(t, "consume", 200)
				sizes := strings.Split(r.h.Get("X-Sizes"), ":")
				if len(r.body) > int(cfg.MaxConsumeBytes) || len(sizes) == 0 {
					t.Fatalf("consume from %d: %d bytes, %d messages: want at most %d bytes", id, len(r.body), len(sizes), cfg.MaxConsumeBytes)
				}
				for _, f := range sizes {
					k, _ := strconv.Atoi(f)
					got = append(got, r.body[:k])
					r.body = r.body[k:]
				}
				id += len(sizes)
			}
			if len(got) != n {
				t.Fatalf("%d messages read, want %d", len(got), n)
			}
			for i, m := range got {
				if m != string(msgs[i]) {
					t.Fatalf("message %d: %q, want %q", i, m[len(m)-4:], msgs[i][len(msgs[i])-4:])
				}
			}
		})
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
