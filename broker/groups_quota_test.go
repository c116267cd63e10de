package broker_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/auth"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// TestGroupQuotaOverWire: over the binary port with tokens,
// one token takes 100 ms leases over its own topics until it is refused,
// with limit reached naming -max-groups-per-token; its live leases are
// listed. Meanwhile another token commits and leases on its own topic.
// Once the leases expired, their slots are free: the first token takes
// as many again.
func TestGroupQuotaOverWire(t *testing.T) {
	const quota = 64
	const tokAttack, tokVictim = "token-attacker", "token-victim"
	rules, err := auth.Parse(strings.NewReader(
		sha(tokAttack)+" produce,consume a.*\n"+
			sha(tokVictim)+" produce,consume v.*\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	s := brokertest.Start(t, 1, func(o *storage.Options, c *broker.Config) {
		o.MaxGroupsPerToken = quota
		c.Auth = auth.New(rules)
	})
	attacker, victim := dialRaw(t, s.Addr), dialRaw(t, s.Addr)
	attacker.hello(tokAttack)
	victim.hello(tokVictim)
	for i := 0; i < 4; i++ {
		attacker.produce(fmt.Sprint("a.", i), protocol.ProduceCreateTopic, "x")
	}
	victim.produce("v.work", protocol.ProduceCreateTopic, "1", "2")

	take := func() (int, string) {
		for n := 0; ; n++ {
			req := protocol.AppendLeaseRequest(nil, attacker.id(), leaseReq(fmt.Sprint("a.", n%4), fmt.Sprint("g", n), "m", protocol.LeaseTake, 100))
			if r := attacker.roundTrip(req); r.Code != protocol.CodeOK {
				if r.Code != protocol.CodeLimitReached {
					t.Fatalf("lease %d: code %v: %s", n, r.Code, r.errMsg())
				}
				return n, r.errMsg()
			}
		}
	}
	n, msg := take()
	expiry := time.Now().Add(100 * time.Millisecond)
	if n != quota || !strings.Contains(msg, "-max-groups-per-token") {
		t.Fatalf("%d leases taken before %q, want %d refused naming -max-groups-per-token", n, msg, quota)
	}
	lg, err := protocol.ParseListGroupsResponse(attacker.ok(protocol.AppendListGroupsRequest(nil, attacker.id(), "a.0")))
	if time.Now().Before(expiry) && (err != nil || lg.Count != quota/4) {
		t.Fatalf("the live leases of a.0: %d listed, %v", lg.Count, err)
	}
	// The other token is not touched.
	victim.ok(protocol.AppendCommitRequest(nil, victim.id(), commitReq("v.work", "billing", "", 1)))
	victim.ok(protocol.AppendLeaseRequest(nil, victim.id(), leaseReq("v.work", "billing", "w1", protocol.LeaseTake, 1000)))

	time.Sleep(time.Until(expiry)) // the leases' own end
	lg, err = protocol.ParseListGroupsResponse(attacker.ok(protocol.AppendListGroupsRequest(nil, attacker.id(), "a.0")))
	if err != nil || lg.Count != 0 {
		t.Fatalf("expired leases of a.0: %d listed, %v", lg.Count, err)
	}
	if n, msg := take(); n != quota {
		t.Fatalf("after the leases expired: %d taken before %q, want %d", n, msg, quota)
	}
}
