package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/haraqa/haraqa/protocol"
)

// attacker is one kind of hostile connection: run holds or loops on a
// connection of its own until stop is closed.
type attacker struct {
	name string
	run  func(h *hostile, stop <-chan struct{})
}

var attackers = []attacker{
	{"pipeline-no-read", (*hostile).pipelineNoRead},
	{"parked-consume+lists", (*hostile).parkedLists},
	{"slowloris", (*hostile).slowloris},
	{"idle", (*hostile).idle},
	{"garbage-frames", (*hostile).garbage},
	{"regex-bombs", (*hostile).regexBombs},
	{"compressed-garbage", (*hostile).compressedGarbage},
}

// hostile is the state the attackers share.
type hostile struct {
	addr     string
	bomb     []byte         // a produce frame: zstd of 64 MiB of zeros declaring 4 KiB
	junk     []byte         // a produce frame: 16 garbage bytes labelled zstd, 5000 messages
	closed   []atomic.Int64 // per attacker: connections the server closed
	whyMu    sync.Mutex
	why      []string     // per attacker: the first error that ended a connection
	refused  atomic.Int64 // hostile requests answered with an error code
	accepted atomic.Int64 // hostile produces answered OK: garbage stored
}

// newHostile builds the frames the attackers send.
func newHostile(addr string) (*hostile, error) {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		return nil, err
	}
	zeros := enc.EncodeAll(make([]byte, 64<<20), nil)
	enc.Close()
	h := &hostile{addr: addr, closed: make([]atomic.Int64, len(attackers)), why: make([]string, len(attackers))}
	h.bomb = protocol.AppendProduceRequest(nil, 1, "junk", protocol.ProduceCreateTopic,
		protocol.AppendBatchBody(nil, protocol.CodecZstd, 1, 4096, zeros))
	h.junk = protocol.AppendProduceRequest(nil, 2, "junk", protocol.ProduceCreateTopic,
		protocol.AppendBatchBody(nil, protocol.CodecZstd, 5000, 5000, []byte("0123456789abcdef")))
	return h, nil
}

// attack runs n hostile connections, spread over the kinds named in kinds
// (comma-separated; empty: all), until stop.
func (h *hostile) attack(n int, kinds string, stop <-chan struct{}) *sync.WaitGroup {
	var use []attacker
	for _, a := range attackers {
		if kinds == "" || strings.Contains(","+kinds+",", ","+a.name+",") {
			use = append(use, a)
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < n && len(use) > 0; i++ {
		a := use[i%len(use)]
		wg.Go(func() { a.run(h, stop) })
	}
	return &wg
}

// dial connects, or returns nil once stop is closed.
func (h *hostile) dial(stop <-chan struct{}) net.Conn {
	for {
		c, err := net.DialTimeout("tcp", h.addr, 2*time.Second)
		if err == nil {
			return c
		}
		select {
		case <-stop:
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// hold keeps c open, never reading, until stop.
func (h *hostile) hold(c net.Conn, stop <-chan struct{}) {
	<-stop
	c.Close()
}

// pipelineNoRead asks for 64 consumes of up to 4 MiB each and never reads.
func (h *hostile) pipelineNoRead(stop <-chan struct{}) {
	c := h.dial(stop)
	if c == nil {
		return
	}
	var req []byte
	for i := range 64 {
		req = protocol.AppendConsumeRequest(req, uint32(i+1), "big", 0, 0, 4<<20, 0)
	}
	go c.Write(req)
	h.hold(c, stop)
}

// parkedLists parks a consume at the end of an empty topic, then
// pipelines 2,000 list-topics requests and never reads.
func (h *hostile) parkedLists(stop <-chan struct{}) {
	c := h.dial(stop)
	if c == nil {
		return
	}
	req := protocol.AppendConsumeRequest(nil, 1, "park", 0, 0, 0, 60_000)
	for i := range 2000 {
		req = protocol.AppendListTopicsRequest(req, uint32(i+2), "", "")
	}
	go c.Write(req)
	h.hold(c, stop)
}

// slowloris sends the first bytes of a 1 MiB frame, then one byte a second.
func (h *hostile) slowloris(stop <-chan struct{}) {
	c := h.dial(stop)
	if c == nil {
		return
	}
	defer c.Close()
	frame := protocol.AppendProduceRequest(nil, 1, "slow", 0, protocol.AppendBatch(nil, make([]byte, 1<<20)))
	for i := 0; i < len(frame); i++ {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := c.Write(frame[i : i+1]); err != nil {
			h.closed[2].Add(1)
			return
		}
		select {
		case <-stop:
			return
		case <-time.After(time.Second):
		}
	}
}

func (h *hostile) idle(stop <-chan struct{}) {
	if c := h.dial(stop); c != nil {
		h.hold(c, stop)
	}
}

// garbage sends, on a new connection each time, an oversized length, a
// length below the header size or random bytes, and reads until closed.
func (h *hostile) garbage(stop <-chan struct{}) {
	frames := [][]byte{
		binary.LittleEndian.AppendUint32(nil, 0xFFFFFFF0),
		binary.LittleEndian.AppendUint32(nil, 3),
		bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 64),
	}
	for i := 0; ; i++ {
		c := h.dial(stop)
		if c == nil {
			return
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(frames[i%len(frames)])
		if _, err := io.Copy(io.Discard, c); err == nil {
			h.closed[4].Add(1) // EOF: the server closed it
		}
		c.Close()
		if pause(stop, 20*time.Millisecond) {
			return
		}
	}
}

// pause waits d and reports whether stop was closed meanwhile.
func pause(stop <-chan struct{}, d time.Duration) bool {
	select {
	case <-stop:
		return true
	case <-time.After(d):
		return false
	}
}

// regexBombs alternates a pattern refused by its size and a costly one
// within the bounds, reading each answer.
func (h *hostile) regexBombs(stop <-chan struct{}) {
	refused := strings.Repeat("(?:a?){1000}", 300) + "z"
	costly := strings.Repeat("(?:a?)", 600) + "z"
	h.requestLoop(5, stop, func(i int) []byte {
		re := refused
		if i%2 == 1 {
			re = costly
		}
		return protocol.AppendListTopicsRequest(nil, uint32(i), "", re)
	})
}

// compressedGarbage produces the zstd bomb and the garbage batch in turn.
func (h *hostile) compressedGarbage(stop <-chan struct{}) {
	h.requestLoop(6, stop, func(i int) []byte {
		if i%2 == 0 {
			return h.bomb
		}
		return h.junk
	})
}

// requestLoop sends a request, reads its answer and pauses, reconnecting
// when the server closes the connection.
func (h *hostile) requestLoop(kind int, stop <-chan struct{}, build func(i int) []byte) {
	c := h.dial(stop)
	for i := 0; c != nil; i++ {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		req := build(i)
		code, err := h.roundTrip(c, req)
		if err != nil {
			h.ended(kind, err)
			c.Close()
			select {
			case <-stop:
				return
			default:
			}
			c = h.dial(stop)
			continue
		}
		if code != protocol.CodeOK {
			h.refused.Add(1)
		} else if protocol.Op(req[5]) == protocol.OpProduce {
			h.accepted.Add(1)
		}
		if pause(stop, 10*time.Millisecond) {
			break
		}
	}
	if c != nil {
		c.Close()
	}
}

// roundTrip writes req and reads one response frame, returning its code.
func (h *hostile) roundTrip(c net.Conn, req []byte) (protocol.Code, error) {
	if _, err := c.Write(req); err != nil {
		return 0, err
	}
	var l [protocol.FrameLengthSize]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return 0, err
	}
	n := binary.LittleEndian.Uint32(l[:])
	if n > 64<<20 {
		return 0, fmt.Errorf("response length %d", n)
	}
	frame := make([]byte, 4+int(n))
	copy(frame, l[:])
	if _, err := io.ReadFull(c, frame[4:]); err != nil {
		return 0, err
	}
	hdr, _, err := protocol.ParseResponseHeader(frame)
	return hdr.Code, err
}

// prepare creates what the attackers use: "big" (8 MiB for pipelined
// consumes), "park" (empty) and 40 topics with 250-byte names, so that a
// list-topics answer is about 10 KB.
func prepare(ctx context.Context, s *server) error {
	c, err := s.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	msg := make([]byte, 128<<10)
	for range 8 {
		msgs := [][]byte{msg, msg, msg, msg, msg, msg, msg, msg}
		if _, err := c.Produce(ctx, "big", msgs...); err != nil {
			return err
		}
	}
	if err := c.CreateTopic(ctx, "park"); err != nil {
		return err
	}
	for i := range 40 {
		if err := c.CreateTopic(ctx, fmt.Sprintf("%03d-%s", i, strings.Repeat("n", 246))); err != nil {
			return err
		}
	}
	return nil
}

// ended counts a connection of kind ended by err and keeps the first err.
func (h *hostile) ended(kind int, err error) {
	h.closed[kind].Add(1)
	h.whyMu.Lock()
	if h.why[kind] == "" {
		h.why[kind] = err.Error()
	}
	h.whyMu.Unlock()
}
