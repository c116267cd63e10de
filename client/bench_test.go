package client_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// The matrix every benchmark here runs: message size x messages per request.
var (
	benchSizes   = []int{100, 1024}
	benchBatches = []int{1, 100, 1000}
)

// perMsg reports msgs/s and allocs/msg for a benchmark that handled msgs
// messages per op, mallocs being the heap allocations of its loop. The
// server runs in the same process, so its allocations are counted too.
func perMsg(b *testing.B, msgs int, mallocs uint64) {
	total := float64(b.N) * float64(msgs)
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(total/s, "msgs/s")
	}
	b.ReportMetric(float64(mallocs)/total, "allocs/msg")
}

func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

func benchMessages(size, n int) [][]byte {
	msgs := make([][]byte, n)
	for i := range msgs {
		msgs[i] = make([]byte, size)
		for j := range msgs[i] {
			msgs[i][j] = byte('a' + (i+j)%26)
		}
	}
	return msgs
}

// BenchmarkProduce: Client.Produce of one batch per op, one round trip.
func BenchmarkProduce(b *testing.B) {
	srv := brokertest.Start(b, 1)
	c := dial(b, srv.Addr)
	ctx := context.Background()
	for _, size := range benchSizes {
		for _, batch := range benchBatches {
			b.Run(fmt.Sprintf("size=%d/batch=%d", size, batch), func(b *testing.B) {
				msgs := benchMessages(size, batch)
				topic := fmt.Sprintf("produce-%d-%d", size, batch)
				b.SetBytes(int64(size * batch))
				b.ReportAllocs()
				m0 := mallocs()
				for b.Loop() {
					if _, err := c.Produce(ctx, topic, msgs...); err != nil {
						b.Fatal(err)
					}
				}
				perMsg(b, batch, mallocs()-m0)
			})
		}
	}
}

// BenchmarkProduceRaw is the baseline: the same produce frames written and
// answered over a plain connection, built once.
func BenchmarkProduceRaw(b *testing.B) {
	srv := brokertest.Start(b, 1)
	nc, err := net.Dial("tcp", srv.Addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	resp := make([]byte, 64)
	for _, size := range benchSizes {
		for _, batch := range benchBatches {
			b.Run(fmt.Sprintf("size=%d/batch=%d", size, batch), func(b *testing.B) {
				topic := fmt.Sprintf("raw-%d-%d", size, batch)
				frame := protocol.AppendProduceRequest(nil, 1, topic, protocol.ProduceCreateTopic,
					protocol.AppendBatch(nil, benchMessages(size, batch)...))
				b.SetBytes(int64(size * batch))
				b.ReportAllocs()
				m0 := mallocs()
				for b.Loop() {
					if _, err := nc.Write(frame); err != nil {
						b.Fatal(err)
					}
					n := readRawInto(b, nc, resp)
					if protocol.Code(binary.LittleEndian.Uint16(resp[6:])) != protocol.CodeOK || n != protocol.HeaderSize+12 {
						b.Fatalf("produce answered %x", resp[:n])
					}
				}
				perMsg(b, batch, mallocs()-m0)
			})
		}
	}
}

// readRawInto reads one frame into buf, growing it if needed, and returns
// its size.
func readRawInto(b *testing.B, nc net.Conn, buf []byte) int {
	if _, err := io.ReadFull(nc, buf[:protocol.FrameLengthSize]); err != nil {
		b.Fatal(err)
	}
	n := protocol.FrameLengthSize + int(binary.LittleEndian.Uint32(buf))
	if n > len(buf) {
		b.Fatalf("frame of %d bytes", n)
	}
	if _, err := io.ReadFull(nc, buf[protocol.FrameLengthSize:n]); err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkConsume: Client.ConsumeInto of batch messages per op into a
// reused buffer, from a topic produced in batches of the same size, so
// each request reads one stored batch.
func BenchmarkConsume(b *testing.B) {
	srv := brokertest.Start(b, 1)
	c := dial(b, srv.Addr)
	ctx := context.Background()
	for _, size := range benchSizes {
		for _, batch := range benchBatches {
			b.Run(fmt.Sprintf("size=%d/batch=%d", size, batch), func(b *testing.B) {
				topic := fmt.Sprintf("consume-%d-%d", size, batch)
				fill := max(16*batch, 1024) // messages, a multiple of batch
				msgs := benchMessages(size, batch)
				if info, err := c.TopicInfo(ctx, topic); err != nil || info.Next < int64(fill) {
					for i := 0; i < fill; i += batch {
						if _, err := c.Produce(ctx, topic, msgs...); err != nil {
							b.Fatal(err)
						}
					}
				}
				buf := make([]client.Message, 0, batch)
				var off int64
				b.SetBytes(int64(size * batch))
				b.ReportAllocs()
				m0 := mallocs()
				for b.Loop() {
					var err error
					buf, _, err = c.ConsumeInto(ctx, buf[:0], topic, off, batch)
					if err != nil || len(buf) != batch {
						b.Fatalf("ConsumeInto at %d: %d messages, %v", off, len(buf), err)
					}
					if off += int64(batch); off >= int64(fill) {
						off = 0
					}
				}
				perMsg(b, batch, mallocs()-m0)
			})
		}
	}
}

// BenchmarkProducerSend: single-message Producer.Send, batched by the
// Producer (default batch size and linger), flushed at the end.
func BenchmarkProducerSend(b *testing.B) {
	srv := brokertest.Start(b, 1)
	c := dial(b, srv.Addr)
	ctx := context.Background()
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			p := c.NewProducer(fmt.Sprintf("producer-%d", size))
			defer p.Close()
			msg := benchMessages(size, 1)[0]
			b.SetBytes(int64(size))
			b.ReportAllocs()
			m0 := mallocs()
			var last *client.Future
			for b.Loop() {
				f, err := p.Send(ctx, msg)
				if err != nil {
					b.Fatal(err)
				}
				last = f
			}
			if err := p.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			if _, err := last.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			perMsg(b, 1, mallocs()-m0)
		})
	}
}

// BenchmarkPing: Client.Ping per op, one round trip through the client and
// the broker with no storage work: ns/op is the protocol's own latency, to
// set beside a plain TCP ping-pong (haraqa-bench -ceiling measures one).
func BenchmarkPing(b *testing.B) {
	srv := brokertest.Start(b, 1)
	c, err := client.Dial(context.Background(), srv.Addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for b.Loop() {
		if err := c.Ping(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
