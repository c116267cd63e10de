package client_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// oldLeader stands in front of a server as a leader that loses the lead
// while a Producer has two batches in flight: it forwards every request
// but the hold-th produce, which it answers with code 27 (not leader)
// only once the produce after it was answered by the server (the new
// leader), so that the later batch reaches the new leader first.
type oldLeader struct {
	target string
	hold   int // the produce to refuse, counted from 0

	mu       sync.Mutex
	produces int    // produce requests seen
	held     uint32 // the refused produce's correlation id
	after    uint32 // the correlation id of the produce after it
	refused  bool
}

func (o *oldLeader) serve(cc net.Conn) {
	sc, err := net.Dial("tcp", o.target)
	if err != nil {
		return
	}
	defer sc.Close()
	var wmu sync.Mutex // cc's writes: responses and the refusal
	go func() {
		defer cc.Close()
		for {
			f, err := readFrame(sc)
			if err != nil {
				return
			}
			id := binary.LittleEndian.Uint32(f[8:])
			wmu.Lock()
			_, err = cc.Write(f)
			o.mu.Lock()
			refuse := !o.refused && o.after != 0 && id == o.after
			if refuse {
				o.refused = true
				_, err = cc.Write(protocol.AppendErrorResponse(nil, protocol.OpProduce, o.held, protocol.CodeNotLeader, ""))
			}
			o.mu.Unlock()
			wmu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	for {
		f, err := readFrame(cc)
		if err != nil {
			return
		}
		if protocol.Op(f[5]) == protocol.OpProduce {
			id := binary.LittleEndian.Uint32(f[8:])
			o.mu.Lock()
			n := o.produces
			o.produces++
			switch n {
			case o.hold:
				o.held = id
			case o.hold + 1:
				o.after = id
			}
			o.mu.Unlock()
			if n == o.hold {
				continue
			}
		}
		if _, err := sc.Write(f); err != nil {
			return
		}
	}
}

// readFrame reads one whole frame, its length field included.
func readFrame(c net.Conn) ([]byte, error) {
	var l [protocol.FrameLengthSize]byte
	if _, err := readFull(c, l[:]); err != nil {
		return nil, err
	}
	f := make([]byte, protocol.FrameLengthSize+int(binary.LittleEndian.Uint32(l[:])))
	copy(f, l[:])
	_, err := readFull(c, f[protocol.FrameLengthSize:])
	return f, err
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Two batches of a Producer in flight on the topic's leader as it loses
// the lead: the first is refused as not leader, the second reaches the
// new leader first. The new leader refuses the second (out of order: the
// first is missing), the Producer sends both again, the first first, and
// every message is stored once, at offsets in Send order.
func TestProducerOrderAcrossLeaderChange(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, 1)
	o := &oldLeader{target: srv.Addr, hold: 1}
	old := fakeServer(t, func(_ int, nc net.Conn) { o.serve(nc) })
	ctx := testCtx(t)
	c := dial(t, old)
	leader := dial(t, srv.Addr)
	client.FollowTo(c, leader)

	const topic = "order"
	p := c.NewProducer(topic, client.WithLinger(0), client.WithBatchSize(1), client.WithMaxInFlight(2))
	defer p.Close()
	// The first batch makes the producer known to the server.
	f0, err := p.Send(ctx, []byte("m0"))
	if err != nil {
		t.Fatal(err)
	}
	if off, err := f0.Wait(ctx); err != nil || off != 0 {
		t.Fatalf("m0: offset %d, %v", off, err)
	}
	// Two batches in flight at once: m1 refused, m2 ahead of it.
	var fs []*client.Future
	for i := 1; i <= 2; i++ {
		f, err := p.Send(ctx, fmt.Appendf(nil, "m%d", i))
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	want := map[int64]string{0: "m0"}
	for i, f := range fs {
		off, err := f.Wait(ctx)
		if err != nil {
			t.Fatalf("m%d: %v", i+1, err)
		}
		if off != int64(i+1) {
			t.Errorf("m%d at offset %d, want %d: offsets do not follow Send order", i+1, off, i+1)
		}
		want[off] = fmt.Sprintf("m%d", i+1)
	}
	o.mu.Lock()
	refused := o.refused
	o.mu.Unlock()
	if !refused {
		t.Fatal("the old leader refused no batch: the interleaving did not happen")
	}
	info, err := leader.TopicInfo(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if info.Next != 3 {
		t.Fatalf("next offset %d, want 3: a batch was stored twice or lost", info.Next)
	}
	checkReadBack(t, leader, topic, want)
}

// A batch answered "outcome unknown" (code 30: written, but the lead
// changed before it was committed) is sent again by an idempotent
// Producer, whose resend a server answers with its first offset; without
// idempotence it may have been stored, so its Futures fail with
// ErrOutcomeUnknown and it is not sent again.
func TestProducerOutcomeUnknown(t *testing.T) {
	t.Parallel()
	for _, idem := range []bool{true, false} {
		t.Run(fmt.Sprint("idempotent=", idem), func(t *testing.T) {
			var mu sync.Mutex
			produces := 0
			addr := fakeServer(t, func(_ int, nc net.Conn) {
				serveOps(nc, func(h protocol.RequestHeader, payload []byte) bool {
					if h.Op != protocol.OpProduce {
						nc.Write(protocol.AppendEmptyResponse(nil, h.Op, h.CorrID))
						return true
					}
					req, err := protocol.ParseProduceRequest(payload)
					if err != nil || (idem && req.Flags&protocol.ProduceStrictSequence == 0) {
						nc.Write(protocol.AppendErrorResponse(nil, h.Op, h.CorrID, protocol.CodeMalformedRequest, "no strict sequence flag"))
						return false
					}
					mu.Lock()
					produces++
					n := produces
					mu.Unlock()
					if n == 1 {
						nc.Write(protocol.AppendErrorResponse(nil, h.Op, h.CorrID, protocol.CodeOutcomeUnknown, "lead changed"))
					} else {
						nc.Write(protocol.AppendProduceResponse(nil, h.CorrID, 7, 1))
					}
					return true
				})
			})
			c := dial(t, addr, client.WithIdempotence(idem))
			ctx := testCtx(t)
			p := c.NewProducer("t", client.WithLinger(0))
			defer p.Close()
			f, err := p.Send(ctx, []byte("m"))
			if err != nil {
				t.Fatal(err)
			}
			off, err := f.Wait(ctx)
			mu.Lock()
			n := produces
			mu.Unlock()
			if idem {
				if err != nil || off != 7 || n != 2 {
					t.Fatalf("idempotent: offset %d, %v after %d produces; want 7 after a resend", off, err, n)
				}
				return
			}
			if !errors.Is(err, client.ErrOutcomeUnknown) || n != 1 {
				t.Fatalf("not idempotent: %v after %d produces; want ErrOutcomeUnknown, not resent", err, n)
			}
		})
	}
}
