package broker_test

import (
	"strings"
	"testing"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

func (c *rawConn) commit(req protocol.CommitRequest) response {
	c.tb.Helper()
	return c.roundTrip(protocol.AppendCommitRequest(nil, c.id(), req))
}

func (c *rawConn) groupOffset(req []byte) protocol.GroupOffsetResponse {
	c.tb.Helper()
	r, err := protocol.ParseGroupOffsetResponse(c.ok(req))
	if err != nil {
		c.tb.Fatal(err)
	}
	return r
}

func commitReq(topic, group, member string, off int64) protocol.CommitRequest {
	return protocol.CommitRequest{Offset: off, Topic: []byte(topic), Group: []byte(group), Member: []byte(member)}
}

func leaseReq(topic, group, member string, action protocol.LeaseAction, ms uint32) protocol.LeaseRequest {
	return protocol.LeaseRequest{Action: action, TTLMs: ms, Topic: []byte(topic), Group: []byte(group), Member: []byte(member)}
}

// TestGroupOps runs every group op over the binary port, with each fsync
// policy, commits pipelined behind produces included.
func TestGroupOps(t *testing.T) {
	for _, p := range []storage.FsyncPolicy{storage.FsyncNever, storage.FsyncInterval, storage.FsyncAlways} {
		t.Run(p.String(), func(t *testing.T) {
			s := brokertest.Start(t, 2, withFsync(p))
			c := dialRaw(t, s.Addr)
			c.produce("work", protocol.ProduceCreateTopic, "1", "2", "3", "4", "5")

			f := c.groupOffset(protocol.AppendGroupRequest(nil, protocol.OpFetchOffset, c.id(), "work", "g1"))
			if f.Committed != protocol.NoOffset || f.Start != 0 || f.Next != 5 || f.LeaseMs != 0 {
				t.Fatalf("new group: %+v", f)
			}
			l := c.groupOffset(protocol.AppendLeaseRequest(nil, c.id(), leaseReq("work", "g1", "m1", protocol.LeaseTake, 0)))
			if l.LeaseMs != protocol.DefaultLeaseMs || l.Start != 0 {
				t.Fatalf("lease: %+v", l)
			}
			// A produce and a commit pipelined: answered in order.
			c.write(protocol.AppendProduceRequest(nil, c.id(), "work", 0, batchOf("6")))
			c.write(protocol.AppendCommitRequest(nil, c.id(), commitReq("work", "g1", "m1", 6)))
			if r := c.read(); r.Op != protocol.OpProduce || r.Code != protocol.CodeOK {
				t.Fatalf("produce: %+v %s", r.ResponseHeader, r.errMsg())
			}
			if r := c.read(); r.Op != protocol.OpCommitOffset || r.Code != protocol.CodeOK {
				t.Fatalf("commit: %+v %s", r.ResponseHeader, r.errMsg())
			}
			// A second member: busy, at once, for its lease and its commit.
			c2 := dialRaw(t, s.Addr)
			msg := c2.fail(protocol.AppendLeaseRequest(nil, c2.id(), leaseReq("work", "g1", "m2", protocol.LeaseTake, 0)), protocol.CodeGroupBusy)
			if !strings.Contains(msg, "lease") {
				t.Errorf("busy message %q", msg)
			}
			c2.fail(protocol.AppendCommitRequest(nil, c2.id(), commitReq("work", "g1", "m2", 1)), protocol.CodeGroupBusy)
			c2.fail(protocol.AppendGroupRequest(nil, protocol.OpDeleteGroup, c2.id(), "work", "g1"), protocol.CodeGroupBusy)
			// Compare-and-set.
			cas := commitReq("work", "g1", "m1", 2)
			cas.Flags, cas.Expect = protocol.CommitCompare, 5
			if r := c.commit(cas); r.Code != protocol.CodeCommitConflict {
				t.Fatalf("stale compare: %v %s", r.Code, r.errMsg())
			}
			cas.Expect = 6
			if r := c.commit(cas); r.Code != protocol.CodeOK {
				t.Fatalf("compare: %v %s", r.Code, r.errMsg())
			}
			if r := c.commit(commitReq("work", "g1", "m1", 99)); r.Code != protocol.CodeOffsetOutOfRange {
				t.Fatalf("past the end: %v %s", r.Code, r.errMsg())
			}
			if r := c.commit(commitReq("nope", "g1", "m1", 0)); r.Code != protocol.CodeTopicNotFound {
				t.Fatalf("no topic: %v %s", r.Code, r.errMsg())
			}
			lg, err := protocol.ParseListGroupsResponse(c.ok(protocol.AppendListGroupsRequest(nil, c.id(), "work")))
			if err != nil || lg.Count != 1 || lg.Next != 6 {
				t.Fatalf("list: %+v, %v", lg, err)
			}
			for e := range lg.Groups() {
				if string(e.Group) != "g1" || e.Committed != 2 || e.LeaseMs == 0 {
					t.Fatalf("entry %+v", e)
				}
			}
			rel := c.groupOffset(protocol.AppendLeaseRequest(nil, c.id(), leaseReq("work", "g1", "m1", protocol.LeaseRelease, 0)))
			if rel.LeaseMs != 0 || rel.Committed != 2 {
				t.Fatalf("release: %+v", rel)
			}
			c2.groupOffset(protocol.AppendLeaseRequest(nil, c2.id(), leaseReq("work", "g1", "m2", protocol.LeaseTake, 500)))
			c2.groupOffset(protocol.AppendLeaseRequest(nil, c2.id(), leaseReq("work", "g1", "m2", protocol.LeaseRelease, 0)))
			c.ok(protocol.AppendGroupRequest(nil, protocol.OpDeleteGroup, c.id(), "work", "g1"))
			if f := c.groupOffset(protocol.AppendGroupRequest(nil, protocol.OpFetchOffset, c.id(), "work", "g1")); f.Committed != protocol.NoOffset {
				t.Fatalf("after delete: %+v", f)
			}
			c.ping() // the connection is still usable after every error above
		})
	}
}

// TestGroupBadRequests: a bad group name is code 14, a cut-short request
// code 4, after which the connection closes.
func TestGroupBadRequests(t *testing.T) {
	s := brokertest.Start(t, 1)
	c := dialRaw(t, s.Addr)
	c.produce("work", protocol.ProduceCreateTopic, "1")
	c.fail(protocol.AppendGroupRequest(nil, protocol.OpFetchOffset, c.id(), "work", "../etc"), protocol.CodeInvalidArgument)
	c.fail(protocol.AppendLeaseRequest(nil, c.id(), leaseReq("work", "g", "", protocol.LeaseTake, 0)), protocol.CodeInvalidArgument)
	c.fail(protocol.AppendLeaseRequest(nil, c.id(), leaseReq("work", "g", "m", protocol.LeaseTake, protocol.MaxLeaseMs+1)), protocol.CodeInvalidArgument)
	req := protocol.AppendGroupRequest(nil, protocol.OpFetchOffset, c.id(), "work", "g")
	req = req[:len(req)-1]
	req[0]-- // a consistent length: the payload is cut inside the group
	c.fail(req, protocol.CodeMalformedRequest)
	c.expectClosed()
}

// TestGroupAuth: every group op needs the consume right on its topic.
func TestGroupAuth(t *testing.T) {
	s := startAuth(t)
	admin := dialRaw(t, s.Addr)
	admin.hello(tokA)
	admin.ok(protocol.AppendCreateTopicRequest(nil, admin.id(), "orders.eu"))
	reqs := func(c *rawConn) [][]byte {
		return [][]byte{
			protocol.AppendCommitRequest(nil, c.id(), commitReq("orders.eu", "g", "", 0)),
			protocol.AppendGroupRequest(nil, protocol.OpFetchOffset, c.id(), "orders.eu", "g"),
			protocol.AppendLeaseRequest(nil, c.id(), leaseReq("orders.eu", "g", "m", protocol.LeaseRelease, 0)),
			protocol.AppendListGroupsRequest(nil, c.id(), "orders.eu"),
			protocol.AppendGroupRequest(nil, protocol.OpDeleteGroup, c.id(), "orders.eu", "g"),
		}
	}
	logs := dialRaw(t, s.Addr)
	logs.hello(tokLogs)
	for _, r := range reqs(logs) {
		if msg := logs.fail(r, protocol.CodeForbidden); !strings.Contains(msg, "consume") {
			t.Errorf("forbidden message %q", msg)
		}
	}
	cons := dialRaw(t, s.Addr)
	cons.hello(tokC)
	for _, r := range reqs(cons) {
		cons.ok(r)
	}
	none := dialRaw(t, s.Addr)
	for _, r := range reqs(none) {
		none.fail(r, protocol.CodeUnauthenticated)
	}
}
