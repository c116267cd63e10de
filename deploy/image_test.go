package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
)

// containers runs podman or docker.
type containers struct {
	tool   string
	global []string // flags before the command
}

// containerTool finds podman (with runc and cgroupfs where .ci/podman
// installed runc: crun cannot set up cgroups on hosts in hybrid mode) or,
// failing that, a docker whose daemon answers. Without either the test is
// skipped, unless HARAQA_IMAGE_TEST=1 (set by make test once .ci/podman
// has installed podman).
func containerTool(t *testing.T) containers {
	t.Helper()
	if _, err := exec.LookPath("podman"); err == nil {
		c := containers{tool: "podman"}
		if _, err := exec.LookPath("runc"); err == nil && os.Geteuid() == 0 {
			c.global = []string{"--runtime", "runc", "--cgroup-manager=cgroupfs"}
		}
		return c
	}
	if err := exec.Command("docker", "info").Run(); err == nil {
		return containers{tool: "docker"}
	}
	if os.Getenv("HARAQA_IMAGE_TEST") == "1" {
		t.Fatal("HARAQA_IMAGE_TEST=1 but neither podman nor a running docker is here (run .ci/podman)")
	}
	t.Skip("neither podman nor a running docker is installed: the image is not tested (.ci/podman installs podman, as root)")
	return containers{}
}

func (c containers) cmd(args ...string) *exec.Cmd {
	return exec.Command(c.tool, append(slices.Clone(c.global), args...)...)
}

func (c containers) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.cmd(args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", c.tool, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func (c containers) logs(name string) func() string {
	return func() string {
		out, _ := c.cmd("logs", name).CombinedOutput()
		return string(out)
	}
}

// image is the name make image gives the image.
const image = "haraqa/haraqa"

// TestImage builds the image with make image and runs the original
// README's command with it, its ports mapped to loopback only, into a host
// directory owned by root with mode 0755 as docker makes one: messages
// produced through the mapped binary port are read back through both
// ports, and again from a new container on the same directory. Then the
// image runs as the Kubernetes manifests run it: non-root, read-only root,
// no capabilities, a volume writable through its group.
func TestImage(t *testing.T) {
	c := containerTool(t)
	start := time.Now()
	build := exec.Command("make", "-C", "..", "image", "CONTAINER="+c.tool, "IMAGE="+image)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	t.Logf("make image took %v", time.Since(start).Round(time.Millisecond))

	var cfg struct {
		User         string
		Entrypoint   []string
		ExposedPorts map[string]any
	}
	if err := json.Unmarshal([]byte(c.run(t, "image", "inspect", "--format", "{{json .Config}}", image+":latest")), &cfg); err != nil {
		t.Fatal(err)
	}
	if !hasKey(cfg.ExposedPorts, "4353/tcp") || !hasKey(cfg.ExposedPorts, "14353/tcp") || len(cfg.ExposedPorts) != 2 {
		t.Errorf("the image exposes %v, want 4353 and 14353", cfg.ExposedPorts)
	}
	if !slices.Equal(cfg.Entrypoint, []string{"/haraqa"}) || (cfg.User != "" && cfg.User != "0" && cfg.User != "root") {
		t.Errorf("entrypoint %q as user %q, want /haraqa as root", cfg.Entrypoint, cfg.User)
	}

	base := t.TempDir()
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(base, "vol1")
	if err := os.Mkdir(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("haraqa-image-test-%d", os.Getpid())
	t.Cleanup(func() { c.cmd("rm", "-f", name).Run() })
	hp, tp := freePort(t), freePort(t)
	// The original's command: docker run -it -p 4353:4353 -v $PWD/vol1:/vol1 haraqa/haraqa /vol1,
	// detached, both ports on loopback, and ulimits this machine can set.
	runArgs := []string{"run", "-d", "--name", name, "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
		"-p", fmt.Sprintf("127.0.0.1:%d:4353", hp), "-p", fmt.Sprintf("127.0.0.1:%d:14353", tp),
		"-v", vol + ":/vol1", image, "/vol1"}
	httpAddr, tcpAddr := fmt.Sprintf("127.0.0.1:%d", hp), fmt.Sprintf("127.0.0.1:%d", tp)
	const n = 100
	msg := func(i int) string { return "m" + strconv.Itoa(i) }

	c.run(t, runArgs...)
	get(t, httpAddr, "/readyz", "", 200, c.logs(name))
	ctx := t.Context()
	cl, err := client.Dial(ctx, tcpAddr)
	if err != nil {
		t.Fatalf("dial the mapped binary port: %v\n%s", err, c.logs(name)())
	}
	var batch [][]byte
	for i := range n {
		batch = append(batch, []byte(msg(i)))
	}
	if _, err := cl.Produce(ctx, "boxed", batch...); err != nil {
		t.Fatalf("produce: %v\n%s", err, c.logs(name)())
	}
	cl.Close()
	if body := get(t, httpAddr, "/topics/boxed?id=0&limit=3", "", 200, c.logs(name)); body != "m0m1m2" {
		t.Errorf("GET /topics/boxed through the mapped HTTP port: %q, want m0m1m2", body)
	}
	logs := c.logs(name)()
	if !strings.Contains(logs, ":14353") || !strings.Contains(logs, ":4353") || strings.Contains(logs, "127.0.0.1:") {
		t.Errorf("the server in the image should listen on every address of the container (-listen 0.0.0.0):\n%s", logs)
	}
	if strings.Count(logs, "level=WARN") != 1 || !strings.Contains(logs, "without -auth-file") {
		t.Errorf("want the one warning about listening without -auth-file:\n%s", logs)
	}
	c.run(t, "stop", "-t", "10", name)
	if code := c.run(t, "inspect", "--format", "{{.State.ExitCode}}", name); code != "0" {
		t.Errorf("exit code %s after stop, want 0:\n%s", code, c.logs(name)())
	}
	c.run(t, "rm", name)
	if segs, _ := filepath.Glob(filepath.Join(vol, "topics", "boxed", "*.log")); len(segs) == 0 {
		t.Fatalf("no segment of topic boxed in the host directory %s", vol)
	}

	// A new container on the same host directory has the messages.
	c.run(t, runArgs...)
	get(t, httpAddr, "/readyz", "", 200, c.logs(name))
	cl, err = client.Dial(ctx, tcpAddr)
	if err != nil {
		t.Fatalf("dial after the restart: %v\n%s", err, c.logs(name)())
	}
	msgs, err := cl.Consume(ctx, "boxed", 0, n)
	cl.Close()
	if err != nil || len(msgs) != n {
		t.Fatalf("consume after the restart: %d messages, %v\n%s", len(msgs), err, c.logs(name)())
	}
	for i, m := range msgs {
		if string(m.Value) != msg(i) || m.Offset != int64(i) {
			t.Fatalf("message %d after the restart: offset %d %q", i, m.Offset, m.Value)
		}
	}
	c.run(t, "rm", "-f", name)

	// As Kubernetes runs it (deploy/kubernetes): user 65532, read-only
	// root with a tmpfs /tmp, no capabilities, a volume that fsGroup made
	// writable for group 65532.
	if os.Geteuid() != 0 {
		t.Log("not root: the non-root run, which needs a directory owned by group 65532, is left out")
		return
	}
	k8s := filepath.Join(base, "pv")
	if err := os.Mkdir(k8s, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(k8s, 0, 65532); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(k8s, 0o2775); err != nil {
		t.Fatal(err)
	}
	c.run(t, "run", "-d", "--name", name, "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
		"--user", "65532:65532", "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"-p", fmt.Sprintf("127.0.0.1:%d:14353", tp), "-p", fmt.Sprintf("127.0.0.1:%d:4353", hp),
		"-v", k8s+":/vol1", image, "/vol1")
	get(t, httpAddr, "/readyz", "", 200, c.logs(name))
	cl, err = client.Dial(ctx, tcpAddr)
	if err != nil {
		t.Fatalf("dial the non-root container: %v\n%s", err, c.logs(name)())
	}
	defer cl.Close()
	if _, err := cl.Produce(ctx, "pod", []byte("hello")); err != nil {
		t.Fatalf("produce as non-root: %v\n%s", err, c.logs(name)())
	}
	if msgs, err := cl.Consume(ctx, "pod", 0, 1); err != nil || len(msgs) != 1 || string(msgs[0].Value) != "hello" {
		t.Fatalf("consume as non-root: %v %v\n%s", msgs, err, c.logs(name)())
	}
	t.Logf("the image test took %v in all", time.Since(start).Round(time.Millisecond))
}

func hasKey(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}
