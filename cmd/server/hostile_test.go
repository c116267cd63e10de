package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
)

// nofileWrapper writes a script that runs bin under a descriptor limit of
// n: the limit applies to the server's process only.
func nofileWrapper(t *testing.T, bin string, n int) string {
	t.Helper()
	wrapper := filepath.Join(t.TempDir(), "haraqa-nofile")
	script := "#!/bin/sh\nulimit -n " + strconv.Itoa(n) + " || exit 99\nexec '" + bin + "' \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper
}

// httpAddr is the HTTP address of the server's "serving" line.
func (s *process) httpAddr() string {
	s.t.Helper()
	m := regexp.MustCompile(`msg=serving .*http=(\S+)`).FindStringSubmatch(s.output())
	if m == nil {
		s.t.Fatalf("no HTTP address in the output:\n%s", s.output())
	}
	return m[1]
}

// keepAlive opens an HTTP connection, sends one keep-alive GET /healthz
// and returns the connection, still open, with the answer's status; 0 and
// the error when no answer came.
func keepAlive(addr string) (net.Conn, int, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, 0, err
	}
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: haraqa\r\n\r\n"); err != nil {
		return c, 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return c, 0, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable && !strings.Contains(string(body), "-max-http-conns") {
		return c, resp.StatusCode, errors.New("503 without the limit's name: " + string(body))
	}
	return c, resp.StatusCode, nil
}

// TestHTTPConns runs the server under a descriptor limit of
// 256 with the default limits and holds 240 HTTP keep-alive connections,
// as the review did: the HTTP port answers those past -max-http-conns (an
// eighth of the limit less 64: 24) with a 503 naming it, and the binary
// port still serves a new connection. Before the HTTP port had a limit,
// 237 keep-alives took every descriptor and the binary port's accept
// failed with EMFILE.
func TestHTTPConns(t *testing.T) {
	bin := buildServer(t, t.TempDir())
	srv := startServer(t, nofileWrapper(t, bin, 256), "-tcp", "0", "-listen", "127.0.0.1", "-ballast", "0", t.TempDir())
	haddr := srv.httpAddr()
	const held = 240
	ok, refused := 0, 0
	for range held {
		c, code, err := keepAlive(haddr)
		if c != nil {
			defer c.Close()
		}
		switch {
		case err != nil:
			t.Fatalf("HTTP connection %d: %v (%d served, %d refused)\n%s", ok+refused, err, ok, refused, srv.output())
		case code == http.StatusOK:
			ok++
		case code == http.StatusServiceUnavailable:
			refused++
		default:
			t.Fatalf("HTTP status %d", code)
		}
	}
	if want := (256 - 64) / 8; ok != want {
		t.Errorf("%d keep-alives served, want the default -max-http-conns, %d", ok, want)
	}
	if err := ping(srv.addr); err != nil {
		t.Fatalf("binary port with %d HTTP connections held: %v\n%s", held, err, srv.output())
	}
	if strings.Contains(srv.output(), "out of file descriptors") {
		t.Fatalf("descriptors exhausted:\n%s", srv.output())
	}
}

// TestTLSDescriptors runs the server with TLS under a
// descriptor limit of 256 and the default -max-conns, and opens 100 TLS
// connections, as the review did: each holds 3 descriptors (its TCP
// socket and a socket pair), so the server admits what its budget holds
// (72 descriptors: 24 connections) and refuses the rest with a frame
// naming -max-conns; none fails for want of descriptors. Before, the
// default counted one descriptor a connection and the 77th failed with
// "socketpair: too many open files".
func TestTLSDescriptors(t *testing.T) {
	bin := buildServer(t, t.TempDir())
	ca := brokertest.NewCA(t, "test-ca")
	certFile, keyFile := ca.Issue(t, "srv", time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "127.0.0.1").Write(t, t.TempDir(), "srv")
	// -max-conns-per-addr 0: every connection comes from 127.0.0.1, and one
	// address would get only half of -max-conns (TestPerAddrCap).
	srv := startServer(t, nofileWrapper(t, bin, 256), "-tcp", "0", "-listen", "127.0.0.1", "-ballast", "0",
		"-max-conns-per-addr", "0", "-tls-cert", certFile, "-tls-key", keyFile, t.TempDir())
	served, refused := 0, 0
	for i := range 100 {
		nc, err := net.DialTimeout("tcp", srv.addr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		rec := &recordingConn{Conn: nc}
		tc := tls.Client(rec, &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1"})
		var rhe tls.RecordHeaderError
		err = tc.Handshake()
		if errors.As(err, &rhe) {
			// Refused before the handshake, in the binary protocol.
			_, _ = io.ReadAll(rec)
			h, payload, perr := protocol.ParseResponseHeader(rec.got)
			msg, _ := protocol.ParseErrorResponse(payload)
			if perr != nil || h.Code != protocol.CodeLimitReached || !strings.Contains(string(msg), "-max-conns") {
				t.Fatalf("connection %d refused with %+v %q %v", i, h, msg, perr)
			}
			refused++
			continue
		}
		if err != nil {
			t.Fatalf("connection %d: handshake: %v (%d served)\n%s", i, err, served, srv.output())
		}
		if _, err := tc.Write(protocol.AppendPingRequest(nil, 1)); err != nil {
			t.Fatal(err)
		}
		h, _, err := readResponse(tc)
		if err != nil || h.Code != protocol.CodeOK {
			t.Fatalf("connection %d: ping: %+v %v (%d served)\n%s", i, h, err, served, srv.output())
		}
		served++
	}
	if want := (256 - 64) * 3 / 8 / 3; served != want || refused != 100-want {
		t.Errorf("%d TLS connections served, %d refused; want %d and %d", served, refused, want, 100-want)
	}
	if out := srv.output(); strings.Contains(out, "too many open files") {
		t.Fatalf("descriptors exhausted:\n%s", out)
	}
}

// recordingConn keeps what was read from it.
type recordingConn struct {
	net.Conn
	got []byte
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.got = append(c.got, p[:n]...)
	return n, err
}
