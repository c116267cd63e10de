package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// Rows 2, 3 and 15: what a client with the produce or admin right can do
// with batches, producer ids and offsets.

const (
	zstdConns    = 2
	zstdRate     = 25 // batches a second per connection
	zstdInFlight = 8
	zstdDeclared = 64<<20 - 64<<10 // the bomb's raw size: 64-byte messages of zeros

	// codeProducerFenced is the code of a batch under another token's
	// producer id.
	codeProducerFenced = protocol.CodeProducerFenced
	forgedTopic        = "shared.idem"
	forgedProd         = 501 // the victim producer's number in its messages
	forgedFresh        = 1000
	forgedPace         = 20 * time.Millisecond
)

// attackZstdBombs: two connections of the attacker pipeline 6 KB zstd
// batches that each decode to 64 MiB. Decoding runs off the event loop,
// so the victim's p99 holds.
func attackZstdBombs(ctx context.Context, r *rowRun) (string, error) {
	raw := make([]byte, zstdDeclared)
	for i := 0; i < len(raw); i += 64 {
		raw[i] = 63
	}
	bomb := protocol.AppendBatchRaw(nil, protocol.CodecZstd, zstdDeclared/64, raw)
	frame := protocol.AppendProduceRequest(nil, 0, "a.bomb", protocol.ProduceCreateTopic, bomb)
	var sent atomic.Int64
	codes := make([][]protocol.Code, zstdConns)
	var wg sync.WaitGroup
	var dialErr error
	for i := range zstdConns {
		c, err := r.rig.rawHello(attackerIP(r.id, i), r.rig.tok.attacker)
		if err != nil {
			dialErr = err
			continue
		}
		wg.Go(func() { defer c.Close(); codes[i] = pipeline(c, frame, r.stop, &sent) })
	}
	wg.Wait()
	var all []protocol.Code
	for _, c := range codes {
		all = append(all, c...)
	}
	took := time.Since(r.begun)
	line := fmt.Sprintf("%d connections pipelining %.1f KB zstd batches declaring %.1f MiB: %d sent in %s (%.0f/s), answers: %s",
		zstdConns, float64(len(bomb))/1000, float64(zstdDeclared)/(1<<20), sent.Load(), took.Round(100*time.Millisecond),
		float64(sent.Load())/took.Seconds(), codeCounts(all))
	return line, dialErr
}

// pipeline sends frame at zstdRate a second, zstdInFlight at most
// unanswered, until stop; it returns the codes of the answers read.
func pipeline(c *raw2, frame []byte, stop <-chan struct{}, sent *atomic.Int64) []protocol.Code {
	slots := make(chan struct{}, zstdInFlight)
	var codes []protocol.Code
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			code, _, err := readResponse(c)
			if err != nil {
				return
			}
			codes = append(codes, code)
			<-slots
		}
	}()
	tick := time.NewTicker(time.Second / zstdRate)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			<-done
			return codes
		case <-tick.C:
		}
		select {
		case slots <- struct{}{}:
		default:
			continue // zstdInFlight unanswered: skip this tick
		}
		_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write(frame); err != nil {
			_ = c.SetReadDeadline(time.Now())
			<-done
			return codes
		}
		sent.Add(1)
	}
}

// codeCounts is "code 0 x12, code 10 x3".
func codeCounts(codes []protocol.Code) string {
	if len(codes) == 0 {
		return "none"
	}
	labels := make([]string, len(codes))
	for i, c := range codes {
		labels[i] = "code " + strconv.Itoa(int(c))
	}
	return joinCounts(labels)
}

// attackForgedProducer: the victim's idempotent Producer writes the shared
// topic every 20 ms; the attacker, with produce and consume there, reads
// each batch's producer id and sends the next sequence under it first,
// once a sequence 2^62 ahead, and 1,000 batches of fresh producer ids.
// Every forged batch is refused with code 25 and each victim message is
// stored exactly once, at its Future's offset.
func attackForgedProducer(ctx context.Context, r *rowRun) (string, error) {
	g := r.rig
	if err := g.victim.check.CreateTopic(ctx, forgedTopic); err != nil && !errors.Is(err, client.ErrTopicExists) {
		return "create " + forgedTopic, err
	}
	vc, err := g.dial(ctx, g.tok.victim)
	if err != nil {
		return "victim producer", err
	}
	defer vc.Close()
	a, err := g.rawHello(attackerIP(r.id, 0), g.tok.shared)
	if err != nil {
		return "attacker hello", err
	}
	defer a.Close()
	vp := vc.NewProducer(forgedTopic, client.WithBatchSize(1), client.WithLinger(0), client.WithMaxInFlight(1))
	offs := make(chan []int64, 1)
	go func() { offs <- sendPaced(ctx, vp, r.stop) }()
	f := &forger{c: a, forged: map[protocol.Code]int{}, ours: map[[2]uint64]bool{}}
	f.run(r.stop)
	sent := <-offs
	stored, res, cerr := checkShared(ctx, g.victim.check, sent)
	line := fmt.Sprintf("forged batches under the victim's producer id: %d (%s), one 2^62 ahead (code %d), %d fresh ids (%d stored); victim: %d acknowledged, %d failed, %d forged stored",
		f.total(), f.codes(), f.far, forgedFresh, f.freshOK, res.acked, res.failed, stored)
	var errs []error
	if n := f.total() - f.forged[codeProducerFenced]; n > 0 || f.total() == 0 {
		errs = append(errs, fmt.Errorf("%d of %d forged batches not refused with code %d", n, f.total(), codeProducerFenced))
	}
	if f.fresh != nil && f.far == protocol.CodeOK {
		errs = append(errs, errors.New("the forged batch 2^62 ahead was stored"))
	}
	if res.failed > 0 {
		errs = append(errs, fmt.Errorf("%d victim Futures failed", res.failed))
	}
	return line, errors.Join(append(errs, cerr, f.err)...)
}

// sendPaced sends payload(forgedProd, seq) every forgedPace until stop, then
// flushes and returns each message's offset (futureFailed when failed).
func sendPaced(ctx context.Context, p *client.Producer, stop <-chan struct{}) []int64 {
	var futures []*client.Future
	for seq := 0; ; seq++ {
		f, err := p.Send(ctx, payload(forgedProd, seq))
		if err != nil {
			break
		}
		futures = append(futures, f)
		if pause(stop, forgedPace) {
			break
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_ = p.Flush(fctx)
	_ = p.Close()
	offs := make([]int64, len(futures))
	for i, f := range futures {
		off, err := f.Wait(fctx)
		if err != nil {
			off = futureFailed
		}
		offs[i] = off
	}
	return offs
}

// forger is the attacker of row 3.
type forger struct {
	c       *raw2
	next    int64
	forged  map[protocol.Code]int // answers to forged batches
	ours    map[[2]uint64]bool    // (producer id, sequence) of the batches forged
	far     protocol.Code         // answer to the batch 2^62 ahead
	freshOK int
	fresh   map[uint64]bool
	err     error
}

// run follows the topic and forges the next batch of every producer id it
// has not made itself, until stop.
func (f *forger) run(stop <-chan struct{}) {
	for !isClosed(stop) && f.err == nil {
		code, p, err := f.c.do(func(id uint32) []byte {
			return protocol.AppendConsumeRequest(nil, id, forgedTopic, f.next, 0, 0, 100)
		})
		if err != nil || code != protocol.CodeOK {
			f.err = fmt.Errorf("attacker consume at %d: code %d: %v", f.next, code, err)
			return
		}
		resp, err := protocol.ParseConsumeResponse(p)
		if err != nil {
			f.err = err
			return
		}
		f.next = resp.NextOffset
		for b := resp.Batches; len(b) > 0; {
			bt, n, err := protocol.ParseBatch(b)
			if err != nil {
				break
			}
			b = b[n:]
			if bt.ProducerID != 0 && !f.fresh[bt.ProducerID] && !f.ours[[2]uint64{bt.ProducerID, bt.Sequence}] {
				f.forge(bt.ProducerID, bt.Sequence)
			}
		}
	}
}

// forge sends seq+1 under pid, and the first time also seq+2^62 and the
// fresh ids.
func (f *forger) forge(pid, seq uint64) {
	f.ours[[2]uint64{pid, seq + 1}] = true
	f.forged[f.produce(pid, seq+1, "ATTACK forged")]++
	if f.fresh != nil {
		return
	}
	f.ours[[2]uint64{pid, seq + 1<<62}] = true
	f.far = f.produce(pid, seq+1<<62, "ATTACK forged far")
	f.fresh = map[uint64]bool{}
	for range forgedFresh {
		id := rand.Uint64() | 1
		f.fresh[id] = true
		if f.produce(id, 0, "ATTACK fresh") == protocol.CodeOK {
			f.freshOK++
		}
	}
}

// produce sends one batch of msg under (pid, seq) and returns its code.
func (f *forger) produce(pid, seq uint64, msg string) protocol.Code {
	batch := protocol.AppendBatchMeta(nil, protocol.BatchMeta{ProducerID: pid, Sequence: seq}, []byte(msg))
	code, _, err := f.c.do(func(id uint32) []byte { return protocol.AppendProduceRequest(nil, id, forgedTopic, 0, batch) })
	if err != nil && f.err == nil {
		f.err = fmt.Errorf("attacker produce: %w", err)
	}
	return code
}

func (f *forger) total() int {
	n := 0
	for _, k := range f.forged {
		n += k
	}
	return n
}

func (f *forger) codes() string {
	var labels []string
	for c, k := range f.forged {
		labels = append(labels, fmt.Sprintf("code %d x%d", c, k))
	}
	if len(labels) == 0 {
		return "none sent"
	}
	return fmt.Sprint(labels)
}

// checkShared reads the shared topic: each victim message once at its
// Future's offset; it returns how many forged messages are stored.
func checkShared(ctx context.Context, c *client.Client, sent []int64) (int, onceResult, error) {
	check := newOnceCheck(map[int]string{forgedProd: forgedTopic}, map[int][]int64{forgedProd: sent})
	forged := 0
	info, err := c.TopicInfo(ctx, forgedTopic)
	if err != nil {
		return 0, onceResult{}, err
	}
	var msgs []client.Message
	for off := info.Oldest; off < info.Next; {
		if msgs, _, err = c.ConsumeInto(ctx, msgs[:0], forgedTopic, off, 2000); err != nil || len(msgs) == 0 {
			return forged, onceResult{}, fmt.Errorf("consume %s at %d: %d messages, %v", forgedTopic, off, len(msgs), err)
		}
		for _, m := range msgs {
			switch {
			case bytes.HasPrefix(m.Value, []byte("ATTACK forged")):
				forged++
			case !bytes.HasPrefix(m.Value, []byte("ATTACK")):
				check.message(forgedTopic, m.Offset, m.Value)
			}
			off = m.Offset + 1
		}
	}
	res, err := check.finish()
	return forged, res, err
}

// attackImportWrap: an import without batches at offset MaxInt64-1, then
// produces. Either is refused, or every acknowledged offset is
// non-negative and reads back its message.
func attackImportWrap(ctx context.Context, r *rowRun) (string, error) {
	c, err := r.rig.dial(ctx, r.rig.tok.attacker)
	if err != nil {
		return "attacker", err
	}
	defer c.Close()
	_, ierr := c.Import(ctx, "a.wrap", math.MaxInt64-1, nil)
	line := fmt.Sprintf("import without batches at MaxInt64-1: %s", errText(ierr))
	var bad []string
	for i := range 3 {
		msg := []byte("wrap " + strconv.Itoa(i))
		off, err := c.Produce(ctx, "a.wrap", msg)
		line += fmt.Sprintf("; produce %d: %s", i, errText(err))
		if err != nil {
			continue
		}
		line += fmt.Sprintf(" at %d", off)
		got, err := c.Consume(ctx, "a.wrap", off, 1)
		if off < 0 || err != nil || len(got) == 0 || got[0].Offset != off || !bytes.Equal(got[0].Value, msg) {
			bad = append(bad, fmt.Sprintf("produce %d acknowledged at offset %d, read back: %d messages, %v", i, off, len(got), err))
		}
	}
	if len(bad) > 0 {
		return line, errors.New(strings.Join(bad, "; "))
	}
	return line, nil
}

// errText is "ok" or the error.
func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return "refused (" + err.Error() + ")"
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
