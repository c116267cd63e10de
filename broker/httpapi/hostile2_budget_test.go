package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
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

// refused reads a response from br and checks that it is a 429 naming
// -max-buffered-bytes.
func refused(t *testing.T, what string, br *bufio.Reader) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "-max-buffered-bytes") {
		t.Fatalf("%s: %d %q, want 429 naming -max-buffered-bytes", what, resp.StatusCode, body)
	}
}

// TestHostile2Row8HTTPBudget: HTTP request bodies and responses count
// against -max-buffered-bytes, the budget of the binary port. Clients hold
// POSTs that declare 8 MiB and send 1 KiB: five fit the 40 MiB budget, the
// sixth is refused with 429 before its body is read, and so is a consume
// of an 8 MiB message stored as one small zstd batch. Once they are gone,
// clients that GET that message and do not read hold about 16 MiB each
// (the decoded batch and the response): two are served, the next 429. The
// total never passes the budget.
func TestHostile2Row8HTTPBudget(t *testing.T) {
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

	post := fmt.Sprintf("POST /topics/big HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\nX-Sizes: %d\r\n\r\n%s", msgSize, msgSize, strings.Repeat("x", 1024))
	var held []net.Conn
	for i := range 5 {
		nc, _ := rawHTTP(t, s, post, 0)
		held = append(held, nc)
		waitFor(t, "the held body to be reserved", func() bool { return buffered() >= int64(i+1)*msgSize })
	}
	_, br := rawHTTP(t, s, post, 0)
	refused(t, "a sixth held POST", br)
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
	for i := range 2 {
		_, br := rawHTTP(t, s, get, 4<<10)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("held GET %d: %v %v", i, resp, err)
		}
	}
	for i := range 3 {
		_, br := rawHTTP(t, s, get, 4<<10)
		refused(t, fmt.Sprintf("GET %d past the held ones", i), br)
	}
	if b := buffered(); b > budget || b < 4*msgSize {
		t.Fatalf("buffered %d bytes with two held GETs: want about %d, at most the budget %d", b, 4*msgSize, budget)
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
