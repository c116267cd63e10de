package broker_test

import (
	"net"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

type observation struct {
	op     protocol.Op
	waited bool
	took   time.Duration
}

// TestObserveRequest checks that every answered request is observed once,
// on and off the event loop, and that a long poll is marked as waited.
func TestObserveRequest(t *testing.T) {
	for _, fsync := range []storage.FsyncPolicy{storage.FsyncNever, storage.FsyncAlways} {
		t.Run(fsync.String(), func(t *testing.T) {
			seenc := make(chan observation, 16)
			s := brokertest.Start(t, 1, func(so *storage.Options, bc *broker.Config) {
				so.Fsync = fsync
				bc.ObserveRequest = func(op protocol.Op, waited bool, took time.Duration) {
					seenc <- observation{op, waited, took}
				}
			})
			c, err := net.Dial("tcp", s.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var req []byte
			req = protocol.AppendPingRequest(req, 1)
			req = protocol.AppendProduceRequest(req, 2, "t", protocol.ProduceCreateTopic, protocol.AppendBatch(nil, []byte("a")))
			req = protocol.AppendConsumeRequest(req, 3, "t", 0, 10, 0, 0)
			req = protocol.AppendConsumeRequest(req, 4, "missing", 0, 10, 0, 0)
			if _, err := c.Write(req); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 4; i++ {
				readFrame(t, c)
			}
			// Sent once the others are answered, so that it parks at once.
			if _, err := c.Write(protocol.AppendConsumeRequest(nil, 5, "t", 1, 10, 0, 50)); err != nil {
				t.Fatal(err)
			}
			readFrame(t, c)
			// A request is observed right after its response is written, so
			// the last observation may trail the last response a little.
			var seen []observation
			deadline := time.After(5 * time.Second)
			for len(seen) < 5 {
				select {
				case o := <-seenc:
					seen = append(seen, o)
				case <-deadline:
					t.Fatalf("observed %d requests, want 5: %+v", len(seen), seen)
				}
			}
			select {
			case o := <-seenc:
				t.Fatalf("observed a sixth request: %+v", o)
			default:
			}
			want := []observation{
				{op: protocol.OpPing}, {op: protocol.OpProduce}, {op: protocol.OpConsume},
				{op: protocol.OpConsume}, {op: protocol.OpConsume, waited: true},
			}
			if len(seen) != len(want) {
				t.Fatalf("observed %d requests, want %d: %+v", len(seen), len(want), seen)
			}
			for i, w := range want {
				if seen[i].op != w.op || seen[i].waited != w.waited || seen[i].took < 0 {
					t.Errorf("observation %d = %+v, want op %v waited %v", i, seen[i], w.op, w.waited)
				}
			}
			if last := seen[4].took; last < 50*time.Millisecond {
				t.Errorf("long poll observed as %v, want at least its 50 ms wait", last)
			}
		})
	}
}
