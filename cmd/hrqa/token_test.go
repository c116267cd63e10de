package main

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/haraqa/haraqa/broker/auth"
	"github.com/haraqa/haraqa/broker/brokertest"
)

// tokenNew runs "hrqa token new" with args and returns the token and the
// auth-file line it printed.
func tokenNew(t *testing.T, args ...string) (string, string) {
	t.Helper()
	r := hrqa(t, "127.0.0.1:1", "", append([]string{"token", "new"}, args...)...)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 2 {
		t.Fatalf("token new: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if b, err := base64.RawURLEncoding.DecodeString(lines[0]); err != nil || len(b) != tokenBytes {
		t.Fatalf("token %q: %d bytes, %v; want %d bytes of base64url", lines[0], len(b), err, tokenBytes)
	}
	return lines[0], lines[1]
}

func TestTokenNewAndUse(t *testing.T) {
	admin, adminLine := tokenNew(t, "-rights", "admin")
	reader, readerLine := tokenNew(t, "-rights", "consume", "-topics", "orders.* logs")
	if admin == reader {
		t.Fatal("two runs printed the same token")
	}
	file := filepath.Join(t.TempDir(), "auth")
	if err := os.WriteFile(file, []byte(adminLine+"\n"+readerLine+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := auth.Load(file)
	if err != nil {
		t.Fatalf("the printed lines do not parse: %v", err)
	}
	cfg := brokertest.Config(t.TempDir())
	cfg.Broker.Auth = a
	s, err := brokertest.StartConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })

	if r := hrqa(t, s.Addr, "one\n", "-token", admin, "produce", "orders.eu"); r.code != 0 {
		t.Fatalf("produce with the admin token: %+v", r)
	}
	// -token after the command, and $HARAQA_TOKEN.
	if r := hrqa(t, s.Addr, "", "consume", "orders.eu", "-token", reader); r.code != 0 || r.stdout != "one\n" {
		t.Fatalf("consume with the reader token: %+v", r)
	}
	t.Setenv("HARAQA_TOKEN", reader)
	if r := hrqa(t, s.Addr, "", "consume", "orders.eu"); r.code != 0 || r.stdout != "one\n" {
		t.Fatalf("consume with $HARAQA_TOKEN: %+v", r)
	}
	r := hrqa(t, s.Addr, "two\n", "produce", "orders.eu")
	if r.code != 1 || !strings.Contains(r.stderr, "may not") {
		t.Fatalf("produce with the reader token: %+v, want a failure saying the token may not", r)
	}
	r = hrqa(t, s.Addr, "", "-token", "wrong", "consume", "orders.eu")
	if r.code != 1 || !strings.Contains(r.stderr, "refused the token") {
		t.Fatalf("a wrong token: %+v", r)
	}
	t.Setenv("HARAQA_TOKEN", "")
	r = hrqa(t, s.Addr, "", "consume", "orders.eu")
	if r.code != 1 || !strings.Contains(r.stderr, "needs a token") {
		t.Fatalf("no token: %+v", r)
	}
	if strings.Contains(r.stderr, reader) || strings.Contains(r.stderr, admin) {
		t.Fatal("a token in hrqa's output")
	}
}

func TestTokenNewBadRights(t *testing.T) {
	r := hrqa(t, "127.0.0.1:1", "", "token", "new", "-rights", "write")
	if r.code != 2 || !strings.Contains(r.stderr, `unknown right "write"`) {
		t.Fatalf("token new -rights write: %+v", r)
	}
}
