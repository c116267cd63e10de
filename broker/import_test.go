package broker_test

import (
	"testing"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
)

// stampedBatch is a batch as a server stores it: base offset and append
// time set.
func stampedBatch(base, at int64, msgs ...string) []byte {
	b := batchOf(msgs...)
	protocol.StampBatch(b, base, at)
	return b
}

// TestImport: an import creates the topic when asked, starts at the
// offset it names, keeps the batches' offsets and append times, goes on at
// the next offset only, and is refused once the topic has a produce;
// malformed and out-of-order imports get their codes.
func TestImport(t *testing.T) {
	s := brokertest.Start(t, 2)
	c := dialRaw(t, s.Addr)
	const at = 1_700_000_000_000_000_000
	a, b := stampedBatch(40, at, "a", "b"), stampedBatch(42, at+5, "c")
	c.fail(protocol.AppendImportRequest(nil, c.id(), "moved", 0, 41, a), protocol.CodeTopicNotFound)
	r, err := protocol.ParseImportResponse(c.ok(protocol.AppendImportRequest(nil, c.id(), "moved", protocol.ImportCreateTopic, 41, a)))
	if err != nil || r.OldestOffset != 41 || r.NextOffset != 42 {
		t.Fatalf("first import: %+v %v", r, err)
	}
	c.fail(protocol.AppendImportRequest(nil, c.id(), "moved", 0, 43, stampedBatch(43, at+5, "d")), protocol.CodeOffsetMismatch)
	c.fail(protocol.AppendImportRequest(nil, c.id(), "moved", 0, 42, stampedBatch(42, at-1, "d")), protocol.CodeInvalidArgument)
	c.fail(protocol.AppendImportRequest(nil, c.id(), "moved", 0, 42, stampedBatch(44, at+5, "d")), protocol.CodeInvalidArgument)
	bad := stampedBatch(42, at+5, "d")
	bad[len(bad)-1] ^= 1
	c.fail(protocol.AppendImportRequest(nil, c.id(), "moved", 0, 42, bad), protocol.CodeBadBatch)
	if r, _ = protocol.ParseImportResponse(c.ok(protocol.AppendImportRequest(nil, c.id(), "moved", 0, 42, b))); r.NextOffset != 43 {
		t.Fatalf("second import: %+v", r)
	}
	off, err := protocol.ParseOffsetAtResponse(c.ok(protocol.AppendOffsetAtRequest(nil, c.id(), "moved", at+1)))
	if err != nil || off.Offset != 42 {
		t.Fatalf("offset at: %+v %v, want 42", off, err)
	}
	cr, err := protocol.ParseConsumeResponse(c.ok(protocol.AppendConsumeRequest(nil, c.id(), "moved", 41, 0, 0, 0)))
	if err != nil || cr.StartOffset != 41 || string(cr.Batches) != string(a)+string(b) {
		t.Fatalf("consume: start %d, %x %v", cr.StartOffset, cr.Batches, err)
	}
	if pr := c.produce("moved", 0, "e"); pr.BaseOffset != 43 {
		t.Fatalf("produce after the import: %+v", pr)
	}
	c.fail(protocol.AppendImportRequest(nil, c.id(), "moved", 0, 44, stampedBatch(44, at+9, "f")), protocol.CodeImportRefused)
	c.produce("plain", protocol.ProduceCreateTopic, "x")
	c.fail(protocol.AppendImportRequest(nil, c.id(), "plain", 0, 1, nil), protocol.CodeImportRefused)
}

// TestImportNeedsAdmin: import is an admin request.
func TestImportNeedsAdmin(t *testing.T) {
	s := startAuth(t)
	c := dialRaw(t, s.Addr)
	c.hello(tokPC)
	c.fail(protocol.AppendImportRequest(nil, c.id(), "orders.eu", protocol.ImportCreateTopic, 0, stampedBatch(0, 1, "x")), protocol.CodeForbidden)
	c.hello(tokA)
	c.ok(protocol.AppendImportRequest(nil, c.id(), "orders.eu", protocol.ImportCreateTopic, 0, stampedBatch(0, 1, "x")))
}
