package broker

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/broker/service"
)

// This file: a TLS connection's consumes. Through the socket pair a
// consume's batches would be copied three times before encryption
// (sendfile(2) into the pair, the pump's read out of it, and gnet's buffer
// whenever the pair is full). Instead the event loop hands the batches'
// file spans to the pump, which reads them straight from the segment files
// into its buffer and encrypts them there: one copy before encryption,
// where a plaintext consume has one sendfile(2).
//
// The pump must put those bytes where the broker would have written them:
// the loop counts every byte it writes into its end of the pair, and files
// each consume with that count. The pump reads the pair up to the position
// of the next consume, sends the consume's spans, and reads on.

// tlsOut is what the event loop and a TLS connection's pumpOut share.
type tlsOut struct {
	written int64 // bytes the loop has handed to gnet for the pair; loop-owned

	mu   sync.Mutex
	jobs []tlsJob // oldest first

	pending atomic.Int64 // batch bytes filed and not yet sent
	wake    func()       // interrupts the pump's wait for the pair (a read deadline)
	closed  bool         // the pump has ended: release what is filed at once
}

// tlsJob is one consume's batches, to be sent after the pair's first at
// bytes.
type tlsJob struct {
	at int64
	r  *service.ReadResult
}

// wrote counts n bytes written to c's end of the pair. Runs on the loop.
func (cs *conn) wrote(n int) {
	if cs.tls != nil {
		cs.tls.written += int64(n)
	}
}

// outbound is what c holds for its client and has not sent: gnet's buffer,
// the output gathered in this callback and, on a TLS connection, the batch
// bytes filed with the pump. Runs on the loop.
func (cs *conn) outbound() int {
	c := cs.c
	n := c.OutboundBuffered() + len(cs.out)
	if cs.tls != nil {
		n += int(cs.tls.pending.Load())
	}
	return n
}

// file hands r's batches to the pump, after everything written to the pair
// so far; the pump releases r. Runs on the loop.
func (t *tlsOut) file(r *service.ReadResult) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		r.Release()
		return
	}
	t.jobs = append(t.jobs, tlsJob{at: t.written, r: r})
	t.pending.Add(r.Bytes)
	t.mu.Unlock()
	t.wake()
}

// next returns the job due once read bytes of the pair have been sent, if
// any, else how many bytes may be read from the pair before the next job
// (-1: no limit).
func (t *tlsOut) next(read int64) (job *tlsJob, limit int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.jobs) == 0 {
		return nil, -1
	}
	if j := &t.jobs[0]; j.at <= read {
		return j, 0
	}
	return nil, t.jobs[0].at - read
}

// done removes the job at the head, which has been sent.
func (t *tlsOut) done() {
	t.mu.Lock()
	j := t.jobs[0]
	t.jobs[0] = tlsJob{}
	t.jobs = t.jobs[1:]
	t.mu.Unlock()
	t.pending.Add(-j.r.Bytes)
	j.r.Release()
}

// close releases every job not sent; jobs filed from then on are released
// at once.
func (t *tlsOut) close() {
	t.mu.Lock()
	jobs := t.jobs
	t.jobs, t.closed = nil, true
	t.mu.Unlock()
	for _, j := range jobs {
		t.pending.Add(-j.r.Bytes)
		j.r.Release()
	}
}

// sendJob reads a job's spans from their files into the pump's buffer and
// sends them encrypted, each chunk within the stall timeout.
func (b *Broker) sendJob(j *tlsJob, send func(p []byte) error) error {
	bp := pumpOutBuffers.Get().(*[]byte)
	defer pumpOutBuffers.Put(bp)
	for _, sp := range j.r.Spans {
		for pos, end := sp.Pos, sp.Pos+sp.Len; pos < end; {
			chunk := (*bp)[:min(end-pos, int64(len(*bp)))]
			if m, err := sp.File.ReadAt(chunk, pos); m < len(chunk) {
				if err == nil || err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return fmt.Errorf("broker: read segment: %w", err)
			}
			if err := send(chunk); err != nil {
				return err
			}
			b.stats.copiedBytes.Add(int64(len(chunk)))
			pos += int64(len(chunk))
		}
	}
	return nil
}

// pastDeadline interrupts a read waiting on the pair.
var pastDeadline = time.Unix(1, 0)

// wakeReader returns a function that makes outer's pending read return.
func wakeReader(outer *net.UnixConn) func() {
	return func() { _ = outer.SetReadDeadline(pastDeadline) }
}
