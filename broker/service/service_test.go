package service

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/auth"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

func open(t *testing.T, cfg Config) *Service {
	t.Helper()
	st, err := storage.Open(storage.DefaultOptions(t.TempDir(), t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return New(st, cfg)
}

func hashOf(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}

// withTokens returns a service whose rules hold the tokens "p" (produce on
// orders.*), "c" (consume on orders.*) and "a" (admin on everything).
func withTokens(t *testing.T) *Service {
	t.Helper()
	rules, err := auth.Parse(strings.NewReader(
		hashOf("p")+" produce orders.*\n"+hashOf("c")+" consume orders.*\n"+hashOf("a")+" admin *\n"), "auth")
	if err != nil {
		t.Fatal(err)
	}
	return open(t, Config{Auth: auth.New(rules)})
}

func caller(t *testing.T, s *Service, tok string) Caller {
	t.Helper()
	c, err := s.Authenticate("127.0.0.1:1", tok)
	if err != nil {
		t.Fatalf("authenticate %q: %v", tok, err)
	}
	return c
}

func batch(msgs ...string) []byte {
	bs := make([][]byte, len(msgs))
	for i, m := range msgs {
		bs[i] = []byte(m)
	}
	return protocol.AppendBatch(nil, bs...)
}

// TestEveryCallChecksItsRight: each call refuses a Caller without the
// right its op needs (RightOf) with CodeForbidden, and one without a token
// with CodeUnauthenticated; the holder of the right gets through.
func TestEveryCallChecksItsRight(t *testing.T) {
	s := withTokens(t)
	admin, prod, cons := caller(t, s, "a"), caller(t, s, "p"), caller(t, s, "c")
	if err := s.CreateTopic(admin, "orders.eu"); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func(Caller) error{
		"create":   func(c Caller) error { return s.CreateTopic(c, "orders.x") },
		"delete":   func(c Caller) error { return s.DeleteTopic(c, "orders.nope") },
		"truncate": func(c Caller) error { _, err := s.Truncate(c, "orders.eu", 0); return err },
		"import":   func(c Caller) error { _, _, err := s.Import(c, "orders.eu", 0, nil, false); return err },
		"produce": func(c Caller) error {
			_, err := s.Produce(c, "orders.eu", Produce{Batch: batch("x"), Expect: -1})
			return err
		},
		"read": func(c Caller) error {
			r, err := s.Read(c, "orders.eu", 0, 1, 1<<20)
			if err == nil {
				r.Release()
			}
			return err
		},
		"commit":   func(c Caller) error { return s.CommitOffset(c, "orders.eu", "g", Commit{Offset: 0}) },
		"offsetAt": func(c Caller) error { _, err := s.OffsetAt(c, "orders.eu", time.Now()); return err },
	}
	allowed := map[string]Caller{"create": admin, "delete": admin, "truncate": admin, "import": admin,
		"produce": prod, "read": cons, "commit": cons, "offsetAt": cons}
	for name, call := range calls {
		if err := call(Caller{}); Code(err) != protocol.CodeUnauthenticated {
			t.Errorf("%s without a token: %v (code %v), want unauthenticated", name, err, Code(err))
		}
		wrong := prod
		if allowed[name] == prod {
			wrong = cons
		}
		if err := call(wrong); Code(err) != protocol.CodeForbidden || !strings.Contains(err.Error(), "orders.") {
			t.Errorf("%s with the wrong right: %v (code %v), want forbidden naming the topic", name, err, Code(err))
		}
		if err := call(allowed[name]); Code(err) == protocol.CodeForbidden || Code(err) == protocol.CodeUnauthenticated {
			t.Errorf("%s with the right: %v", name, err)
		}
	}
	if _, err := s.Authenticate("127.0.0.1:1", "wrong"); !errors.Is(err, ErrBadToken) {
		t.Errorf("a wrong token: %v, want ErrBadToken", err)
	}
}

// TestListTopicsFiltersByRights: a list holds only the topics the caller
// has some right on, and a regex filters further.
func TestListTopicsFiltersByRights(t *testing.T) {
	s := withTokens(t)
	admin := caller(t, s, "a")
	for _, n := range []string{"orders.eu", "orders.us", "secret"} {
		if err := s.CreateTopic(admin, n); err != nil {
			t.Fatal(err)
		}
	}
	names, err := s.ListTopics(caller(t, s, "c"), "", "")
	if err != nil || strings.Join(names, ",") != "orders.eu,orders.us" {
		t.Fatalf("consumer's list: %v %v", names, err)
	}
	if names, err = s.ListTopics(admin, "", "u[sx]$"); err != nil || strings.Join(names, ",") != "orders.us" {
		t.Fatalf("admin's regex list: %v %v", names, err)
	}
	if _, err = s.ListTopics(admin, "", "("); Code(err) != protocol.CodeInvalidArgument {
		t.Fatalf("bad regex: %v", err)
	}
	if _, err = s.ListTopics(Caller{}, "", ""); Code(err) != protocol.CodeUnauthenticated {
		t.Fatalf("list without a token: %v", err)
	}
}

// TestRulesOnBothPorts: the rules the service applies for either port.
func TestRulesOnBothPorts(t *testing.T) {
	s := open(t, Config{})
	var c Caller
	if _, err := s.Produce(c, "t", Produce{Batch: batch("a"), Expect: -1}); Code(err) != protocol.CodeTopicNotFound {
		t.Fatalf("produce to a missing topic: %v", err)
	}
	base, err := s.Produce(c, "t", Produce{Batch: batch("a", "b", "c"), Expect: -1, Create: true})
	if err != nil || base != 0 {
		t.Fatalf("produce that creates: %d %v", base, err)
	}
	if _, err := s.Produce(c, "t", Produce{Batch: batch("d"), Expect: 7}); Code(err) != protocol.CodeOffsetMismatch {
		t.Fatalf("produce expecting 7: %v", err)
	}
	if _, err := s.Read(c, "t", 4, 1, 1<<20); Code(err) != protocol.CodeOffsetOutOfRange {
		t.Fatalf("read past the end: %v", err)
	}
	r, err := s.Read(c, "t", -2, 0, 1<<20)
	if err != nil || r.Offset != 1 || r.Batches != 1 {
		t.Fatalf("read of the last two: %+v %v", r, err)
	}
	r.Release()
	if _, err := s.Truncate(c, "t", -1); Code(err) != protocol.CodeInvalidArgument {
		t.Fatalf("truncate before -1: %v", err)
	}
	if _, err := s.Truncate(c, "t", 4); Code(err) != protocol.CodeOffsetOutOfRange {
		t.Fatalf("truncate past the end: %v", err)
	}
	if info, err := s.Truncate(c, "t", 3); err != nil || info.Next != 3 {
		t.Fatalf("truncate to the end: %+v %v", info, err)
	}
	if err := ValidTopic("a/b"); Code(err) != protocol.CodeInvalidTopic || !strings.Contains(err.Error(), `"a/b"`) {
		t.Fatalf("ValidTopic(a/b): %v", err)
	}
	if err := s.CommitOffset(c, "t", "g", Commit{Offset: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lease(c, "t", "g", "m1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FetchUnleased(c, "t", "g"); Code(err) != protocol.CodeGroupBusy {
		t.Fatalf("fetch of a leased group: %v", err)
	}
}

// TestCodeTable: every storage sentinel has its code, wrapped or not; a
// port's Coded error keeps its own; anything else is unknown, whose
// message never carries the error's text (it may hold a server path).
func TestCodeTable(t *testing.T) {
	for _, e := range codes {
		wrapped := fmt.Errorf("topic %q: %w", "x", e.err)
		if got := Code(wrapped); got != e.code {
			t.Errorf("Code(%v) = %v, want %v", wrapped, got, e.code)
		}
	}
	if got := Code(coded{}); got != protocol.CodeNoSpace {
		t.Errorf("a Coded error: %v", got)
	}
	secret := errors.New("open /var/lib/haraqa/vol1/x: permission denied")
	if Code(secret) != protocol.CodeUnknown || strings.Contains(Message(secret, Code(secret)), "/var") {
		t.Errorf("an unknown error: code %v, message %q", Code(secret), Message(secret, Code(secret)))
	}
	ro := fmt.Errorf("%w: write /vol/x: EIO", storage.ErrReadOnly)
	if m := Message(ro, Code(ro)); strings.Contains(m, "/vol") {
		t.Errorf("read-only message %q names a path", m)
	}
	if Code(nil) != protocol.CodeOK {
		t.Error("Code(nil) is not OK")
	}
}

type coded struct{}

func (coded) Error() string           { return "coded" }
func (coded) WireCode() protocol.Code { return protocol.CodeNoSpace }

// TestRateLimitNotTurnedOnOthers: from the victim's address,
// an attacker's bad and empty tokens (4 a second, then a flood) never get
// the victim's valid token refused; a missing token is unauthenticated
// but not limited; a client retrying a revoked token locks out only that
// token.
func TestRateLimitNotTurnedOnOthers(t *testing.T) {
	s := withTokens(t)
	const addr = "192.0.2.9"
	deadline := time.Now().Add(2 * time.Second)
	victimOK, attacks := 0, 0
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		for i := range 4 { // far more than 4 a second: every kind of bad token
			tok := [...]string{"", "wrong", fmt.Sprint("guess", attacks), ""}[i]
			if _, err := s.Authenticate(fmt.Sprint(addr, ":", 7000+i), tok); err == nil {
				t.Fatalf("attacker's token %q accepted", tok)
			}
			attacks++
		}
		if _, err := s.Authenticate(addr+":5000", "c"); err != nil {
			t.Fatalf("after %d bad tokens from its address, the victim's valid token: %v (code %v)", attacks, err, Code(err))
		}
		victimOK++
		<-tick.C
	}
	if _, err := s.Authenticate(addr+":1", ""); !errors.Is(err, ErrBadToken) {
		t.Fatalf("a missing token after the attack: %v, want ErrBadToken (never limited)", err)
	}
	limited := 0
	for i := range 20 {
		if _, err := s.Authenticate(addr+":2", "revoked"); errors.Is(err, ErrAuthLimited) {
			limited++
		} else if !errors.Is(err, ErrBadToken) {
			t.Fatalf("retry %d of a revoked token: %v", i, err)
		}
	}
	if limited < 10 {
		t.Fatalf("20 retries of a revoked token: %d limited, want it throttled", limited)
	}
	if _, err := s.Authenticate(addr+":3", "p"); err != nil {
		t.Fatalf("another valid token from the address of a revoked one: %v", err)
	}
	t.Logf("%d bad tokens from its address, the victim accepted all %d times", attacks, victimOK)
}

// TestGroupRights: tenants A and B both consume a shared
// topic; group patterns keep each to its own groups: A cannot commit,
// fetch, lease, release or delete B's group, nor see it in a list; B can;
// a rule without group patterns keeps every group (old auth files).
func TestGroupRights(t *testing.T) {
	rules, err := auth.Parse(strings.NewReader(
		hashOf("A")+" consume shared.* groups=a.*\n"+
			hashOf("B")+" consume shared.* groups=b.*,b-legacy\n"+
			hashOf("old")+" consume shared.*\n"+
			hashOf("adm")+" admin *\n"), "auth")
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, Config{Auth: auth.New(rules)})
	a, b, old, adm := caller(t, s, "A"), caller(t, s, "B"), caller(t, s, "old"), caller(t, s, "adm")
	const topic = "shared.jobs"
	if _, err := s.Produce(adm, topic, Produce{Batch: batch("1", "2", "3"), Expect: -1, Create: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitOffset(b, topic, "b.workers", Commit{Offset: 2}); err != nil {
		t.Fatalf("B commits its group: %v", err)
	}
	if _, err := s.Lease(b, topic, "b.workers", "w1", time.Minute); err != nil {
		t.Fatalf("B leases its group: %v", err)
	}
	if err := s.CommitOffset(a, topic, "a.workers", Commit{Offset: 1}); err != nil {
		t.Fatalf("A commits its group: %v", err)
	}
	attacks := map[string]func() error{
		"commit":  func() error { return s.CommitOffset(a, topic, "b.workers", Commit{Offset: 0}) },
		"fetch":   func() error { _, err := s.FetchOffset(a, topic, "b.workers"); return err },
		"unlease": func() error { _, err := s.FetchUnleased(a, topic, "b-legacy"); return err },
		"lease":   func() error { _, err := s.Lease(a, topic, "b.workers", "evil", time.Minute); return err },
		"release": func() error { _, err := s.ReleaseLease(a, topic, "b.workers", "w1"); return err },
		"delete":  func() error { return s.DeleteGroup(a, topic, "b.workers") },
	}
	for name, call := range attacks {
		if err := call(); Code(err) != protocol.CodeForbidden || !strings.Contains(err.Error(), `"b.`) && !strings.Contains(err.Error(), `"b-legacy"`) {
			t.Errorf("A's %s of B's group: %v (code %v), want forbidden naming the group", name, err, Code(err))
		}
	}
	o, err := s.FetchOffset(b, topic, "b.workers")
	if err != nil || o.Committed != 2 || o.Member != "w1" {
		t.Fatalf("B's group after A's attempts: %+v %v, want offset 2 leased by w1", o, err)
	}
	if _, err := s.Lease(b, topic, "b.workers", "w1", time.Minute); err != nil {
		t.Fatalf("B renews its lease: %v", err)
	}
	names := func(c Caller) string {
		t.Helper()
		_, gs, err := s.ListGroups(c, topic)
		if err != nil {
			t.Fatal(err)
		}
		var ns []string
		for _, g := range gs {
			ns = append(ns, g.Group)
		}
		return strings.Join(ns, ",")
	}
	if got := names(a); got != "a.workers" {
		t.Errorf("A's list: %q, want only a.workers", got)
	}
	if got := names(b); got != "b.workers" {
		t.Errorf("B's list: %q, want only b.workers", got)
	}
	if got := names(old); got != "a.workers,b.workers" {
		t.Errorf("list of a rule without group patterns: %q, want every group", got)
	}
	if _, err := s.FetchOffset(old, topic, "b.workers"); err != nil {
		t.Errorf("a rule without group patterns fetches any group: %v", err)
	}
	if _, err := s.ReleaseLease(b, topic, "b.workers", "w1"); err != nil {
		t.Fatalf("B releases its lease: %v", err)
	}
	if err := s.DeleteGroup(b, topic, "b.workers"); err != nil {
		t.Fatalf("B deletes its group: %v", err)
	}
	if got := names(old); got != "a.workers" {
		t.Errorf("after B deleted its group: %q", got)
	}
}

// TestHasRightOnAll: the right on every topic and group is admin on "*"
// without group patterns; any token passes without tokens.
func TestHasRightOnAll(t *testing.T) {
	s := withTokens(t)
	if !s.HasRightOnAll(caller(t, s, "a"), auth.Admin) || !s.HasRightOnAll(caller(t, s, "a"), auth.Metrics) {
		t.Error("admin on * lacks admin or metrics on all")
	}
	if s.HasRightOnAll(caller(t, s, "c"), auth.Consume) || s.HasRightOnAll(Caller{}, auth.Admin) {
		t.Error("consume on orders.* or no token holds a right on all")
	}
	if !open(t, Config{}).HasRightOnAll(Caller{}, auth.Admin) {
		t.Error("without tokens: not every right")
	}
}

// TestCallerTenant: the decodes of compressed batches are shared out by
// tenant: a token's connections are one tenant whichever port they call
// on, and without tokens each connection is a tenant of its own.
func TestCallerTenant(t *testing.T) {
	s := withTokens(t)
	p1, p2 := caller(t, s, "p").WithConn("conn 1"), caller(t, s, "p").WithConn("http 127.0.0.1:5000")
	if p1.Tenant() != p2.Tenant() || p1.Tenant() == "" {
		t.Fatalf("one token on two connections: tenants %q and %q, want one", p1.Tenant(), p2.Tenant())
	}
	if c := caller(t, s, "c").WithConn("conn 1"); c.Tenant() == p1.Tenant() {
		t.Fatalf("two tokens on one connection: both tenant %q", c.Tenant())
	}
	a, b := Caller{}.WithConn("conn 1"), Caller{}.WithConn("conn 2")
	if a.Tenant() == b.Tenant() || a.Tenant() != "conn 1" {
		t.Fatalf("no tokens: tenants %q and %q, want one per connection", a.Tenant(), b.Tenant())
	}
}
