package broker

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuiltWithPatchedGnet fails if the module has lost the replace that
// swaps in broker/third_party/gnet, whose event loop does not yield (and
// wake another thread) after every lone request (see its README).
func TestBuiltWithPatchedGnet(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{with .Replace}}{{.Dir}}{{end}}", "github.com/panjf2000/gnet/v2").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	if want := filepath.Join("broker", "third_party", "gnet"); !strings.HasSuffix(dir, want) {
		t.Fatalf("gnet comes from %q, not the patched copy in %s (replace in go.mod)", dir, want)
	}
}
