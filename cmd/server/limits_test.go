package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// TestDescriptorExhaustion runs the server with a descriptor limit of 96
// and a connection limit above it, then opens more connections than it
// has descriptors for: accept fails with EMFILE, which is logged and
// retried. Once the connections close, the binary port serves again, and
// the server stops cleanly.
func TestDescriptorExhaustion(t *testing.T) {
	bin := buildServer(t, t.TempDir())
	wrapper := filepath.Join(t.TempDir(), "haraqa-nofile")
	script := "#!/bin/sh\nulimit -n 96 || exit 99\nexec '" + bin + "' \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, wrapper, "-tcp", strconv.Itoa(freePort(t)), "-listen", "127.0.0.1", "-max-conns", "1000", t.TempDir())

	var held []net.Conn
	for range 150 {
		if c, err := net.DialTimeout("tcp", srv.addr, time.Second); err == nil {
			held = append(held, c)
		}
	}
	deadline := time.Now().Add(ioTimeout)
	for !strings.Contains(srv.output(), "out of file descriptors") {
		if time.Now().After(deadline) {
			t.Fatalf("no accept failure logged with 150 connections and 96 descriptors:\n%s", srv.output())
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, c := range held {
		c.Close()
	}
	// The descriptors come back as the server sees the connections close.
	for err := ping(srv.addr); err != nil; err = ping(srv.addr) {
		if time.Now().After(deadline) {
			t.Fatalf("the binary port does not serve after descriptor exhaustion: %v\n%s", err, srv.output())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := srv.exitCode(); code != 0 {
		t.Fatalf("exit code %d after descriptor exhaustion, want 0:\n%s", code, srv.output())
	}
}

// ping sends one ping on a new connection and reads its answer.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write(protocol.AppendPingRequest(nil, 1)); err != nil {
		return err
	}
	h, _, err := readResponse(c)
	if err == nil && h.Code != protocol.CodeOK {
		err = &protocol.Error{Code: h.Code}
	}
	return err
}

// TestManyTopicsWithinDescriptorLimit runs the server on two volumes with
// a descriptor limit of 128 (a file budget of 32), writes to 300 topics,
// restarts it under the same limit and reads every topic back. Before the
// file budget, every topic kept its active segment open on each volume:
// the writes failed with EMFILE, turning the topics read-only, and the
// restart failed to open the topics.
func TestManyTopicsWithinDescriptorLimit(t *testing.T) {
	bin := buildServer(t, t.TempDir())
	wrapper := filepath.Join(t.TempDir(), "haraqa-nofile")
	script := "#!/bin/sh\nulimit -n 128 || exit 99\nexec '" + bin + "' \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	vols := []string{t.TempDir(), t.TempDir()}
	const topics = 300
	run := func(write bool) {
		args := append([]string{"-tcp", strconv.Itoa(freePort(t)), "-listen", "127.0.0.1", "-http", "0", "-entries", "2"}, vols...)
		srv := startServer(t, wrapper, args...)
		ctx, cancel := context.WithTimeout(context.Background(), 4*ioTimeout)
		defer cancel()
		c, err := client.Dial(ctx, srv.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for i := range topics {
			name := fmt.Sprintf("topic-%03d", i)
			if write {
				if err := c.CreateTopic(ctx, name); err != nil {
					t.Fatalf("create %s: %v\n%s", name, err, srv.output())
				}
				for m := range 3 { // rolls a segment: -entries 2
					if _, err := c.Produce(ctx, name, fmt.Appendf(nil, "%s/%d", name, m)); err != nil {
						t.Fatalf("produce to %s: %v\n%s", name, err, srv.output())
					}
				}
			}
			msgs, err := c.Consume(ctx, name, 0, 10)
			if err != nil || len(msgs) != 3 || string(msgs[2].Value) != name+"/2" {
				t.Fatalf("consume %s: %d messages, %v\n%s", name, len(msgs), err, srv.output())
			}
		}
		if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := srv.exitCode(); code != 0 {
			t.Fatalf("exit code %d, want 0:\n%s", code, srv.output())
		}
	}
	run(true)
	run(false) // the restart opens 300 topics under the same limit
}
