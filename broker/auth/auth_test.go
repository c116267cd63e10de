package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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
		{h + " consume groups=a.*\n", ":1: no topic pattern"},
		{h + " consume t groups=\n", ":1: empty group pattern"},
		{h + " consume t groups=a,,b\n", ":1: empty group pattern"},
		{h + " consume t groups=a/b\n", `:1: group pattern "a/b": '/' is neither a group name character`},
		{h + " consume t group=a\n", `:1: topic pattern "group=a"`},
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

// TestGroupsAndMetrics: group patterns bound the groups of a rule, a rule
// without them allows every group; metrics is a right of its own that
// admin implies; AllowAll needs the right on "*" and every group.
func TestGroupsAndMetrics(t *testing.T) {
	file := hashOf("a") + " consume shared.* groups=a.*,legacy groups=x\n" +
		hashOf("old") + " consume shared.*\n" +
		hashOf("m") + " metrics *\n" +
		hashOf("adm") + " admin *\n" +
		hashOf("tadm") + " admin t.*\n" +
		hashOf("gadm") + " admin ** groups=ops.*\n" +
		hashOf("sadm") + " admin * groups=*\n"
	r, err := Parse(strings.NewReader(file), "auth")
	if err != nil {
		t.Fatal(err)
	}
	g := func(tok string) *Grant {
		gr := r.Authenticate(tok)
		if gr == nil {
			t.Fatalf("%q did not authenticate", tok)
		}
		return gr
	}
	for _, tc := range []struct {
		tok, group string
		want       bool
	}{
		{"a", "a.workers", true}, {"a", "legacy", true}, {"a", "x", true},
		{"a", "b.workers", false}, {"a", "legacy2", false},
		{"old", "b.workers", true}, {"adm", "anything", true}, {"gadm", "ops.1", true}, {"gadm", "dev", false},
	} {
		if got := g(tc.tok).AllowGroup(tc.group); got != tc.want {
			t.Errorf("%s: AllowGroup(%q) = %v, want %v", tc.tok, tc.group, got, tc.want)
		}
	}
	var none *Grant
	if none.AllowGroup("g") || none.AllowAll(Admin) || none.Has(Metrics) {
		t.Error("a nil grant allows something")
	}
	if !g("m").Allow(Metrics, "x") || g("m").Allow(Consume, "x") || !g("m").Allow(Any, "x") || !g("m").Has(Metrics) {
		t.Error("metrics: want the metrics right (and so topic info) only")
	}
	if !g("adm").Has(Metrics) || !g("tadm").Has(Metrics) || g("old").Has(Metrics) {
		t.Error("admin implies metrics; consume does not")
	}
	for _, tc := range []struct {
		tok   string
		right Right
		want  bool
	}{
		{"adm", Admin, true}, {"adm", Metrics, true}, {"sadm", Admin, true}, {"m", Metrics, true},
		{"m", Admin, false}, {"tadm", Admin, false}, {"gadm", Admin, false}, {"old", Consume, false}, {"adm", 0, false},
	} {
		if got := g(tc.tok).AllowAll(tc.right); got != tc.want {
			t.Errorf("%s: AllowAll(%s) = %v, want %v", tc.tok, tc.right, got, tc.want)
		}
	}
	if s := (Any).String(); s != "produce,consume,admin,metrics" {
		t.Errorf("Any is %q", s)
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
	bad := sha256.Sum256([]byte("bad"))
	for i := 0; i < 3; i++ {
		if !l.Fail("10.0.0.1:"+string(rune('1'+i)), bad) { // another port: the same host
			t.Fatalf("refused after %d failures, want 3 allowed", i)
		}
	}
	if l.Fail("10.0.0.1:2000", bad) {
		t.Fatal("a fourth failure of the same token allowed")
	}
	if !l.Fail("10.0.0.2:1", bad) {
		t.Fatal("the same token from another host refused")
	}
	if !l.Fail("10.0.0.1:1", sha256.Sum256([]byte("other"))) {
		t.Fatal("another token from the host refused for the first one's failures")
	}
	now = now.Add(time.Second)
	if !l.Fail("10.0.0.1:1", bad) {
		t.Fatal("refused after a refill")
	}
}

// TestLimiterTake: Take bounds each key alone: a burst, then one back
// every Every; another key is not touched; keys are pruned past MaxAddrs.
func TestLimiterTake(t *testing.T) {
	now := time.Unix(0, 0)
	l := NewLimiter(Limits{Burst: 3, Every: 100 * time.Millisecond, MaxAddrs: 8})
	l.now = func() time.Time { return now }
	for i := range 3 {
		if !l.Take("tenant") {
			t.Fatalf("take %d refused, want a burst of 3", i+1)
		}
	}
	if l.Take("tenant") {
		t.Fatal("a fourth take in a row allowed")
	}
	if !l.Take("other") {
		t.Fatal("another key refused for the first one's takes")
	}
	now = now.Add(100 * time.Millisecond)
	if !l.Take("tenant") || l.Take("tenant") {
		t.Fatal("want exactly one take back after Every")
	}
	for i := range 100 {
		l.Take(strings.Repeat("k", i+1))
	}
	if n := l.keys.Len(); n > 8 {
		t.Fatalf("%d keys tracked, want at most 8", n)
	}
}

func TestLimiterPrunes(t *testing.T) {
	l := NewLimiter(Limits{Burst: 2, Every: time.Hour, MaxAddrs: 8})
	for i := 0; i < 100; i++ {
		l.Fail(strings.Repeat("h", i+1), sha256.Sum256([]byte{byte(i)}))
		l.Fail("one", sha256.Sum256([]byte{byte(i)}))
	}
	if n, m := l.hosts.Len(), l.pairs.Len(); n > 8 || m > 8 {
		t.Fatalf("%d hosts and %d pairs tracked, want at most 8 each", n, m)
	}
}

// TestRateLimitNotTurnedOnOthers: an attacker at the victim's
// address (same host, NAT, proxy) sends 4 bad or empty tokens a second,
// then floods random tokens; the victim's valid token is accepted every
// time, a missing token costs nothing, and a client retrying a revoked
// token locks out only that token.
func TestRateLimitNotTurnedOnOthers(t *testing.T) {
	r, err := Parse(strings.NewReader(hashOf("victim")+" consume *\n"), "auth")
	if err != nil {
		t.Fatal(err)
	}
	a := New(r)
	now := time.Unix(0, 0)
	a.limiter.now = func() time.Time { return now }
	const addr = "192.0.2.7"
	victim := func(when string) {
		t.Helper()
		if g, err := a.Authenticate(addr+":5000", "victim"); err != nil || g == nil {
			t.Fatalf("%s: the victim's valid token: %v", when, err)
		}
	}
	for i := range 80 { // 20 s at 4 a second
		tok := ""
		if i%2 == 1 {
			tok = fmt.Sprint("guess", i)
		}
		if _, err := a.Authenticate(fmt.Sprint(addr, ":", 6000+i), tok); err == nil {
			t.Fatalf("attacker's token %q accepted", tok)
		}
		if i%4 == 0 {
			victim(fmt.Sprintf("at %d ms of bad tokens", i*250))
		}
		now = now.Add(250 * time.Millisecond)
	}
	for range 20 {
		if _, err := a.Authenticate(addr+":1", ""); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("a missing token: %v, want ErrUnauthenticated (never limited)", err)
		}
	}
	limited := 0
	for i := range 100 {
		if _, err := a.Authenticate(addr+":2", fmt.Sprint("flood", i)); errors.Is(err, ErrTooManyFailures) {
			limited++
		}
	}
	if limited < 90 {
		t.Fatalf("a flood of 100 random tokens from one address: %d limited, want at least 90", limited)
	}
	victim("during a flood of random tokens")

	now = now.Add(time.Minute)
	for i := range 20 {
		_, err := a.Authenticate(addr+":3", "revoked")
		if want := ErrUnauthenticated; i >= 5 {
			if !errors.Is(err, ErrTooManyFailures) {
				t.Fatalf("retry %d of a revoked token: %v, want ErrTooManyFailures", i, err)
			}
		} else if !errors.Is(err, want) {
			t.Fatalf("retry %d of a revoked token: %v, want %v", i, err, want)
		}
	}
	victim("after a revoked token's retries")
	if _, err := a.Authenticate(addr+":4", "another-wrong"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("another token after the revoked one's retries: %v, want ErrUnauthenticated (not limited)", err)
	}
}
