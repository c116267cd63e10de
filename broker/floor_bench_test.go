package broker

import (
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// echoEngine answers every 1 KiB it reads with the same bytes: the least
// work a request/response server on gnet can do.
type echoEngine struct {
	gnet.BuiltinEventEngine
	booted chan struct{}
	eng    gnet.Engine
}

func (e *echoEngine) OnBoot(eng gnet.Engine) gnet.Action {
	e.eng = eng
	close(e.booted)
	return gnet.None
}

func (e *echoEngine) OnTraffic(c gnet.Conn) gnet.Action {
	for c.InboundBuffered() >= floorMsg {
		b, _ := c.Next(floorMsg)
		if _, err := c.Write(b); err != nil {
			return gnet.Close
		}
	}
	return gnet.None
}

const floorMsg = 1024

// BenchmarkPingPongFloor measures the request/response floor under the
// broker: a 1 KiB ping-pong against a gnet echo server with the broker's
// event-loop options, and against a plain net.Conn echo goroutine, in the
// same process, alternating in five pairs. It reports the median p50 of
// each and the median of the pairs' p50 ratios (gnet / net): a
// single-message produce, which does the same round trip plus a storage
// write, cannot be closer to the plain ping-pong than gnet's own echo is.
// b.N is the number of round trips per pass.
func BenchmarkPingPongFloor(b *testing.B) {
	e := &echoEngine{booted: make(chan struct{})}
	gaddr := runGnet(b, e, e.booted, func() gnet.Engine { return e.eng },
		gnet.WithTCPNoDelay(gnet.TCPNoDelay), gnet.WithReadBufferCap(readBufferCap))
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer nl.Close()
	go func() {
		for {
			c, err := nl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, floorMsg)
				for {
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	var n int
	for b.Loop() {
		n++
	}
	var gp, np, ratios []float64
	for range 5 {
		g, err := pingPongP50(gaddr, n)
		if err != nil {
			b.Fatal(err)
		}
		p, err := pingPongP50(nl.Addr().String(), n)
		if err != nil {
			b.Fatal(err)
		}
		gp, np, ratios = append(gp, g), append(np, p), append(ratios, g/p)
	}
	b.ReportMetric(mid(gp), "gnet-p50-us")
	b.ReportMetric(mid(np), "net-p50-us")
	b.ReportMetric(mid(ratios), "ratio")
}

// pingPongP50 dials addr, runs n round trips of floorMsg bytes and
// returns the median in microseconds.
func pingPongP50(addr string, n int) (float64, error) {
	if n == 0 {
		return 0, errors.New("no round trips")
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	buf := make([]byte, floorMsg)
	ds := make([]float64, n)
	for i := range ds {
		t := time.Now()
		if _, err := c.Write(buf); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return 0, err
		}
		ds[i] = float64(time.Since(t).Nanoseconds()) / 1e3
	}
	return mid(ds), nil
}

func mid(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}
