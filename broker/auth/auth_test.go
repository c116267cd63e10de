package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func hashOf(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		p, name string
		want    bool
	}{
		{"*", "anything", true},
		{"orders.*", "orders.eu", true},
		{"orders.*", "orders.", true},
		{"orders.*", "orders", false},
		{"orders.*", "xorders.eu", false},
		{"logs", "logs", true},
		{"logs", "logs2", false},
		{"*.eu", "orders.eu", true},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "aXXbYY", false},
		{"a**", "a", true},
		{"*a*a*a*a*a*b", strings.Repeat("a", 200), false},
	} {
		if got := match(tc.p, tc.name); got != tc.want {
			t.Errorf("match(%q, %q) = %v, want %v", tc.p, tc.name, got, tc.want)
		}
	}
}

func TestParseAndAllow(t *testing.T) {
	file := "# comment line\n\n" +
		hashOf("pc") + "  produce,consume  orders.* logs # trailing comment\n" +
		hashOf("c") + "\tconsume\tlogs\n" +
		hashOf("a") + " admin *\n"
	r, err := Parse(strings.NewReader(file), "auth")
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 3 {
		t.Fatalf("%d rules, want 3", r.Len())
	}
	pc, c, a := r.Authenticate("pc"), r.Authenticate("c"), r.Authenticate("a")
	if pc == nil || c == nil || a == nil {
		t.Fatal("a token of the file did not authenticate")
	}
	if r.Authenticate("nope") != nil || r.Authenticate("") != nil {
		t.Fatal("an unknown or empty token authenticated")
	}
	for _, tc := range []struct {
		g     *Grant
		right Right
		topic string
		want  bool
	}{
		{pc, Produce, "orders.eu", true},
		{pc, Consume, "logs", true},
		{pc, Admin, "orders.eu", false},
		{pc, Produce, "billing", false},
		{c, Consume, "logs", true},
		{c, Produce, "logs", false},
		{c, Consume, "orders.eu", false},
		{c, Any, "logs", true},
		{a, Admin, "x", true},
		{a, Produce, "x", true},
		{a, Consume, "x", true},
		{nil, Any, "x", false},
	} {
		if got := tc.g.Allow(tc.right, tc.topic); got != tc.want {
			t.Errorf("line %d: Allow(%s, %q) = %v, want %v", tc.g.Line(), tc.right, tc.topic, got, tc.want)
		}
	}
	if got := c.Filter([]string{"billing", "logs", "orders.eu"}); strings.Join(got, " ") != "logs" {
		t.Errorf("Filter = %q, want [logs]", got)
	}
}

func TestParseErrors(t *testing.T) {
	h := hashOf("x")
	for _, tc := range []struct{ file, want string }{
		{h + " produce\n", ":1: want a sha256 hash"},
		{"# c\nabc produce t\n", ":2: the hash has 3 characters"},
		{strings.Repeat("z", 64) + " produce t\n", ":1: the hash is not hex"},
		{h + " write t\n", `:1: unknown right "write"`},
		{h + " produce,,consume t\n", `:1: unknown right ""`},
		{h + " produce top/ic\n", `:1: topic pattern "top/ic"`},
		{h + " produce a\n" + h + " consume b\n", ":2: the same hash as line 1"},
	} {
		_, err := Parse(strings.NewReader(tc.file), "f")
		if !errors.Is(err, ErrParse) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want ErrParse with %q", tc.file, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), h) {
			t.Errorf("Parse error quotes a hash: %v", err)
		}
	}
}

func TestReloadKeepsOldRulesOnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth")
	if err := os.WriteFile(path, []byte(hashOf("one")+" admin *\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate("127.0.0.1:1", "one"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); !errors.Is(err, ErrParse) {
		t.Fatalf("Reload of a bad file = %v, want ErrParse", err)
	}
	if _, err := a.Authenticate("127.0.0.1:1", "one"); err != nil {
		t.Fatalf("after a failed reload: %v, want the old rules", err)
	}
	if err := os.WriteFile(path, []byte(hashOf("two")+" admin *\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate("127.0.0.1:1", "one"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("removed token: %v, want ErrUnauthenticated", err)
	}
}

func TestLimiter(t *testing.T) {
	now := time.Unix(0, 0)
	l := NewLimiter(Limits{Burst: 3, Every: time.Second})
	l.now = func() time.Time { return now }
	for i := 0; i < 3; i++ {
		if !l.Allowed("10.0.0.1:1000") {
			t.Fatalf("refused after %d failures, want 3 allowed", i)
		}
		l.Fail("10.0.0.1:" + string(rune('1'+i))) // another port: the same host
	}
	if l.Allowed("10.0.0.1:2000") {
		t.Fatal("allowed after the burst")
	}
	if !l.Allowed("10.0.0.2:1") {
		t.Fatal("another host refused")
	}
	now = now.Add(time.Second)
	if !l.Allowed("10.0.0.1:1") {
		t.Fatal("refused after a refill")
	}
}

func TestLimiterPrunes(t *testing.T) {
	l := NewLimiter(Limits{Burst: 2, Every: time.Hour, MaxAddrs: 8})
	for i := 0; i < 100; i++ {
		l.Fail(strings.Repeat("h", i+1))
	}
	if n := len(l.buckets); n > 8 {
		t.Fatalf("%d addresses tracked, want at most 8", n)
	}
}
