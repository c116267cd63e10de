package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// produceRaw sends one produce request of batch on a new connection and
// returns the base offset of the answer.
func produceRaw(t *testing.T, addr, topic string, batch []byte) int64 {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := c.Write(protocol.AppendProduceRequest(nil, 1, topic, protocol.ProduceCreateTopic, batch)); err != nil {
		t.Fatal(err)
	}
	h, p, err := readResponse(c)
	if err != nil {
		t.Fatal(err)
	}
	if h.Code != protocol.CodeOK {
		msg, _ := protocol.ParseErrorResponse(p)
		t.Fatalf("produce: %v %s", h.Code, msg)
	}
	r, err := protocol.ParseProduceResponse(p)
	if err != nil {
		t.Fatal(err)
	}
	return r.BaseOffset
}

// TestIdempotentAcrossKill kills the server with SIGKILL while an
// idempotent Producer runs, restarts it on the same volumes and port, and
// checks that every message was stored exactly once, in Send order: the
// batches whose answers the kill lost are sent again and answered from
// the producers' table the restarted server rebuilt from its log. A batch
// stored before the kill and sent again by hand after it gets its first
// offset back.
func TestIdempotentAcrossKill(t *testing.T) {
	bin := buildServer(t, t.TempDir())
	vols := []string{t.TempDir(), t.TempDir()}
	port := strconv.Itoa(freePort(t))
	args := append([]string{"-tcp", port, "-listen", "127.0.0.1", "-entries", "100"}, vols...)
	srv := startServer(t, bin, args...)

	// A batch stored and acknowledged before the kill.
	meta := protocol.BatchMeta{ProducerID: 0xfeed, Sequence: 0}
	raw := protocol.AppendBatchMeta(nil, meta, []byte("before"))
	first := produceRaw(t, srv.addr, "byhand", append([]byte(nil), raw...))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, srv.addr, client.WithRetries(100, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := c.NewProducer("kill", client.WithBatchSize(20), client.WithLinger(time.Millisecond))
	var futures []*client.Future
	var stop atomic.Bool
	sent := make(chan error, 1)
	go func() {
		for i := 0; !stop.Load(); i++ {
			f, err := p.Send(ctx, []byte(fmt.Sprint("m", i)))
			if err != nil {
				sent <- err
				return
			}
			futures = append(futures, f)
			if i%50 == 0 {
				time.Sleep(100 * time.Microsecond) // let the batches go
			}
		}
		sent <- nil
	}()
	for c.Stats().MessagesAcked < 2000 {
		if ctx.Err() != nil {
			t.Fatal("no acknowledgements before the kill")
		}
		time.Sleep(time.Millisecond)
	}
	if err := srv.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-srv.done
	srv = startServer(t, bin, args...)
	acked := c.Stats().MessagesAcked
	for c.Stats().MessagesAcked < acked+2000 {
		if ctx.Err() != nil {
			t.Fatalf("no acknowledgements after the restart: %+v", c.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for i, f := range futures {
		off, err := f.Wait(ctx)
		if err != nil || off != int64(i) {
			t.Fatalf("message %d: offset %d, %v", i, off, err)
		}
	}
	got := readTopic(t, srv.addr, "kill")
	if len(got) != len(futures) {
		t.Fatalf("%d messages stored, %d sent", len(got), len(futures))
	}
	for i := range futures {
		if v := got[int64(i)]; v != fmt.Sprint("m", i) {
			t.Fatalf("offset %d holds %q", i, v)
		}
	}
	t.Logf("%d messages, each stored once across the kill; %d reconnects", len(futures), c.Stats().Reconnects)

	if again := produceRaw(t, srv.addr, "byhand", raw); again != first {
		t.Fatalf("the batch sent again after the kill got offset %d, first %d", again, first)
	}
	if got := readTopic(t, srv.addr, "byhand"); len(got) != 1 {
		t.Fatalf("byhand holds %d messages, want 1", len(got))
	}
}
