package broker

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gnetDir is the patched copy of gnet the module builds with.
var gnetDir = filepath.Join("third_party", "gnet")

// TestBuiltWithPatchedGnet fails if the module has lost the replace that
// swaps in broker/third_party/gnet, whose event loop does not yield (and
// wake another thread) after every lone request (see its README).
func TestBuiltWithPatchedGnet(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{with .Replace}}{{.Dir}}{{end}}", "github.com/panjf2000/gnet/v2").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	if want := filepath.Join("broker", gnetDir); !strings.HasSuffix(dir, want) {
		t.Fatalf("gnet comes from %q, not the patched copy in %s (replace in go.mod)", dir, want)
	}
}

// TestGnetPatchApplied fails unless haraqa.patch is applied to the carried
// gnet: a copy refreshed from upstream without it, or edited so that the
// patch no longer reverses cleanly, would silently bring back the loop that
// yields before every wait. -f keeps patch from asking, on a terminal,
// whether an unapplied patch should be applied forwards instead.
func TestGnetPatchApplied(t *testing.T) {
	if _, err := exec.LookPath("patch"); err != nil {
		t.Skip("patch is not installed (Debian package patch; .ci/run installs it): cannot check that haraqa.patch is applied")
	}
	f, err := os.Open(filepath.Join(gnetDir, "haraqa.patch"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("patch", "--dry-run", "-R", "-f", "-p1", "-s")
	cmd.Dir, cmd.Stdin = gnetDir, f
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("haraqa.patch is not applied to %s (patch --dry-run -R: %v):\n%s\nre-create it with update.sh (see its README)", gnetDir, err, bytes.TrimSpace(out))
	}
}

// TestGnetRefusesPollOpt checks that -tags poll_opt, which builds gnet's
// other epoll loop, the one haraqa.patch leaves yielding before every
// wait, fails to compile and says why.
func TestGnetRefusesPollOpt(t *testing.T) {
	out, err := exec.Command("go", "build", "-tags", "poll_opt", ".").CombinedOutput()
	if err == nil {
		t.Fatal("go build -tags poll_opt succeeded: gnet's unpatched poll_opt loop would be used")
	}
	if want := "build without -tags poll_opt"; !strings.Contains(string(out), want) {
		t.Fatalf("go build -tags poll_opt failed, but without saying %q:\n%s", want, out)
	}
}
