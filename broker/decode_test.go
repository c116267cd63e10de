package broker_test

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// zeroBomb is a zstd batch of one message of zeros: a few kilobytes sent,
// rawSize bytes to decode.
func zeroBomb(rawSize int) []byte {
	msg := make([]byte, rawSize-8)
	raw := protocol.AppendMessage(nil, msg)
	return protocol.AppendBatchRaw(nil, protocol.CodecZstd, 1, raw)
}

// TestDecodeOffLoop: clients that pipeline small zstd batches
// each declaring (and holding) 64 MiB of zeros keep the decode worker
// busy (and its queue full), yet on the same event loop another client's
// pings and uncompressed produces are answered within a bound of their
// idle latency: the loop never decodes and never waits for a decode
// worker.
func TestDecodeOffLoop(t *testing.T) {
	s := brokertest.Start(t, 1, func(o *storage.Options, c *broker.Config) {
		c.EventLoops = 1 // attackers and victim share the loop
		o.DecodeWorkers = 1
	})
	victim := dialRaw(t, s.Addr)
	victim.ok(protocol.AppendCreateTopicRequest(nil, victim.id(), "victim"))
	victim.ok(protocol.AppendCreateTopicRequest(nil, victim.id(), "bomb"))
	idle := victimP99(t, victim, time.Second, nil)

	frame := protocol.AppendProduceRequest(nil, 7, "bomb", 0, zeroBomb(64<<20-64))
	const attackers = 2
	stop := make(chan struct{})
	var acked atomic.Int64
	errs := make(chan error, attackers)
	var wg sync.WaitGroup
	for range attackers {
		wg.Go(func() { errs <- pipeline(s.Addr, frame, 8, stop, &acked) })
	}
	deadline := time.Now().Add(30 * time.Second)
	for acked.Load() < attackers && time.Now().Before(deadline) {
		victim.ping()
	}
	from := acked.Load()
	under := victimP99(t, victim, 2*time.Second, func() bool { return acked.Load()-from >= 4 || time.Now().After(deadline) })
	during := acked.Load() - from
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("attacker: %v", err)
		}
	}
	t.Logf("victim p99: idle %v, under attack %v (ping), %v (produce); %d bombs stored meanwhile, decode waits %d",
		idle[0], under[0], under[1], during, s.Store.Stats().DecodeWaits)
	if during < 2 {
		t.Fatalf("only %d bombs stored while the victim was measured: the attack did not run", during)
	}
	// Generous, for a loaded machine and the race detector: the loop
	// decoding the bombs itself held each victim request for 250 ms and
	// more (p99; 0.4 ms idle).
	bound := max(100*time.Millisecond, 10*max(idle[0], idle[1]))
	if under[0] > bound || under[1] > bound {
		t.Fatalf("victim p99 under attack: ping %v, produce %v; idle %v, %v; bound %v", under[0], under[1], idle[0], idle[1], bound)
	}
	if s.Store.Stats().DecodeWaits == 0 {
		t.Fatal("no decode ever waited for the worker: the attack did not fill it")
	}
}

// victimP99 alternates pings and one-message produces to topic victim on
// c for at least d (and until more says enough, if set) and returns the
// p99 of each.
func victimP99(t *testing.T, c *rawConn, d time.Duration, more func() bool) [2]time.Duration {
	t.Helper()
	var pings, produces []time.Duration
	batch := protocol.AppendBatch(nil, []byte("victim"))
	start := time.Now()
	for time.Since(start) < d || more != nil && !more() {
		t0 := time.Now()
		c.ping()
		t1 := time.Now()
		c.ok(protocol.AppendProduceRequest(nil, c.id(), "victim", 0, batch))
		pings, produces = append(pings, t1.Sub(t0)), append(produces, time.Since(t1))
	}
	return [2]time.Duration{p99(pings), p99(produces)}
}

func p99(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)*99/100]
}

// pipeline sends frame on a new connection, keeping inFlight of them
// unanswered, until stop is closed, then reads the answers still due. Every
// answer must be a success; each counts in acked.
func pipeline(addr string, frame []byte, inFlight int, stop <-chan struct{}, acked *atomic.Int64) error {
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	sent, answered := 0, 0
	for {
		select {
		case <-stop:
			if sent == answered {
				return nil
			}
		default:
			for sent-answered < inFlight {
				c.SetWriteDeadline(time.Now().Add(ioTimeout))
				if _, err := c.Write(frame); err != nil {
					return err
				}
				sent++
			}
		}
		c.SetReadDeadline(time.Now().Add(time.Minute))
		r, err := readResponse(c)
		if err != nil {
			return err
		}
		if r.Code != protocol.CodeOK {
			return fmt.Errorf("produce: code %v: %s", r.Code, r.errMsg())
		}
		answered++
		acked.Add(1)
	}
}

// TestDecodeOverBudget: a compressed batch that declares more
// decoded bytes than the memory budget is refused on the loop before any
// decoding, as a bad batch naming -max-buffered-bytes; the connection
// stays open and one within the budget is stored.
func TestDecodeOverBudget(t *testing.T) {
	s := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) { c.MaxBufferedBytes = 8 << 20 })
	c := dialRaw(t, s.Addr)
	c.ok(protocol.AppendCreateTopicRequest(nil, c.id(), "t"))
	msg := c.fail(protocol.AppendProduceRequest(nil, c.id(), "t", 0, zeroBomb(16<<20)), protocol.CodeBadBatch)
	if !strings.Contains(msg, "-max-buffered-bytes") {
		t.Fatalf("refusal %q does not name -max-buffered-bytes", msg)
	}
	c.ping()
	p := c.ok(protocol.AppendProduceRequest(nil, c.id(), "t", 0, zeroBomb(1<<20)))
	if pr, err := protocol.ParseProduceResponse(p); err != nil || pr.BaseOffset != 0 || pr.Count != 1 {
		t.Fatalf("produce within the budget: %+v %v", pr, err)
	}
}

// TestCompressedProducesInOrder: one connection pipelines uncompressed,
// s2 and zstd batches (valid and not) to one topic, with fsync off and on:
// the compressed ones are checked off the loop, yet every answer comes in
// request order, the valid batches get consecutive offsets in request
// order and the invalid ones are refused.
func TestCompressedProducesInOrder(t *testing.T) {
	for _, fsync := range []storage.FsyncPolicy{storage.FsyncNever, storage.FsyncAlways} {
		t.Run(fsync.String(), func(t *testing.T) {
			s := brokertest.Start(t, 1, func(o *storage.Options, _ *broker.Config) { o.Fsync = fsync })
			c := dialRaw(t, s.Addr)
			raw := protocol.AppendMessage(protocol.AppendMessage(nil, []byte("a")), []byte("bc"))
			batches := [][]byte{
				protocol.AppendBatch(nil, []byte("a"), []byte("bc")),
				protocol.AppendBatchRaw(nil, protocol.CodecS2, 2, raw),
				protocol.AppendBatchRaw(nil, protocol.CodecZstd, 2, raw),
				protocol.AppendBatchBody(nil, protocol.CodecZstd, 2, len(raw), []byte("not zstd at all")),
			}
			const n = 60
			var req []byte
			ids := make([]uint32, n)
			for i := range n {
				ids[i] = c.id()
				req = protocol.AppendProduceRequest(req, ids[i], "t", protocol.ProduceCreateTopic, batches[i%len(batches)])
			}
			c.write(req)
			next := int64(0)
			for i := range n {
				r := c.read()
				if r.CorrID != ids[i] {
					t.Fatalf("answer %d: corr id %d, want %d", i, r.CorrID, ids[i])
				}
				if i%len(batches) == 3 {
					if r.Code != protocol.CodeBadBatch {
						t.Fatalf("answer %d (garbage labelled zstd): code %v, want %v", i, r.Code, protocol.CodeBadBatch)
					}
					continue
				}
				pr, err := protocol.ParseProduceResponse(r.Payload)
				if r.Code != protocol.CodeOK || err != nil || pr.BaseOffset != next || pr.Count != 2 {
					t.Fatalf("answer %d: code %v %+v %v, want base %d count 2", i, r.Code, pr, err, next)
				}
				next += 2
			}
			if info := c.info("t"); info.NextOffset != next {
				t.Fatalf("next offset %d, want %d", info.NextOffset, next)
			}
		})
	}
}
