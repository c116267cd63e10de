package broker_test

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/auth"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// TestMaxConns: past Config.MaxConns a new connection is sent one
// limit-reached frame naming the limit and closed; the connections within
// the limit keep working, and once one closes a new one is served. (No
// per-address bound: all of them come from 127.0.0.1.)
func TestMaxConns(t *testing.T) {
	s := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) { c.MaxConns, c.MaxConnsPerAddr = 3, 0 })
	conns := make([]*rawConn, 3)
	for i := range conns {
		conns[i] = dialRaw(t, s.Addr)
		conns[i].ok(protocol.AppendPingRequest(nil, conns[i].id()))
	}
	over, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	_ = over.SetReadDeadline(time.Now().Add(ioTimeout))
	b, err := io.ReadAll(over) // the frame, then EOF: the server closed it
	if err != nil {
		t.Fatalf("connection over the limit: %v", err)
	}
	h, payload, err := protocol.ParseResponseHeader(b)
	if err != nil || h.Code != protocol.CodeLimitReached || h.CorrID != 0 {
		t.Fatalf("over the limit: %+v %v, want code %v", h, err, protocol.CodeLimitReached)
	}
	if m, _ := protocol.ParseErrorResponse(payload); !strings.Contains(string(m), "-max-conns") || !strings.Contains(string(m), " 3 ") {
		t.Fatalf("message %q does not name the limit", m)
	}
	if st := s.Broker.Stats(); st.RefusedConns != 1 {
		t.Fatalf("refused %d connections, want 1", st.RefusedConns)
	}
	for _, c := range conns {
		c.ok(protocol.AppendPingRequest(nil, c.id()))
	}
	conns[0].conn.Close()
	waitFor(t, "the closed connection to be counted", func() bool { return s.Broker.Stats().Connections == 2 })
	c := dialRaw(t, s.Addr)
	c.ok(protocol.AppendPingRequest(nil, c.id()))
}

// TestPerAddrCap: a client without a token holds every
// connection slot from one address (127.0.0.2) and pings, which needs no
// hello. With the default per-address cap (128) and room for 300
// connections, it gets 128 of them and the rest are refused with a frame
// naming -max-conns-per-addr; a client from 127.0.0.1 still connects and
// says hello with its token. Before the cap it got "limit reached". With
// room for 130, one address gets half: 65.
func TestPerAddrCap(t *testing.T) {
	for _, tc := range []struct{ slots, perAddr int }{{300, broker.DefaultMaxConnsPerAddr}, {130, 65}} {
		t.Run(fmt.Sprint(tc.slots), func(t *testing.T) { perAddrCap(t, tc.slots, tc.perAddr) })
	}
}

func perAddrCap(t *testing.T, slots, perAddr int) {
	a := auth.New(authRules(t))
	s := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) { c.MaxConns, c.Auth = slots, a })
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: ioTimeout}
	served, refused := 0, 0
	for range perAddr + 2 {
		nc, err := d.Dial("tcp", s.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		c := &rawConn{tb: t, conn: nc}
		c.write(protocol.AppendPingRequest(nil, c.id()))
		r := c.read()
		switch {
		case r.Code == protocol.CodeOK:
			served++
		case r.Code == protocol.CodeLimitReached && strings.Contains(r.errMsg(), "-max-conns-per-addr") && strings.Contains(r.errMsg(), "127.0.0.2"):
			refused++
		default:
			t.Fatalf("attacker's connection: code %v %q", r.Code, r.errMsg())
		}
	}
	if served != perAddr || refused != 2 {
		t.Fatalf("from one address: %d served, %d refused; want %d and 2", served, refused, perAddr)
	}
	victim := dialRaw(t, s.Addr)
	if hr := victim.hello(tokPC); !hr.Auth {
		t.Fatalf("victim's hello: %+v", hr)
	}
	victim.produce("orders.a", protocol.ProduceCreateTopic, "after the attack")
}

// TestMemberConnsOutsideLimits: a connection whose hello presents the
// cluster's token (the replication right on every topic) leaves the
// connection counts, -max-conns and -max-conns-per-addr, at once: with
// room for 4 descriptors, 2 from one address, two members' connections
// leave both client slots of 127.0.0.1 free, the third client is
// refused, and closing the members' connections frees nothing the
// clients hold. A token with the replication right on some topics only
// is no member's.
func TestMemberConnsOutsideLimits(t *testing.T) {
	const tokMember, tokSome = "token-member", "token-replica-of-orders"
	rules, err := auth.Parse(strings.NewReader(sha(tokMember)+" replication *\n"+sha(tokSome)+" replication orders.*\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	s := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) {
		c.MaxConns, c.MaxConnsPerAddr, c.Auth = 4, 2, auth.New(rules)
	})
	var members []*rawConn
	for range 2 {
		m := dialRaw(t, s.Addr)
		if hr := m.hello(tokMember); !hr.Auth {
			t.Fatalf("member's hello: %+v", hr)
		}
		members = append(members, m)
	}
	waitFor(t, "two member connections", func() bool { return s.Broker.Stats().MemberConns == 2 })
	some := dialRaw(t, s.Addr) // counted: not a member
	some.hello(tokSome)
	if n := s.Broker.Stats().MemberConns; n != 2 {
		t.Fatalf("%d member connections, want 2", n)
	}
	overLimit := func() { t.Helper(); refusedOverLimit(t, s.Addr) }
	client := dialRaw(t, s.Addr)
	client.ping()
	overLimit() // 127.0.0.1 holds its 2: the client and the non-member
	for _, m := range members {
		m.ping()
		m.conn.Close()
	}
	waitFor(t, "the members' connections closed", func() bool {
		st := s.Broker.Stats()
		return st.MemberConns == 0 && st.Connections == 2
	})
	overLimit() // closing them gave back nothing of the clients'
	some.conn.Close()
	waitFor(t, "the non-member's connection closed", func() bool { return s.Broker.Stats().Connections == 1 })
	dialRaw(t, s.Addr).ping()
}

// TestMemberConnsOutsideLimitsSecret: without tokens, a connection whose
// hello presents the members' secret (Config.ClusterSecret) leaves the
// connection counts; one with another token, or none, does not.
func TestMemberConnsOutsideLimitsSecret(t *testing.T) {
	const secret = "members-secret-0123456789abcdef"
	s := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) {
		c.MaxConns, c.MaxConnsPerAddr, c.ClusterSecret = 4, 2, secret
	})
	for range 2 {
		dialRaw(t, s.Addr).hello(secret)
	}
	waitFor(t, "two member connections", func() bool { return s.Broker.Stats().MemberConns == 2 })
	dialRaw(t, s.Addr).hello("not-the-secret")
	dialRaw(t, s.Addr).ping()
	if n := s.Broker.Stats().MemberConns; n != 2 {
		t.Fatalf("%d member connections, want 2", n)
	}
	refusedOverLimit(t, s.Addr) // a third client connection from 127.0.0.1
}

// refusedOverLimit checks that a new connection to addr is answered
// CodeLimitReached and closed.
func refusedOverLimit(t *testing.T, addr string) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetReadDeadline(time.Now().Add(ioTimeout))
	b, _ := io.ReadAll(nc)
	if h, _, err := protocol.ParseResponseHeader(b); err != nil || h.Code != protocol.CodeLimitReached {
		t.Fatalf("a connection over the per-address limit: %+v %v, want limit reached", h, err)
	}
}
