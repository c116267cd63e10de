package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

const ioTimeout = 10 * time.Second

// TestFlags runs the command in-process for the cases that stop before
// serving: the exit code and message of a usage error, of -h, and of a
// configuration that Validate refuses. Flag parsing itself is tested in
// broker/server (ParseFlags).
func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage: haraqa"},
		{[]string{"-tcp", "1"}, 2, "at least one volume"},
		{[]string{"-bogus", t.TempDir()}, 2, "-bogus"},
		{[]string{"-tcp", "70000", t.TempDir()}, 2, "65535"},
		{[]string{"-fsync", "sometimes", "-ballast", "0", "-tcp", "0", "-http", "0", t.TempDir()}, 2, "sometimes"},
		{[]string{"-entries", "0", "-ballast", "0", "-tcp", "0", "-http", "0", t.TempDir()}, 2, "entries"},
		{[]string{"-h"}, 0, "usage: haraqa"},
		{[]string{"-tls-cert", "srv.pem", "-ballast", "0", "-tcp", "0", "-http", "0", t.TempDir()}, 2, "key file"},
		{[]string{"-tls-client-ca", "ca.pem", "-ballast", "0", "-tcp", "0", "-http", "0", t.TempDir()}, 2, "client CA needs TLS"},
	} {
		var out bytes.Buffer
		if code := run(tc.args, &out); code != tc.code || !strings.Contains(out.String(), tc.want) {
			t.Errorf("haraqa %q: exit %d, want %d; output %q should hold %q", tc.args, code, tc.code, out.String(), tc.want)
		}
	}
}

// goCommand returns the go command to build the server with; the test
// is skipped without one.
func goCommand(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			t.Skip("no go command to build the server with")
		}
	}
	return goBin
}

// buildServer builds the haraqa binary into dir.
func buildServer(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "haraqa")
	cmd := exec.Command(goCommand(t), "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// process is a haraqa process.
type process struct {
	t    *testing.T
	cmd  *exec.Cmd
	addr string

	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan struct{} // closed when the process has exited
	err    error         // Wait's result, once done
}

func (s *process) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

// startProcess starts bin with args; it does not wait for it to serve.
func startProcess(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	s := newProcess(t, bin, args...)
	s.start()
	return s
}

// newProcess prepares bin with args, for start.
func newProcess(t *testing.T, bin string, args ...string) *process {
	// -http 0: every test server gets its own free HTTP port.
	args = append([]string{"-http", "0"}, args...)
	return &process{t: t, cmd: exec.Command(bin, args...), done: make(chan struct{})}
}

// start starts the process; it does not wait for it to serve.
func (s *process) start() {
	t := s.t
	t.Helper()
	pr, pw := io.Pipe()
	s.cmd.Stderr = pw
	ready := make(chan string, 1)
	drained := make(chan struct{}) // every line read: done waits for it, so output has all
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.stderr.WriteString(line + "\n")
			s.mu.Unlock()
			if i := strings.Index(line, "msg=serving tcp="); i >= 0 {
				select {
				case ready <- strings.Fields(line[i+len("msg=serving tcp="):])[0]:
				default:
				}
			}
		}
	}()
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.err = s.cmd.Wait()
		pw.Close()
		<-drained
		close(s.done)
	}()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			s.cmd.Process.Kill()
			<-s.done
		}
	})
	go func() {
		select {
		case a := <-ready:
			s.mu.Lock()
			s.addr = a
			s.mu.Unlock()
		case <-s.done:
		}
	}()
}

// startServer starts bin and waits until it serves.
func startServer(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	s := startProcess(t, bin, args...)
	s.waitServing()
	return s
}

// waitServing waits until the process serves.
func (s *process) waitServing() {
	t := s.t
	t.Helper()
	deadline := time.Now().Add(ioTimeout)
	for {
		s.mu.Lock()
		addr := s.addr
		s.mu.Unlock()
		if addr != "" {
			return
		}
		select {
		case <-s.done:
			t.Fatalf("server exited before serving: %v\n%s", s.err, s.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not serving after %s:\n%s", ioTimeout, s.output())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// exitCode waits for the process to exit and returns its exit code.
func (s *process) exitCode() int {
	s.t.Helper()
	select {
	case <-s.done:
	case <-time.After(2 * ioTimeout):
		s.t.Fatalf("server still running after %s:\n%s", 2*ioTimeout, s.output())
	}
	var ee *exec.ExitError
	switch {
	case s.err == nil:
		return 0
	case errors.As(s.err, &ee):
		return ee.ExitCode()
	}
	s.t.Fatal(s.err)
	return -1
}

// readResponse reads one response frame.
func readResponse(r io.Reader) (protocol.ResponseHeader, []byte, error) {
	var l [protocol.FrameLengthSize]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return protocol.ResponseHeader{}, nil, err
	}
	size, err := protocol.PeekFrame(l[:], 0)
	if err != nil && !errors.Is(err, protocol.ErrShortFrame) {
		return protocol.ResponseHeader{}, nil, err
	}
	f := make([]byte, size)
	copy(f, l[:])
	if _, err := io.ReadFull(r, f[len(l):]); err != nil {
		return protocol.ResponseHeader{}, nil, err
	}
	return protocol.ParseResponseHeader(f)
}

// ack is a produce the server acknowledged: msgs are at base offset on.
type ack struct {
	topic string
	base  int64
	msgs  []string
}

// producer sends batches of produces to topic, window requests at a time,
// until the connection fails, and records what was acknowledged. It counts
// acknowledged messages in total.
func producer(addr, topic string, id, window int, total *atomic.Int64) (acks []ack, shutdownCodes int, err error) {
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		return nil, 0, err
	}
	defer c.Close()
	seq := 0
	for {
		c.SetDeadline(time.Now().Add(ioTimeout))
		var req []byte
		sent := make(map[uint32][]string, window)
		for range window {
			msgs := make([]string, 1+seq%3)
			for j := range msgs {
				msgs[j] = fmt.Sprintf("p%d-%d-%d", id, seq, j)
			}
			m := make([][]byte, len(msgs))
			for j := range msgs {
				m[j] = []byte(msgs[j])
			}
			seq++
			sent[uint32(seq)] = msgs
			req = protocol.AppendProduceRequest(req, uint32(seq), topic, protocol.ProduceCreateTopic, protocol.AppendBatch(nil, m...))
		}
		if _, err := c.Write(req); err != nil {
			return acks, shutdownCodes, nil // the server went away
		}
		for range window {
			h, p, err := readResponse(c)
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					return acks, shutdownCodes, fmt.Errorf("producer %d: %w", id, err)
				}
				return acks, shutdownCodes, nil // closed by the server
			}
			msgs, ok := sent[h.CorrID]
			if !ok {
				return acks, shutdownCodes, fmt.Errorf("producer %d: response to unknown corr id %d", id, h.CorrID)
			}
			switch h.Code {
			case protocol.CodeOK:
				pr, err := protocol.ParseProduceResponse(p)
				if err != nil || int(pr.Count) != len(msgs) {
					return acks, shutdownCodes, fmt.Errorf("producer %d: produce response %+v %v", id, pr, err)
				}
				acks = append(acks, ack{topic, pr.BaseOffset, msgs})
				total.Add(int64(len(msgs)))
			case protocol.CodeShuttingDown:
				shutdownCodes++
			default:
				msg, _ := protocol.ParseErrorResponse(p)
				return acks, shutdownCodes, fmt.Errorf("producer %d: code %v: %s", id, h.Code, msg)
			}
		}
	}
}

// readTopic consumes every message of topic from the server at addr.
func readTopic(t *testing.T, addr, topic string) map[int64]string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := make(map[int64]string)
	for off, id := int64(0), uint32(1); ; id++ {
		c.SetDeadline(time.Now().Add(ioTimeout))
		if _, err := c.Write(protocol.AppendConsumeRequest(nil, id, topic, off, 0, 0, 0)); err != nil {
			t.Fatal(err)
		}
		h, p, err := readResponse(c)
		if err != nil {
			t.Fatal(err)
		}
		if h.Code != protocol.CodeOK {
			msg, _ := protocol.ParseErrorResponse(p)
			t.Fatalf("consume %s at %d: %v %s", topic, off, h.Code, msg)
		}
		cr, err := protocol.ParseConsumeResponse(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(cr.Batches) == 0 {
			return got
		}
		for b := cr.Batches; len(b) > 0; {
			bt, n, err := protocol.ParseBatch(b)
			if err != nil {
				t.Fatal(err)
			}
			if err := bt.Validate(); err != nil {
				t.Fatalf("batch at %d: %v", bt.BaseOffset, err)
			}
			protocol.Messages(bt.Body, bt.Count, bt.BaseOffset, func(o int64, m []byte) error {
				got[o] = string(m)
				off = max(off, o+1)
				return nil
			})
			b = b[n:]
		}
	}
}

// TestServerBinary builds the haraqa binary and runs it as an operator
// would.
func TestServerBinary(t *testing.T) {
	bin := buildServer(t, t.TempDir())

	// SIGTERM while producers run: exit 0, and after a restart every
	// acknowledged message reads back.
	for _, fsync := range []string{"never", "always"} {
		t.Run("sigterm fsync="+fsync, func(t *testing.T) {
			vols := []string{t.TempDir(), t.TempDir()}
			args := append([]string{"-tcp", strconv.Itoa(freePort(t)), "-listen", "127.0.0.1", "-entries", "100", "-fsync", fsync}, vols...)
			srv := startServer(t, bin, args...)

			const producers = 6
			var total atomic.Int64
			type result struct {
				acks     []ack
				shutdown int
				err      error
			}
			results := make(chan result, producers)
			for i := range producers {
				go func() {
					acks, sd, err := producer(srv.addr, fmt.Sprintf("sig-%d", i%2), i, 4, &total)
					results <- result{acks, sd, err}
				}()
			}
			deadline := time.Now().Add(ioTimeout)
			for total.Load() < 600 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if total.Load() == 0 {
				t.Fatalf("nothing acknowledged:\n%s", srv.output())
			}
			if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			var acks []ack
			shutdownCodes := 0
			for range producers {
				r := <-results
				if r.err != nil {
					t.Error(r.err)
				}
				acks = append(acks, r.acks...)
				shutdownCodes += r.shutdown
			}
			if code := srv.exitCode(); code != 0 {
				t.Fatalf("exit %d after SIGTERM, want 0:\n%s", code, srv.output())
			}
			if !strings.Contains(srv.output(), "msg=stopped") {
				t.Errorf("no clean stop in the log:\n%s", srv.output())
			}
			t.Logf("%d produces (%d messages) acknowledged, %d refused while shutting down", len(acks), total.Load(), shutdownCodes)

			srv = startServer(t, bin, args...)
			stored := map[string]map[int64]string{}
			for _, topic := range []string{"sig-0", "sig-1"} {
				stored[topic] = readTopic(t, srv.addr, topic)
			}
			lost := 0
			for _, a := range acks {
				for j, m := range a.msgs {
					if got, ok := stored[a.topic][a.base+int64(j)]; !ok || got != m {
						if lost++; lost <= 5 {
							t.Errorf("acknowledged %q at %s/%d: read back %q (present %v)", m, a.topic, a.base+int64(j), got, ok)
						}
					}
				}
			}
			if lost > 0 {
				t.Fatalf("%d acknowledged messages lost", lost)
			}
			srv.cmd.Process.Signal(syscall.SIGTERM)
			if code := srv.exitCode(); code != 0 {
				t.Fatalf("second run: exit %d:\n%s", code, srv.output())
			}
		})
	}

	t.Run("no volumes", func(t *testing.T) {
		srv := startProcess(t, bin, "-tcp", "0")
		if code := srv.exitCode(); code != 2 || !strings.Contains(srv.output(), "usage") {
			t.Fatalf("exit %d, want 2 with usage:\n%s", code, srv.output())
		}
	})

	t.Run("locked volumes", func(t *testing.T) {
		vols := []string{t.TempDir(), t.TempDir()}
		first := startServer(t, bin, append([]string{"-tcp", "0", "-listen", "127.0.0.1"}, vols...)...)
		second := startProcess(t, bin, append([]string{"-tcp", "0", "-listen", "127.0.0.1"}, vols...)...)
		code := second.exitCode()
		out := second.output()
		if code != 1 || !strings.Contains(out, "lock") {
			t.Fatalf("second server on the same volumes: exit %d, want 1 and a message about the lock:\n%s", code, out)
		}
		if strings.Count(strings.TrimSpace(lastLine(out)), "\n") != 0 || !strings.HasPrefix(lastLine(out), "haraqa:") {
			t.Errorf("error is not one clear line: %q", lastLine(out))
		}
		t.Logf("second server: %s", lastLine(out))
		first.cmd.Process.Signal(syscall.SIGTERM)
		if code := first.exitCode(); code != 0 {
			t.Fatalf("first server: exit %d:\n%s", code, first.output())
		}
	})

	t.Run("port in use", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		srv := startProcess(t, bin, "-tcp", port, "-listen", "127.0.0.1", t.TempDir())
		code := srv.exitCode()
		line := lastLine(srv.output())
		if code != 1 || !strings.Contains(line, "in use") || !strings.Contains(line, port) {
			t.Fatalf("port in use: exit %d, want 1 and a message naming the port:\n%s", code, srv.output())
		}
		t.Logf("port in use: %s", line)
	})
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestHTTPPort checks the binary serves the REST API, /healthz, /readyz,
// /metrics, the docs and pprof on -http as the flags say.
func TestHTTPPort(t *testing.T) {
	bin := buildServer(t, t.TempDir())
	for _, c := range []struct {
		flags []string
		want  map[string]int
	}{
		{nil, map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200, "/topics": 200,
			"/docs/redocs": 200, "/docs/swagger": 200, "/debug/pprof/": 404}},
		{[]string{"-prometheus=false", "-docs=false", "-pprof"}, map[string]int{"/healthz": 200, "/readyz": 200,
			"/metrics": 404, "/topics": 200, "/docs/redocs": 404, "/docs/swagger": 404, "/debug/pprof/": 200}},
	} {
		t.Run(strings.Join(c.flags, " "), func(t *testing.T) {
			args := append([]string{"-tcp", "0", "-listen", "127.0.0.1"}, c.flags...)
			srv := startServer(t, bin, append(args, t.TempDir())...)
			m := regexp.MustCompile(`http=(\S+)`).FindStringSubmatch(srv.output())
			if m == nil {
				t.Fatalf("no http address logged:\n%s", srv.output())
			}
			base := "http://" + m[1]
			req, _ := http.NewRequest("PUT", base+"/topics/from-http", nil)
			if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 201 {
				t.Fatalf("PUT /topics/from-http: %v %v", resp, err)
			}
			for path, want := range c.want {
				resp, err := http.Get(base + path)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Fatalf("GET %s: %d, want %d", path, resp.StatusCode, want)
				}
				if path == "/metrics" && want == 200 && !strings.Contains(string(body), `haraqa_produced_messages_total{topic="from-http"} 0`) {
					t.Fatalf("/metrics lacks haraqa metrics")
				}
				if path == "/topics" && string(body) != "from-http" { // CSV, as the original server
					t.Fatalf("GET /topics: %q", body)
				}
			}
			if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := srv.exitCode(); code != 0 {
				t.Fatalf("exit %d", code)
			}
		})
	}
}
