package broker_test

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"testing"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/auth"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// Tokens of authRules.
const (
	tokPC    = "token-produce-consume-orders"
	tokC     = "token-consume-orders"
	tokA     = "token-admin"
	tokLogs  = "token-consume-logs"
	tokWrong = "token-nobody-has"
)

func sha(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}

func authRules(t testing.TB) *auth.Rules {
	t.Helper()
	r, err := auth.Parse(strings.NewReader(
		sha(tokPC)+" produce,consume orders.*\n"+
			sha(tokC)+" consume orders.*\n"+
			sha(tokA)+" admin *\n"+
			sha(tokLogs)+" consume logs\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func startAuth(t *testing.T) *brokertest.Server {
	t.Helper()
	a := auth.New(authRules(t))
	return brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) { c.Auth = a })
}

func (c *rawConn) hello(token string) protocol.HelloResponse {
	c.tb.Helper()
	hr, err := protocol.ParseHelloResponse(c.ok(protocol.AppendHelloRequest(nil, c.id(), protocol.Version, "test", token)))
	if err != nil {
		c.tb.Fatal(err)
	}
	return hr
}

func TestAuthBeforeHello(t *testing.T) {
	s := startAuth(t)
	c := dialRaw(t, s.Addr)
	c.ping() // open
	for _, req := range [][]byte{
		protocol.AppendProduceRequest(nil, c.id(), "orders.eu", protocol.ProduceCreateTopic, batchOf("x")),
		protocol.AppendConsumeRequest(nil, c.id(), "orders.eu", 0, 1, 0, 0),
		protocol.AppendTopicInfoRequest(nil, c.id(), "orders.eu"),
		protocol.AppendListTopicsRequest(nil, c.id(), "", ""),
		protocol.AppendCreateTopicRequest(nil, c.id(), "orders.eu"),
		protocol.AppendDeleteTopicRequest(nil, c.id(), "orders.eu"),
		protocol.AppendTruncateRequest(nil, c.id(), "orders.eu", protocol.TruncateByOffset, 0),
	} {
		c.fail(req, protocol.CodeUnauthenticated)
	}
	// A wrong token leaves the connection unauthenticated, and usable.
	c.fail(protocol.AppendHelloRequest(nil, c.id(), protocol.Version, "test", tokWrong), protocol.CodeUnauthenticated)
	c.fail(protocol.AppendHelloRequest(nil, c.id(), protocol.Version, "test", ""), protocol.CodeUnauthenticated)
	c.fail(protocol.AppendTopicInfoRequest(nil, c.id(), "orders.eu"), protocol.CodeUnauthenticated)
	if hr := c.hello(tokPC); !hr.Auth || hr.Version != protocol.Version {
		t.Fatalf("hello = %+v, want auth and version %d", hr, protocol.Version)
	}
	c.produce("orders.eu", protocol.ProduceCreateTopic, "one")
	if cr := c.consume("orders.eu", 0, 1, 0, 0); cr.NextOffset != 1 {
		t.Fatalf("next offset %d, want 1", cr.NextOffset)
	}
	// A failed hello drops the rights the connection had.
	c.fail(protocol.AppendHelloRequest(nil, c.id(), protocol.Version, "test", tokWrong), protocol.CodeUnauthenticated)
	c.fail(protocol.AppendTopicInfoRequest(nil, c.id(), "orders.eu"), protocol.CodeUnauthenticated)
}

// TestAuthPipelined sends the hello and the requests behind it in one write.
func TestAuthPipelined(t *testing.T) {
	s := startAuth(t)
	c := dialRaw(t, s.Addr)
	b := protocol.AppendHelloRequest(nil, 1, protocol.Version, "test", tokPC)
	b = protocol.AppendProduceRequest(b, 2, "orders.x", protocol.ProduceCreateTopic, batchOf("a"))
	b = protocol.AppendProduceRequest(b, 3, "billing", protocol.ProduceCreateTopic, batchOf("a"))
	c.write(b)
	for _, want := range []struct {
		id   uint32
		code protocol.Code
	}{{1, protocol.CodeOK}, {2, protocol.CodeOK}, {3, protocol.CodeForbidden}} {
		r := c.read()
		if r.CorrID != want.id || r.Code != want.code {
			t.Fatalf("response %+v (%s), want id %d code %v", r.ResponseHeader, r.errMsg(), want.id, want.code)
		}
	}
}

func TestAuthRights(t *testing.T) {
	s := startAuth(t)
	admin := dialRaw(t, s.Addr)
	admin.hello(tokA)
	for _, topic := range []string{"orders.eu", "billing", "logs"} {
		admin.produce(topic, protocol.ProduceCreateTopic, "m")
	}
	type check struct {
		token string
		req   func(c *rawConn) []byte
		want  protocol.Code
	}
	produce := func(topic string) func(c *rawConn) []byte {
		return func(c *rawConn) []byte {
			return protocol.AppendProduceRequest(nil, c.id(), topic, 0, batchOf("m"))
		}
	}
	consume := func(topic string) func(c *rawConn) []byte {
		return func(c *rawConn) []byte { return protocol.AppendConsumeRequest(nil, c.id(), topic, 0, 1, 0, 0) }
	}
	info := func(topic string) func(c *rawConn) []byte {
		return func(c *rawConn) []byte { return protocol.AppendTopicInfoRequest(nil, c.id(), topic) }
	}
	create := func(topic string) func(c *rawConn) []byte {
		return func(c *rawConn) []byte { return protocol.AppendCreateTopicRequest(nil, c.id(), topic) }
	}
	truncate := func(topic string) func(c *rawConn) []byte {
		return func(c *rawConn) []byte {
			return protocol.AppendTruncateRequest(nil, c.id(), topic, protocol.TruncateByOffset, 0)
		}
	}
	del := func(topic string) func(c *rawConn) []byte {
		return func(c *rawConn) []byte { return protocol.AppendDeleteTopicRequest(nil, c.id(), topic) }
	}
	ok, no := protocol.CodeOK, protocol.CodeForbidden
	for i, ch := range []check{
		{tokPC, produce("orders.eu"), ok},
		{tokPC, produce("billing"), no}, // a token for another topic
		{tokC, produce("orders.eu"), no},
		{tokC, consume("orders.eu"), ok},
		{tokC, consume("billing"), no},
		{tokLogs, consume("logs"), ok},
		{tokLogs, consume("orders.eu"), no},
		{tokC, info("orders.eu"), ok}, // any right
		{tokC, info("billing"), no},
		{tokPC, create("orders.new"), no},
		{tokPC, truncate("orders.eu"), no},
		{tokPC, del("orders.eu"), no},
		{tokC, del("orders.eu"), no},
		{tokA, create("orders.new"), ok},
		{tokA, truncate("orders.eu"), ok},
		{tokA, consume("billing"), ok},
		{tokA, del("orders.new"), ok},
	} {
		c := dialRaw(t, s.Addr)
		c.hello(ch.token)
		if r := c.roundTrip(ch.req(c)); r.Code != ch.want {
			t.Errorf("check %d: %v: code %v (%s), want %v", i, r.Op, r.Code, r.errMsg(), ch.want)
		}
		c.ping() // the connection stays usable
	}
}

func TestAuthListFiltered(t *testing.T) {
	s := startAuth(t)
	admin := dialRaw(t, s.Addr)
	admin.hello(tokA)
	for _, topic := range []string{"orders.eu", "orders.us", "billing", "logs"} {
		admin.produce(topic, protocol.ProduceCreateTopic, "m")
	}
	for _, tc := range []struct {
		token, regex string
		want         []string
	}{
		{tokA, "", []string{"billing", "logs", "orders.eu", "orders.us"}},
		{tokC, "", []string{"orders.eu", "orders.us"}},
		{tokC, "us", []string{"orders.us"}},
		{tokLogs, "", []string{"logs"}},
	} {
		c := dialRaw(t, s.Addr)
		c.hello(tc.token)
		if got := c.list("", tc.regex); !slices.Equal(got, tc.want) {
			t.Errorf("list with regex %q = %q, want %q", tc.regex, got, tc.want)
		}
	}
}

func TestAuthRateLimit(t *testing.T) {
	s := startAuth(t)
	c := dialRaw(t, s.Addr)
	limited := false
	for i := 0; i < 50 && !limited; i++ {
		r := c.roundTrip(protocol.AppendHelloRequest(nil, c.id(), protocol.Version, "test", tokWrong))
		switch r.Code {
		case protocol.CodeUnauthenticated:
		case protocol.CodeLimitReached:
			limited = true
		default:
			t.Fatalf("hello %d: code %v (%s)", i, r.Code, r.errMsg())
		}
	}
	if !limited {
		t.Fatal("50 failed hellos were never limited")
	}
	// Only the failing token is limited: from another connection of the
	// same host it still is, an empty token is unauthenticated (it counts
	// as no failure), and a good token is accepted.
	c2 := dialRaw(t, s.Addr)
	c2.fail(protocol.AppendHelloRequest(nil, c2.id(), protocol.Version, "test", tokWrong), protocol.CodeLimitReached)
	for range 10 {
		c2.fail(protocol.AppendHelloRequest(nil, c2.id(), protocol.Version, "test", ""), protocol.CodeUnauthenticated)
	}
	if hr := c2.hello(tokA); !hr.Auth {
		t.Fatal("a good token from a limited host: not authenticated")
	}
	c2.ping()
	if n := s.Broker.Stats().AuthFailures; n < 5 {
		t.Errorf("AuthFailures = %d, want at least 5", n)
	}
}

func TestHelloWithoutAuth(t *testing.T) {
	s := brokertest.Start(t, 1)
	c := dialRaw(t, s.Addr)
	if hr := c.hello("anything"); hr.Auth {
		t.Fatal("a server without an auth file said it checks tokens")
	}
	c.produce("t", protocol.ProduceCreateTopic, "m")
}
