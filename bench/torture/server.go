package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/haraqa/haraqa/client"
)

// startTimeout bounds how long a server may take to open its volumes and
// serve; recovery reads every byte, so it is generous.
const startTimeout = 60 * time.Second

// buildServer compiles ./cmd/server into dir and returns the binary's path.
func buildServer(dir string) (string, error) {
	bin := filepath.Join(dir, "haraqa")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/server")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/server: %w\n%s", err, out)
	}
	return bin, nil
}

// hasFlag reports whether the server's usage lists -name.
func hasFlag(bin, name string) bool {
	out, _ := exec.Command(bin, "-h").CombinedOutput()
	return strings.Contains(string(out), "-"+name+" ")
}

// serverSpec says how to start a server.
type serverSpec struct {
	bin     string
	volumes []string
	args    []string // extra flags
	nofile  int      // descriptor limit of the process; 0: inherited
	tcp     int      // binary port; 0: chosen by the server
}

// server is a running haraqa process.
type server struct {
	cmd  *exec.Cmd
	addr string // binary protocol, host:port

	mu   sync.Mutex
	log  strings.Builder
	done chan struct{} // closed once the process has exited
	err  error         // Wait's result, once done
}

// start runs the server and waits until it serves. The ports are chosen
// by the server (-tcp 0, -http 0), unless spec.tcp is set, and the binary
// port's address is read from its "serving" log line.
func start(spec serverSpec) (*server, error) {
	args := append([]string{"-listen", "127.0.0.1", "-tcp", strconv.Itoa(spec.tcp), "-http", "0"}, spec.args...)
	args = append(args, spec.volumes...)
	name := spec.bin
	if spec.nofile > 0 {
		// The shell sets the limit and execs, so the process keeps its pid.
		sh := "ulimit -n " + strconv.Itoa(spec.nofile) + " && exec \"$0\" \"$@\""
		args = append([]string{"-c", sh, spec.bin}, args...)
		name = "/bin/sh"
	}
	name, args = schedOther(name, args)
	s := &server{cmd: exec.Command(name, args...), done: make(chan struct{})}
	pr, pw := io.Pipe()
	s.cmd.Stderr = pw
	s.cmd.Stdout = pw
	ready := make(chan string, 1)
	go s.scan(pr, ready)
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	go func() {
		s.err = s.cmd.Wait()
		pw.Close()
		close(s.done)
	}()
	select {
	case s.addr = <-ready:
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("server exited before serving: %v\n%s", s.err, tail(s.output()))
	case <-time.After(startTimeout):
		s.kill()
		return nil, fmt.Errorf("server not serving after %s\n%s", startTimeout, tail(s.output()))
	}
}

// scan keeps the server's log and sends the binary port's address once.
func (s *server) scan(r io.Reader, ready chan<- string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		s.mu.Lock()
		if s.log.Len() < 4<<20 {
			s.log.WriteString(line + "\n")
		}
		s.mu.Unlock()
		if i := strings.Index(line, "msg=serving tcp="); i >= 0 {
			select {
			case ready <- strings.Fields(line[i+len("msg=serving tcp="):])[0]:
			default:
			}
		}
	}
	io.Copy(io.Discard, r)
}

func (s *server) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

func (s *server) pid() int { return s.cmd.Process.Pid }

// alive reports whether the process is still running.
func (s *server) alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// kill stops the process with SIGKILL and waits for it.
func (s *server) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// stop sends SIGTERM and waits; it fails if the server does not exit 0.
func (s *server) stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.kill()
		return errors.New("server still running 30s after SIGTERM")
	}
	if s.err != nil {
		return fmt.Errorf("server exit after SIGTERM: %w", s.err)
	}
	return nil
}

// dial connects a client with short timeouts, so a dead server is noticed.
func (s *server) dial(ctx context.Context, opts ...client.Option) (*client.Client, error) {
	opts = append([]client.Option{client.WithDialTimeout(2 * time.Second),
		client.WithRequestTimeout(10 * time.Second), client.WithRetries(0, 0)}, opts...)
	return client.Dial(ctx, s.addr, opts...)
}

// repairs sums the "repairs=N" of the server's "volumes open" log lines.
func (s *server) repairs() int {
	n := 0
	for _, line := range strings.Split(s.output(), "\n") {
		if !strings.Contains(line, "msg=\"volumes open\"") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "repairs="); ok {
				k, _ := strconv.Atoi(v)
				n += k
			}
		}
	}
	return n
}

// freePort returns a loopback port nothing listens on now, for a server
// that must come back on the same address after a kill.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// rss is the process's resident set size in bytes, from /proc.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

// fds is the number of descriptors the process holds.
func fds(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}
