package main

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
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
	"syscall"
	"testing"
	"time"
)

// makeBuildTimeout bounds the first `make run`, which builds the server:
// the other tests of this package have built it already, so the build
// cache is warm and it takes seconds, but a cold cache on a loaded machine
// takes longer.
const makeBuildTimeout = 2 * time.Minute

// TestMakeRun runs `make run` as the README tells a newcomer to, with free
// ports, a temporary volume and a temporary BIN. Both listeners must be on
// loopback only, on the same address; make's one child must be the server
// built into BIN (exec'd: not go run, not a shell waiting on it), so that
// SIGTERM to make, the PID a user has, stops the server and frees both
// ports. A second `make run` on the same ports must then serve, and SIGTERM
// to the server's own PID must end make too.
func TestMakeRun(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads the listeners from /proc: Linux only")
	}
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make command: `make run` cannot be run (Debian: apt-get install -y make)")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "Makefile")); err != nil {
		t.Fatal(err)
	}
	bin, vol := t.TempDir(), t.TempDir()
	tcpPort, httpPort := freePort(t), freePort(t)
	vars := []string{"GO=" + goCommand(t), "BIN=" + bin, "VOLUME=" + vol,
		"TCP_PORT=" + strconv.Itoa(tcpPort), "HTTP_PORT=" + strconv.Itoa(httpPort)}
	wantExe, err := filepath.EvalSymlinks(bin)
	if err != nil {
		t.Fatal(err)
	}
	wantExe = filepath.Join(wantExe, "haraqa")

	for round, stop := range []string{"make", "server"} {
		timeout := ioTimeout
		if round == 0 {
			timeout = makeBuildTimeout
		}
		m := startMake(t, makeBin, root, vars)
		m.waitServing(timeout)
		m.wantSays(bin, vol, tcpPort, httpPort)

		server := m.onlyChild()
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", server)); err != nil || exe != wantExe {
			t.Fatalf("round %d: make's child %d runs %q (%v), want %s: the run target must exec the built binary\n%s",
				round+1, server, exe, err, wantExe, m.output())
		}
		ls := listeners(t, server)
		if len(ls) != 2 {
			t.Fatalf("round %d: the server listens on %v, want two listeners", round+1, ls)
		}
		ports := map[int]bool{}
		for _, a := range ls {
			if !a.IP.IsLoopback() {
				t.Errorf("round %d: the server listens on %v: not loopback only", round+1, a)
			}
			ports[a.Port] = true
		}
		if !ports[tcpPort] || !ports[httpPort] {
			t.Errorf("round %d: the server listens on %v, want ports %d and %d", round+1, ls, tcpPort, httpPort)
		}
		if !ls[0].IP.Equal(ls[1].IP) {
			t.Errorf("round %d: the ports listen on different addresses: %v", round+1, ls)
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", httpPort))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("round %d: GET /healthz: %s", round+1, resp.Status)
		}
		if t.Failed() {
			return
		}

		pid := m.cmd.Process.Pid // the PID a user who typed make run has
		if stop == "server" {
			pid = server
		}
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		m.waitExit(ioTimeout)
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", server)); err == nil {
			t.Fatalf("round %d: SIGTERM to the %s: make exited, the server %d is still there", round+1, stop, server)
		}
		for _, p := range []int{tcpPort, httpPort} {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				t.Fatalf("round %d: after SIGTERM to the %s, port %d is still taken: %v", round+1, stop, p, err)
			}
			l.Close()
		}
	}
}

// makeRun is a running `make run`.
type makeRun struct {
	t    *testing.T
	cmd  *exec.Cmd
	done chan struct{} // closed once make has exited

	mu  sync.Mutex
	out bytes.Buffer // make's and the server's output
}

func (m *makeRun) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.out.Write(p)
}

func (m *makeRun) output() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.out.String()
}

// startMake starts make run in dir with the variables vars. At cleanup,
// every process left in its process group gets SIGKILL.
func startMake(t *testing.T, makeBin, dir string, vars []string) *makeRun {
	t.Helper()
	m := &makeRun{t: t, done: make(chan struct{})}
	m.cmd = exec.Command(makeBin, append([]string{"-s", "-C", dir, "run"}, vars...)...)
	m.cmd.Stdout, m.cmd.Stderr = m, m
	// Its own process group, so that cleanup can end whatever it started,
	// a server a broken run target leaves behind included.
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Such a server holds the output pipe: Wait must not wait for it.
	m.cmd.WaitDelay = time.Second
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		m.cmd.Wait()
		close(m.done)
	}()
	t.Cleanup(func() {
		syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		<-m.done
	})
	return m
}

// waitServing waits for the server's "serving" line.
func (m *makeRun) waitServing(timeout time.Duration) {
	m.t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(m.output(), "msg=serving") {
		select {
		case <-m.done:
			m.t.Fatalf("make run exited before serving: %v\n%s", m.cmd.ProcessState, m.output())
		default:
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("make run not serving after %s:\n%s", timeout, m.output())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wantSays checks that make run said, before the server's logs, what it
// builds, then on which ports and volume the server starts, and the
// HARAQA_ADDR hrqa needs for that port.
func (m *makeRun) wantSays(bin, vol string, tcpPort, httpPort int) {
	m.t.Helper()
	out := m.output()
	at := -1
	for _, w := range []string{
		"building " + bin + "/haraqa (the first build compiles every dependency",
		fmt.Sprintf("starting %s/haraqa on 127.0.0.1: binary protocol port %d, HTTP port %d", bin, tcpPort, httpPort),
		"volume " + vol,
		fmt.Sprintf("export HARAQA_ADDR=127.0.0.1:%d", tcpPort),
		"msg=serving",
	} {
		i := strings.Index(out, w)
		if i <= at {
			m.t.Fatalf("make run does not say %q after what it said before:\n%s", w, out)
		}
		at = i
	}
}

// waitExit waits for make to exit.
func (m *makeRun) waitExit(timeout time.Duration) {
	m.t.Helper()
	select {
	case <-m.done:
	case <-time.After(timeout):
		m.t.Fatalf("make run still running %s after SIGTERM:\n%s", timeout, m.output())
	}
}

// onlyChild returns the PID of make's one child process.
func (m *makeRun) onlyChild() int {
	m.t.Helper()
	c := children(m.cmd.Process.Pid)
	if len(c) != 1 {
		m.t.Fatalf("make has %d child processes %v, want one: the server itself", len(c), c)
	}
	return c[0]
}

// children returns the PIDs whose parent is pid, read from /proc.
func children(pid int) []int {
	dirs, _ := os.ReadDir("/proc")
	var c []int
	for _, d := range dirs {
		p, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			c = append(c, p)
		}
	}
	return c
}

// listeners returns the local addresses of the TCP sockets process pid
// listens on: the socket inodes among its descriptors, looked up in its
// /proc/PID/net/tcp and tcp6.
func listeners(t *testing.T, pid int) []*net.TCPAddr {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var ls []*net.TCPAddr
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] { // 0A: LISTEN
				continue
			}
			a, err := parseProcAddr(f[1])
			if err != nil {
				t.Fatalf("/proc/%d/net/%s: %q: %v", pid, table, line, err)
			}
			ls = append(ls, a)
		}
	}
	return ls
}

// parseProcAddr parses a local_address of /proc/net/tcp or tcp6: the IP
// as hex 32-bit words, each in host byte order, a colon and the port in
// hex.
func parseProcAddr(s string) (*net.TCPAddr, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return nil, fmt.Errorf("no port in %q", s)
	}
	ip, err := hex.DecodeString(h)
	if err != nil || (len(ip) != net.IPv4len && len(ip) != net.IPv6len) {
		return nil, fmt.Errorf("bad address %q", h)
	}
	for i := 0; i < len(ip); i += 4 {
		binary.BigEndian.PutUint32(ip[i:], binary.NativeEndian.Uint32(ip[i:]))
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return nil, fmt.Errorf("bad port %q", p)
	}
	return &net.TCPAddr{IP: net.IP(ip), Port: int(port)}, nil
}

// TestMakefileDocumented: what the README says of the Makefile holds. The
// first-build figure make build and make run print is the README's;
// make test's duration is given; gnet-update runs the update script with
// GNET_VERSION, is phony, and is in the README's table as it is called.
func TestMakefileDocumented(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	note := regexp.MustCompile(`(?m)^BUILD_NOTE := .*: (\d+) s from a fresh clone on a quiet 2-core machine`).FindSubmatch(mk)
	if note == nil {
		t.Fatal("the Makefile has no BUILD_NOTE giving the first build's seconds on 2 cores")
	}
	cold := regexp.MustCompile("`make build` from a fresh clone, with an empty build\\s+cache and the modules already downloaded, took (\\d+) s on a quiet 2-core machine").FindSubmatch(readme)
	if cold == nil || string(cold[1]) != string(note[1]) {
		t.Errorf("the README's cold make build figure %q is not the Makefile's BUILD_NOTE %q s", cold, note[1])
	}
	if !regexp.MustCompile("`make test` takes about (\\d+) minutes on a quiet 2-core machine").Match(readme) {
		t.Error("the README does not say how long `make test` takes")
	}
	if !regexp.MustCompile(`(?m)^\.PHONY:.* gnet-update( |$)`).Match(mk) {
		t.Error("gnet-update is not in the Makefile's .PHONY")
	}
	if !strings.Contains(string(readme), "| `make gnet-update GNET_VERSION=v2.9.x` |") {
		t.Error("the README's targets table has no `make gnet-update GNET_VERSION=v2.9.x`")
	}
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make command (Debian: apt-get install -y make)")
	}
	out, err := exec.Command(makeBin, "-s", "-n", "-C", "../..", "gnet-update", "GNET_VERSION=v2.9.99").CombinedOutput()
	if got, want := string(out), "bash broker/third_party/gnet/update.sh v2.9.99\n"; err != nil || got != want {
		t.Errorf("make -n gnet-update GNET_VERSION=v2.9.99: %q, %v; want %q", got, err, want)
	}
}
