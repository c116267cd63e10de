package broker_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// TestProduceThenAdmin pipelines, with fsync always, produces handed to
// storage's group commit followed by requests that must see them: a
// truncate, a delete, a produce to the deleted topic, a re-creating
// produce. Each is answered in order with the outcome the sequence implies.
func TestProduceThenAdmin(t *testing.T) {
	s := brokertest.Start(t, 2, withFsync(storage.FsyncAlways))
	c := dialRaw(t, s.Addr)
	type want struct {
		op   protocol.Op
		code protocol.Code
		n    int64 // produce: base offset; truncate: oldest
	}
	var req []byte
	var wants []want
	add := func(w want, frame []byte) { req = append(req, frame...); wants = append(wants, w) }
	for i := range 20 {
		add(want{op: protocol.OpProduce, n: int64(i)},
			protocol.AppendProduceRequest(nil, c.id(), "t", protocol.ProduceCreateTopic, batchOf("m")))
	}
	add(want{op: protocol.OpTruncate, n: 15}, protocol.AppendTruncateRequest(nil, c.id(), "t", protocol.TruncateByOffset, 15))
	add(want{op: protocol.OpProduce, n: 20}, protocol.AppendProduceRequest(nil, c.id(), "t", 0, batchOf("m")))
	add(want{op: protocol.OpDeleteTopic}, protocol.AppendDeleteTopicRequest(nil, c.id(), "t"))
	add(want{op: protocol.OpProduce, code: protocol.CodeTopicNotFound}, protocol.AppendProduceRequest(nil, c.id(), "t", 0, batchOf("m")))
	add(want{op: protocol.OpProduce, n: 0}, protocol.AppendProduceRequest(nil, c.id(), "t", protocol.ProduceCreateTopic, batchOf("m")))
	add(want{op: protocol.OpProduce, n: 1}, protocol.AppendProduceRequest(nil, c.id(), "t", 0, batchOf("m")))
	c.write(req)
	for i, w := range wants {
		r := c.read()
		if r.Op != w.op || r.Code != w.code {
			t.Fatalf("response %d: op %v code %v (%s), want op %v code %v", i, r.Op, r.Code, r.errMsg(), w.op, w.code)
		}
		if w.code != protocol.CodeOK {
			continue
		}
		switch w.op {
		case protocol.OpProduce:
			if pr, err := protocol.ParseProduceResponse(r.Payload); err != nil || pr.BaseOffset != w.n {
				t.Fatalf("response %d: produce %+v %v, want base %d", i, pr, err, w.n)
			}
		case protocol.OpTruncate:
			if tr, err := protocol.ParseTruncateResponse(r.Payload); err != nil || tr.OldestOffset != w.n {
				t.Fatalf("response %d: truncate %+v %v, want oldest %d", i, tr, err, w.n)
			}
		}
	}
}

// TestProduceManyConnsFsync has many connections pipelining produces to
// one topic with fsync always: every produce is acknowledged once, the
// offsets acknowledged are dense, and commits are shared.
func TestProduceManyConnsFsync(t *testing.T) {
	s := brokertest.Start(t, 1, withFsync(storage.FsyncAlways))
	setup := dialRaw(t, s.Addr)
	setup.ok(protocol.AppendCreateTopicRequest(nil, setup.id(), "t"))
	const conns, each = 8, 50
	bases := make(chan int64, conns*each)
	var wg sync.WaitGroup
	for range conns {
		c := dialRaw(t, s.Addr)
		wg.Go(func() {
			var req []byte
			for range each {
				req = protocol.AppendProduceRequest(req, c.id(), "t", 0, batchOf("m"))
			}
			c.write(req)
			for range each {
				r := c.read()
				pr, err := protocol.ParseProduceResponse(r.Payload)
				if r.Code != protocol.CodeOK || err != nil {
					t.Errorf("produce: code %v %s %v", r.Code, r.errMsg(), err)
					return
				}
				bases <- pr.BaseOffset
			}
		})
	}
	wg.Wait()
	close(bases)
	seen := make(map[int64]bool)
	for b := range bases {
		if seen[b] {
			t.Fatalf("offset %d acknowledged twice", b)
		}
		seen[b] = true
	}
	for off := range int64(conns * each) {
		if !seen[off] {
			t.Fatalf("offset %d acknowledged to nobody", off)
		}
	}
	if info := setup.info("t"); info.NextOffset != conns*each {
		t.Fatalf("next offset %d, want %d", info.NextOffset, conns*each)
	}
}

// TestProduceCreateFails: a produce that asks for its topic's creation,
// where the creation fails for a reason other than the topic existing, is
// answered with that failure (an internal error, with no server path), not
// with "topic not found".
func TestProduceCreateFails(t *testing.T) {
	for _, p := range []storage.FsyncPolicy{storage.FsyncNever, storage.FsyncAlways} {
		t.Run(p.String(), func(t *testing.T) {
			s := brokertest.Start(t, 1, withFsync(p))
			// A file where the topic's directory would go: mkdir fails.
			if err := os.WriteFile(filepath.Join(s.Volumes[0], "topics", "blocked"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			c := dialRaw(t, s.Addr)
			c.write(protocol.AppendProduceRequest(nil, c.id(), "blocked", protocol.ProduceCreateTopic, batchOf("m")))
			r := c.read()
			if r.Code != protocol.CodeUnknown {
				t.Fatalf("produce with create: code %v (%s), want %v", r.Code, r.errMsg(), protocol.CodeUnknown)
			}
			if strings.Contains(r.errMsg(), s.Volumes[0]) {
				t.Fatalf("error names a server path: %s", r.errMsg())
			}
		})
	}
}
