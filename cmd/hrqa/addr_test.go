package main

import (
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/haraqa/haraqa/client"
)

// TestAddrSource: a refused connection says where the address came from;
// an address given as a URL is refused with the HOST:PORT to use.
func TestAddrSource(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	fails(t, addr, "", "cannot connect to "+addr+": connect: connection refused (the address from $HARAQA_ADDR)", "ping")
	fails(t, "", "", "connection refused (the address from -addr)", "ping", "-addr", addr)
	fails(t, "", "", "connection refused (the address from -addr)", "-addr", addr, "topics", "list")
	fails(t, "http://"+addr, "", `$HARAQA_ADDR "http://`+addr+`" is a URL: hrqa takes HOST:PORT of the server's binary protocol port, without a scheme: use `+addr, "ping")
	fails(t, "", "", `-addr "http://`+addr+`/,`+addr+`" is a URL`, "ping", "-addr", "http://"+addr+"/,"+addr)
}

// TestAddrDefaultHint: with no address given, a refused connection says
// it was the default and how to start a server or give another.
func TestAddrDefaultHint(t *testing.T) {
	e := &env{addr: defaultAddr}
	refused := fmt.Errorf("%w: %w", client.ErrConnection, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")})
	want := " (the default address (no -addr or $HARAQA_ADDR given): is a server running there? make run starts one; else give its address with -addr or $HARAQA_ADDR)"
	if h := e.addrHint(refused); h != want {
		t.Fatalf("hint %q, want %q", h, want)
	}
	if h := e.addrHint(client.ErrTopicNotFound); h != "" {
		t.Fatalf("hint for another error: %q", h)
	}
}
