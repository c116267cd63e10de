package broker_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// s2Batch is an s2 batch of n messages of 1 KiB that compress about 3:1.
func s2Batch(n int) []byte {
	msgs := make([][]byte, n)
	for i := range msgs {
		m := make([]byte, 1024)
		for j := range m {
			m[j] = byte((i*31 + j*j) % 11)
		}
		msgs[i] = m
	}
	return protocol.AppendBatchCodec(nil, protocol.CodecS2, msgs...)
}

// BenchmarkDecodeFairness: a victim's produce of one s2 batch of one
// message, one at a time, idle and while another client pipelines s2
// batches of 1 MiB from two connections as fast as it can (8 in flight
// each; without tokens each connection is a tenant of its own). It
// reports the victim's p50 and p99 latency: the decode workers are
// shared by tenant (storage/decode.go), so the victim's batch waits for
// the decodes running, not for the attacker's queue.
//
//	go test -run x -bench DecodeFairness -benchtime 2000x ./broker
func BenchmarkDecodeFairness(b *testing.B) {
	for _, flood := range []bool{false, true} {
		b.Run(fmt.Sprintf("flood=%v", flood), func(b *testing.B) {
			s := brokertest.Start(b, 1, func(o *storage.Options, c *broker.Config) { o.DecodeWorkers = 1 })
			victim := dialRaw(b, s.Addr)
			victim.ok(protocol.AppendCreateTopicRequest(nil, victim.id(), "victim"))
			victim.ok(protocol.AppendCreateTopicRequest(nil, victim.id(), "flood"))
			stop := make(chan struct{})
			var acked atomic.Int64
			var wg sync.WaitGroup
			if flood {
				frame := protocol.AppendProduceRequest(nil, 7, "flood", 0, s2Batch(1024))
				for range 2 {
					wg.Go(func() {
						if err := pipeline(s.Addr, frame, 8, stop, &acked); err != nil {
							b.Error(err)
						}
					})
				}
				for deadline := time.Now().Add(10 * time.Second); acked.Load() < 4 && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
			}
			batch := s2Batch(1)
			took := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				victim.ok(protocol.AppendProduceRequest(nil, victim.id(), "victim", 0, batch))
				took = append(took, time.Since(t0))
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-us")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-us")
			b.ReportMetric(float64(acked.Load()), "flood-batches")
		})
	}
}
