package deploy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ioTimeout bounds every wait on a server or a container.
const ioTimeout = 20 * time.Second

// server is what the manifests must agree with: the haraqa binary built
// from this checkout and the flags its -h lists.
type server struct {
	bin   string
	flags map[string]serverFlag
}

// serverFlag is one flag of the server's -h.
type serverFlag struct {
	bool bool   // takes no value (-flag or -flag=false)
	def  string // the default -h prints, "" when it prints none
}

var (
	serverOnce  sync.Once
	serverBuilt server
	serverErr   error
)

// haraqa builds the server from ../cmd/server once per test binary and
// reads its flags from -h.
func haraqa(t *testing.T) server {
	t.Helper()
	serverOnce.Do(func() {
		dir, err := os.MkdirTemp("", "haraqa-deploy-")
		if err != nil {
			serverErr = err
			return
		}
		bin := filepath.Join(dir, "haraqa")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/server")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			serverErr = fmt.Errorf("go build ./cmd/server: %v\n%s", err, out)
			return
		}
		out, err := exec.Command(bin, "-h").CombinedOutput()
		if err != nil {
			serverErr = fmt.Errorf("haraqa -h: %v\n%s", err, out)
			return
		}
		serverBuilt = server{bin: bin, flags: parseUsage(out)}
		if len(serverBuilt.flags) < 10 {
			serverErr = fmt.Errorf("haraqa -h lists %d flags:\n%s", len(serverBuilt.flags), out)
		}
	})
	if serverErr != nil {
		t.Fatal(serverErr)
	}
	return serverBuilt
}

var (
	flagLine    = regexp.MustCompile(`^  -([a-z0-9-]+)(?: (\S+))?$`)
	defaultText = regexp.MustCompile(`\(default ([^)]*)\)$`)
)

// parseUsage reads flag.PrintDefaults output: "  -name type" then the
// usage, indented by a tab, ending in "(default X)" when X is not the zero
// value. A flag printed without a type is a boolean.
func parseUsage(out []byte) map[string]serverFlag {
	flags := map[string]serverFlag{}
	var last string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if m := flagLine.FindStringSubmatch(line); m != nil {
			last = m[1]
			flags[last] = serverFlag{bool: m[2] == ""}
			continue
		}
		if m := defaultText.FindStringSubmatch(line); m != nil && last != "" {
			f := flags[last]
			f.def = m[1]
			if u, err := strconv.Unquote(f.def); err == nil {
				f.def = u // a string's default is printed quoted
			}
			flags[last] = f
		}
	}
	return flags
}

// parseArgs splits a container's args as the server's flag package would:
// the flags (name to value, "true" for a bare boolean) and the volumes
// after them. A flag the server does not have is an error.
func (s server) parseArgs(args []string) (map[string]string, []string, error) {
	set := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			return set, args[i:], nil
		}
		if a == "--" {
			return set, args[i+1:], nil
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f, ok := s.flags[name]
		if !ok {
			return nil, nil, fmt.Errorf("the server has no flag -%s", name)
		}
		switch {
		case hasValue:
		case f.bool:
			value = "true"
		case i+1 < len(args):
			i++
			value = args[i]
		default:
			return nil, nil, fmt.Errorf("-%s needs a value", name)
		}
		set[name] = value
	}
	return set, nil, nil
}

// port is the port the server listens on for flag (http or tcp) given
// the flags set: the flag's value, else the server's default.
func (s server) port(t *testing.T, set map[string]string, flag string) int32 {
	t.Helper()
	v, ok := set[flag]
	if !ok {
		v = s.flags[flag].def
	}
	p, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("-%s %q is not a port", flag, v)
	}
	return int32(p)
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

// running is a server process started by the tests.
type running struct {
	cmd    *exec.Cmd
	http   string // host:port of the HTTP port
	tcp    string // host:port of the binary port
	mu     sync.Mutex
	output bytes.Buffer
}

func (r *running) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.output.Write(p)
}

func (r *running) log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.output.String()
}

// start runs the server with args (a container's, with its paths already
// mapped to local ones), on loopback and free ports: the flags given here
// come after the container's, so they win.
func (s server) start(t *testing.T, flags, volumes []string) *running {
	t.Helper()
	return s.startOn(t, flags, volumes, freePort(t), freePort(t))
}

// startOn is start on the HTTP and binary ports given.
func (s server) startOn(t *testing.T, flags, volumes []string, hp, tp int) *running {
	t.Helper()
	args := append(append([]string{}, flags...), "-listen", "127.0.0.1", "-http", strconv.Itoa(hp),
		"-tcp", strconv.Itoa(tp), "-ballast", "0")
	args = append(args, volumes...)
	r := &running{http: fmt.Sprintf("127.0.0.1:%d", hp), tcp: fmt.Sprintf("127.0.0.1:%d", tp)}
	r.cmd = exec.Command(s.bin, args...)
	r.cmd.Stdout, r.cmd.Stderr = r, r
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			r.cmd.Process.Kill()
			r.cmd.Wait()
		}
	})
	return r
}

// stop sends SIGTERM and wants a clean exit.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the server did not stop cleanly: %v\n%s", err, r.log())
		}
	case <-time.After(ioTimeout):
		r.cmd.Process.Kill()
		<-done
		t.Errorf("the server did not stop within %v of SIGTERM\n%s", ioTimeout, r.log())
	}
}

// get waits until GET http://addr+path answers want, and returns the
// body. A token, unless "", goes in an Authorization header.
func get(t *testing.T, addr, path, token string, want int, log func() string) string {
	t.Helper()
	return getURL(t, &http.Client{Timeout: 2 * time.Second}, "http://"+addr+path, token, want, log)
}

// getURL is get with a client of the caller's and a whole URL.
func getURL(t *testing.T, c *http.Client, url, token string, want int, log func() string) string {
	t.Helper()
	deadline := time.Now().Add(ioTimeout)
	var last string
	for {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == want {
				return string(body)
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %s, want %d\n%s", url, last, want, log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestParseUsage(t *testing.T) {
	s := haraqa(t)
	for name, want := range map[string]serverFlag{
		"http":   {def: "4353"},
		"tcp":    {def: "14353"},
		"listen": {def: "0.0.0.0"},
		"cache":  {bool: true, def: "true"},
		"pprof":  {bool: true},
	} {
		if got, ok := s.flags[name]; !ok || got != want {
			t.Errorf("-%s: %+v (listed: %v), want %+v", name, got, ok, want)
		}
	}
	set, vols, err := s.parseArgs([]string{"-fsync", "interval", "-pprof", "-cache=false", "/a", "/b"})
	if err != nil || set["fsync"] != "interval" || set["pprof"] != "true" || set["cache"] != "false" ||
		strings.Join(vols, " ") != "/a /b" {
		t.Errorf("parseArgs: %v %v %v", set, vols, err)
	}
	if _, _, err := s.parseArgs([]string{"-no-such-flag", "/a"}); err == nil {
		t.Error("an unknown flag parsed")
	}
}
