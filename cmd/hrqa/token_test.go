package main

import (
	"encoding/base64"
	"errors"
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
	reader, readerLine := tokenNew(t, "-rights", "consume", "-topics", "orders.* logs", "-groups", "readers.*")
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
	if r := hrqa(t, s.Addr, "", "consume", "orders.eu", "-group", "readers.1"); r.code != 0 || r.stdout != "one\n" {
		t.Fatalf("consume in a group of -groups: %+v", r)
	}
	if r := hrqa(t, s.Addr, "", "consume", "orders.eu", "-group", "writers"); r.code != 1 || !strings.Contains(r.stderr, "may not") {
		t.Fatalf("consume in a group outside -groups: %+v, want a failure saying the token may not", r)
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

// TestCheckRuleAsServer: hrqa's check of -rights and -topics accepts what
// the server's auth-file parser accepts, and refuses the rest with its
// message; every byte is tried in a pattern. Beyond that, it refuses
// rights that are empty or hold spaces and a '#' in a pattern, which the
// parser reads otherwise, and no pattern at all in words of its own.
func TestCheckRuleAsServer(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	server := func(rights, topics string) error {
		line := hash + "  " + rights + "  " + strings.Join(strings.Fields(topics), " ")
		_, err := auth.Parse(strings.NewReader(line), "x")
		if err != nil {
			_, detail, _ := strings.Cut(err.Error(), ":1: ")
			return errors.New(detail)
		}
		return nil
	}
	type rule struct{ rights, topics string }
	cases := []rule{
		{"produce", "*"}, {"consume", "orders.* logs"}, {"admin", "*"},
		{"produce,consume,admin", "a b c"}, {"metrics", "*"}, {"produce,", "*"}, {",consume", "*"},
		{"produce,,consume", "*"}, {"write", "*"}, {"Produce", "*"}, {"consume", "a/b"},
		{"consume", strings.Repeat("x", maxPatternLen)}, {"consume", strings.Repeat("x", maxPatternLen+1)},
		{"consume", "ok " + strings.Repeat("*", maxPatternLen+1)},
	}
	for c := range 256 {
		if c != '#' {
			cases = append(cases, rule{"produce", "a" + string(rune(c)) + "b"})
			cases = append(cases, rule{"produce", "a" + string([]byte{byte(c)}) + "b"})
		}
	}
	for _, tc := range cases {
		got, want := checkRule(tc.rights, strings.Fields(tc.topics)), server(tc.rights, tc.topics)
		if (got == nil) != (want == nil) || got != nil && got.Error() != want.Error() {
			t.Errorf("-rights %q -topics %q: hrqa says %v, the server's parser %v", tc.rights, tc.topics, got, want)
		}
	}
	for _, groups := range []string{"a.*", "a.*,b", "a,,b", "a,", "a/b", "*", strings.Repeat("g", maxPatternLen+1)} {
		got, want := checkGroups(groups), server("consume", "t groups="+groups)
		if (got == nil) != (want == nil) || got != nil && got.Error() != want.Error() {
			t.Errorf("-groups %q: hrqa says %v, the server's parser %v", groups, got, want)
		}
	}
	for _, tc := range []rule{{"", "produce *"}, {"produce consume", "*"}, {"produce", "a #b"}, {"produce", "a#"}, {"produce", ""}} {
		if err := checkRule(tc.rights, strings.Fields(tc.topics)); err == nil {
			t.Errorf("-rights %q -topics %q accepted", tc.rights, tc.topics)
		}
	}
}
