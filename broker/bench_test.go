package broker_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
)

// Benchmarks of the real server over loopback, driven by raw frames, each
// beside a baseline that moves the same bytes the plainest way. The two run
// interleaved in one loop (as storage's BenchmarkAppend does), so both see
// the same page cache and the same neighbours on a shared machine. Metrics:
// haraqa-MB/s and baseline-MB/s (each over its own time), ratio =
// baseline time / haraqa time (1 = as fast as the baseline). ns/op and the
// standard MB/s cover both halves of an iteration.

var benchMatrix = []struct{ size, batch int }{
	{100, 1}, {100, 100}, {100, 1000},
	{1024, 1}, {1024, 100}, {1024, 1000},
}

func benchMessages(size, batch int) [][]byte {
	m := make([][]byte, batch)
	for i := range m {
		m[i] = make([]byte, size)
		for j := range m[i] {
			m[i][j] = byte(i + j)
		}
	}
	return m
}

// readFrameInto reads one length-prefixed frame into buf, growing it.
func readFrameInto(r io.Reader, buf []byte) ([]byte, error) {
	if cap(buf) < protocol.FrameLengthSize {
		buf = make([]byte, 0, 64)
	}
	buf = buf[:protocol.FrameLengthSize]
	if _, err := io.ReadFull(r, buf); err != nil {
		return buf, err
	}
	n := protocol.FrameLengthSize + int(binary.LittleEndian.Uint32(buf))
	if cap(buf) < n {
		buf = append(buf[:cap(buf)], make([]byte, n-cap(buf))...)
	}
	buf = buf[:n]
	_, err := io.ReadFull(r, buf[protocol.FrameLengthSize:])
	return buf, err
}

func benchDial(b *testing.B, addr string) net.Conn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

func reportPair(b *testing.B, bytesPerOp int, haraqa, baseline time.Duration) {
	total := float64(b.N) * float64(bytesPerOp) / 1e6
	b.ReportMetric(total/haraqa.Seconds(), "haraqa-MB/s")
	b.ReportMetric(total/baseline.Seconds(), "baseline-MB/s")
	b.ReportMetric(baseline.Seconds()/haraqa.Seconds(), "ratio")
}

// BenchmarkProduce: one produce frame per iteration, answered before the
// next. Baseline: the same frame bytes over a plain loopback TCP socket to
// a goroutine that appends each frame to a plain file and acks it.
func BenchmarkProduce(b *testing.B) {
	s := brokertest.Start(b, 1)
	for _, m := range benchMatrix {
		b.Run(fmt.Sprintf("size=%d/batch=%d", m.size, m.batch), func(b *testing.B) {
			topic := fmt.Sprintf("produce-%d-%d", m.size, m.batch)
			frame := protocol.AppendProduceRequest(nil, 1, topic, protocol.ProduceCreateTopic,
				protocol.AppendBatch(nil, benchMessages(m.size, m.batch)...))
			hc := benchDial(b, s.Addr)
			rc := benchDial(b, appendSink(b))
			buf := make([]byte, 0, 64)
			var haraqaTime, baseTime time.Duration
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				t0 := time.Now()
				if _, err := hc.Write(frame); err != nil {
					b.Fatal(err)
				}
				var err error
				if buf, err = readFrameInto(hc, buf); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if code := binary.LittleEndian.Uint16(buf[6:]); code != 0 {
					b.Fatalf("produce: code %v", protocol.Code(code))
				}
				if _, err := rc.Write(frame); err != nil {
					b.Fatal(err)
				}
				if buf, err = readFrameInto(rc, buf); err != nil {
					b.Fatal(err)
				}
				baseTime += time.Since(t1)
				haraqaTime += t1.Sub(t0)
			}
			reportPair(b, len(frame), haraqaTime, baseTime)
		})
	}
}

// appendSink listens on loopback; for each frame received it appends the
// frame to a plain file and answers with a 24-byte ack, the size of a
// produce response.
func appendSink(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "raw.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	b.Cleanup(func() { l.Close(); <-done; f.Close() })
	go func() {
		defer close(done)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		ack := protocol.AppendProduceResponse(nil, 1, 0, 1)
		buf := make([]byte, 0, 1<<20)
		for {
			if buf, err = readFrameInto(c, buf); err != nil {
				return
			}
			if _, err := f.Write(buf); err != nil {
				return
			}
			if _, err := c.Write(ack); err != nil {
				return
			}
		}
	}()
	return l.Addr().String()
}

// BenchmarkConsume: one consume per iteration of a topic holding about
// 1 MiB of batches (at least two), all of it in one response. Baseline: a
// plain file of the response's size sent with sendfile(2) over loopback
// for each request.
func BenchmarkConsume(b *testing.B) {
	s := brokertest.Start(b, 1)
	for _, m := range benchMatrix {
		b.Run(fmt.Sprintf("size=%d/batch=%d", m.size, m.batch), func(b *testing.B) {
			topic := fmt.Sprintf("consume-%d-%d", m.size, m.batch)
			batch := protocol.AppendBatch(nil, benchMessages(m.size, m.batch)...)
			batches := max(2, (1<<20)/len(batch))
			hc := benchDial(b, s.Addr)
			fill(b, hc, topic, batch, batches)
			req := protocol.AppendConsumeRequest(nil, 2, topic, 0, 0, int32(batches*len(batch)), 0)
			respSize := protocol.ConsumeResponseHeaderSize + batches*len(batch)

			rc := benchDial(b, sendfileServer(b, respSize))
			buf := make([]byte, 0, respSize)
			var haraqaTime, baseTime time.Duration
			before := s.Broker.Stats()
			b.SetBytes(int64(respSize))
			b.ReportAllocs()
			for b.Loop() {
				t0 := time.Now()
				if _, err := hc.Write(req); err != nil {
					b.Fatal(err)
				}
				var err error
				if buf, err = readFrameInto(hc, buf); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if len(buf) != respSize {
					b.Fatalf("consume response of %d bytes, want %d (code %d)", len(buf), respSize, binary.LittleEndian.Uint16(buf[6:]))
				}
				if _, err := rc.Write(req); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(rc, buf[:respSize]); err != nil {
					b.Fatal(err)
				}
				baseTime += time.Since(t1)
				haraqaTime += t1.Sub(t0)
			}
			reportPair(b, respSize, haraqaTime, baseTime)
			after := s.Broker.Stats()
			if sent := after.ConsumedBytes - before.ConsumedBytes; sent > 0 {
				b.ReportMetric(100*float64(after.ZeroCopyBytes-before.ZeroCopyBytes)/float64(sent), "zerocopy-%")
			}
		})
	}
}

// fill produces n copies of batch to topic, pipelined.
func fill(b *testing.B, c net.Conn, topic string, batch []byte, n int) {
	const window = 256
	var req, buf []byte
	for done := 0; done < n; {
		k := min(window, n-done)
		req = req[:0]
		for range k {
			req = protocol.AppendProduceRequest(req, 1, topic, protocol.ProduceCreateTopic, batch)
		}
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		for range k {
			var err error
			if buf, err = readFrameInto(c, buf); err != nil {
				b.Fatal(err)
			}
			if code := binary.LittleEndian.Uint16(buf[6:]); code != 0 {
				b.Fatalf("fill: code %v", protocol.Code(code))
			}
		}
		done += k
	}
}

// sendfileServer listens on loopback; for each request frame received it
// sends a size-byte file with sendfile(2) (net.TCPConn.ReadFrom of an
// *os.File).
func sendfileServer(b *testing.B, size int) string {
	path := filepath.Join(b.TempDir(), "segment")
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	b.Cleanup(func() { l.Close(); <-done; f.Close() })
	go func() {
		defer close(done)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		tc := c.(*net.TCPConn)
		var buf []byte
		for {
			if buf, err = readFrameInto(c, buf); err != nil {
				return
			}
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return
			}
			if n, err := tc.ReadFrom(f); err != nil || n != int64(size) {
				return
			}
		}
	}()
	return l.Addr().String()
}
