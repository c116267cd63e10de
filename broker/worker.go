package broker

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"
	"github.com/valyala/bytebufferpool"

	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// This file: the connection's worker, a goroutine that runs, in request
// order, the storage requests that may wait on the disk, while the event
// loop goes on serving other connections; and, with fsync on, the produces
// handed to storage's group commit without waiting (Log.AppendAsync).

// worker is the part of a connection's state shared between its event
// loop, its goroutine and storage's commit goroutine.
type worker struct {
	b       *Broker
	conn    gnet.Conn    // the connection, to wake its loop
	mu      sync.Mutex   // guards jobs and working
	jobs    []*job       // requests waiting for the goroutine
	working bool         // the goroutine is running
	queued  atomic.Int64 // bytes of produce batches copied and not yet stored
	held    atomic.Int64 // bytes of ready responses waiting in slots behind an earlier one
	woken   atomic.Bool  // a Wake is on its way to the loop (cleared by OnTraffic)
	decodes atomic.Int32 // compressed produces handed to the goroutine and not yet checked (maxConnDecodes)

	// appending counts the produces handed to storage and not yet
	// acknowledged. Added to by the loop while the goroutine does not run,
	// and by the goroutine; waited for by the goroutine only.
	appending sync.WaitGroup
	inStore   atomic.Int64 // the same count, for the loop to read
}

// maxGroupBytes bounds the batch bytes of the produces one connection hands
// to storage at once.
const maxGroupBytes = 16 << 20

// maxConnDecodes bounds the compressed produces of one connection waiting
// to be checked: storage decodes each (on the connection's goroutine, one
// at a time, waiting for one of its decode workers), and past this many
// the loop stops reading the connection until one is checked (backedUp),
// so its later frames wait unread, in order, and never hold the loop. Two:
// the next batch is queued while one decodes.
const maxConnDecodes = 2

// take copies j's batch, which borrows from the frame, into a pooled buffer
// and gives j a slot in the connection's queue. A large frame, gathered in
// its own pooled buffer (gatherBig), is not copied: j takes that buffer,
// and its batch goes on borrowing from it. Runs on the loop.
func (cs *conn) take(j *job) {
	b := cs.b
	if j.raw != nil {
		if cs.handlingBig && cs.big != nil {
			j.batch, cs.big = cs.big, nil
		} else {
			j.batch = bytebufferpool.Get()
			j.batch.B = append(j.batch.B[:0], j.raw...)
			j.raw = j.batch.B
		}
		cs.w.queued.Add(int64(len(j.raw)))
	}
	if j.decode {
		cs.w.decodes.Add(1)
	}
	j.slot = &slot{async: true}
	cs.slots = append(cs.slots, j.slot)
	b.stats.pending.Add(1)
}

// decoded counts the compressed produce j, taken (take), as checked: it
// was handed to storage, which decoded it, or was answered without. The
// loop stopped reading at maxConnDecodes is woken to read on.
func (w *worker) decoded(j *job) {
	if j.decode && w.decodes.Add(-1) == maxConnDecodes-1 {
		w.wake()
	}
}

// produceAsync hands j, a produce that nothing queued on the connection
// precedes, straight to storage's group commit from the loop: with fsync
// on, every produce a pipelining connection has sent, and those of every
// other connection, join the same commit. A produce to a missing topic
// that asks for its creation goes to the goroutine, which may wait for the
// directory syncs. Runs on the loop.
func (cs *conn) produceAsync(j *job) {
	b := cs.b
	cs.take(j)
	if !b.appendAsync(&cs.w, j, false) {
		cs.queueJob(j)
	}
}

// appendAsync hands j to storage's group commit; storage tells the worker
// (Appended, Flush) once the batch is on every volume. A produce storage
// refuses at once is answered at once, except a missing topic to be
// created, for which appendAsync returns false unless create is set, when
// the service creates the topic and tries again (ProduceAsyncCreate).
func (b *Broker) appendAsync(w *worker, j *job, create bool) bool {
	// inflight.Add must not race Shutdown's Wait: both go through stopMu.
	b.stopMu.RLock()
	if b.stopping.Load() {
		b.stopMu.RUnlock()
		w.file(j, 0, errShuttingDown)
		w.Flush()
		return true
	}
	b.inflight.Add(1)
	b.stopMu.RUnlock()
	w.appending.Add(1)
	w.inStore.Add(1)
	p := service.Produce{Batch: j.raw, Expect: j.expect, Create: j.flags&protocol.ProduceCreateTopic != 0,
		AcksLeader: j.flags&protocol.ProduceAcksLeader != 0, StrictSequence: j.flags&protocol.ProduceStrictSequence != 0}
	var err error
	if create {
		err = b.svc.ProduceAsyncCreate(j.caller, j.topic, p, w, j)
	} else if err = b.svc.ProduceAsync(j.caller, j.topic, p, w, j); errors.Is(err, storage.ErrTopicNotFound) && p.Create {
		w.done()
		return false // the goroutine creates it (ProduceAsyncCreate)
	}
	if err != nil {
		w.Appended(j, 0, err)
		w.Flush()
	}
	return true
}

var _ service.AppendCallback = (*worker)(nil)

// Appended files the outcome of the produce arg (a *job) in its slot; the
// loop writes the response (advance). Storage calls it on its commit
// goroutine for each produce of a commit before Flush wakes the loop, so a
// commit's answers are all filed before the loop looks at them, and leave
// together.
func (w *worker) Appended(arg any, base int64, err error) {
	w.file(arg.(*job), base, err)
	w.done()
}

// file files the outcome of the produce j.
func (w *worker) file(j *job, base int64, err error) {
	j.slot.produce = j
	j.slot.base, j.slot.err = base, err
	j.slot.done.Store(true)
}

// done counts a produce handed to storage as answered.
func (w *worker) done() {
	w.inStore.Add(-1)
	w.appending.Done()
	w.b.inflight.Done()
}

// Flush wakes the loop to send what Appended filed.
func (w *worker) Flush() { w.wake() }

// queueJob queues j, already taken (take), behind the connection's running
// jobs, starting the goroutine that runs them if none is. Runs on the loop.
func (cs *conn) queueJob(j *job) {
	b := cs.b
	cs.w.mu.Lock()
	defer cs.w.mu.Unlock()
	if !cs.w.working {
		// inflight.Add must not race Shutdown's Wait: both go through stopMu.
		b.stopMu.RLock()
		defer b.stopMu.RUnlock()
		if b.stopping.Load() {
			j.slot.resp = b.appendError(nil, j.op, j.corrID, errShuttingDown)
			j.slot.done.Store(true)
			cs.w.held.Add(int64(len(j.slot.resp)))
			b.observe(j.op, false, j.start)
			b.release(&cs.w, j)
			cs.w.decoded(j)
			return
		}
		b.inflight.Add(1)
		cs.w.working = true
		go b.work(&cs.w)
	}
	cs.w.jobs = append(cs.w.jobs, j)
}

// busy reports whether the goroutine is running jobs: a job queued now
// runs after them.
func (w *worker) busy() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.working
}

// work runs a connection's queued jobs in order until none is left. With
// fsync on, a produce is handed to storage's group commit and the
// goroutine goes on at once; any other job first waits until the produces
// before it are acknowledged, so it sees their effect.
func (b *Broker) work(w *worker) {
	defer b.inflight.Done()
	for {
		w.mu.Lock()
		jobs := w.jobs
		w.jobs = nil
		if len(jobs) == 0 {
			w.mu.Unlock()
			w.appending.Wait() // answer every produce before the goroutine ends
			w.mu.Lock()
			if len(w.jobs) == 0 {
				w.working = false
				w.mu.Unlock()
				return
			}
			w.mu.Unlock()
			continue
		}
		w.mu.Unlock()
		b.runQueued(w, jobs)
	}
}

// runQueued runs jobs in order on the connection's goroutine.
func (b *Broker) runQueued(w *worker, jobs []*job) {
	for len(jobs) > 0 {
		if jobs[0].op == protocol.OpProduce && b.fsync {
			b.appendAsync(w, jobs[0], true) // a compressed batch is decoded here, on the goroutine
			w.decoded(jobs[0])
			jobs = jobs[1:]
			continue
		}
		w.appending.Wait()
		// Consecutive produces to one topic go to storage together.
		n, size := 1, len(jobs[0].raw)
		for n < len(jobs) && jobs[0].op == protocol.OpProduce && jobs[n].op == protocol.OpProduce &&
			jobs[n].topic == jobs[0].topic && jobs[n].caller == jobs[0].caller && size+len(jobs[n].raw) <= maxGroupBytes {
			size += len(jobs[n].raw)
			n++
		}
		group := jobs[:n]
		jobs = jobs[n:]
		resps := b.runJobsEach(group)
		for i, j := range group {
			w.decoded(j)
			b.complete(w, j, resps[i])
		}
	}
}

// complete files resp as j's answer, releases j's batch and wakes the loop
// to send it.
func (b *Broker) complete(w *worker, j *job, resp []byte) {
	w.held.Add(int64(len(resp)))
	j.slot.resp = resp
	j.slot.done.Store(true)
	b.observe(j.op, false, j.start)
	b.release(w, j)
	w.wake()
}

// release returns j's batch copy to the pool.
func (b *Broker) release(w *worker, j *job) {
	if j.batch != nil {
		w.queued.Add(-int64(len(j.raw)))
		bytebufferpool.Put(j.batch)
		j.batch = nil
	}
}

// wake wakes the loop to send what was filed. One Wake serves every answer
// filed before the loop runs: OnTraffic clears woken before it looks at
// the slots.
func (w *worker) wake() {
	if !w.woken.Swap(true) {
		_ = w.conn.Wake(nil)
	}
}

// produce appends the batches of jobs, produces to one topic from one
// connection, together; those that ask for it create the topic first.
func (b *Broker) produce(jobs []*job, resps [][]byte) {
	ps := make([]service.Produce, len(jobs))
	for i, j := range jobs {
		ps[i] = service.Produce{Batch: j.raw, Expect: j.expect, Create: j.flags&protocol.ProduceCreateTopic != 0,
			AcksLeader: j.flags&protocol.ProduceAcksLeader != 0, StrictSequence: j.flags&protocol.ProduceStrictSequence != 0}
	}
	bases, errs := b.svc.ProduceMany(jobs[0].caller, jobs[0].topic, ps)
	for i, j := range jobs {
		resps[i] = b.appendProduceResponse(nil, j, bases[i], errs[i])
	}
}

// appendProduceResponse appends the answer to the produce j: its base
// offset and message count, or err.
func (b *Broker) appendProduceResponse(dst []byte, j *job, base int64, err error) []byte {
	if err != nil {
		return b.appendError(dst, protocol.OpProduce, j.corrID, err)
	}
	bt, _, _ := protocol.ParseBatch(j.raw) // valid: storage accepted it
	b.stats.producedMsgs.Add(int64(bt.Count))
	b.stats.producedBytes.Add(int64(len(j.raw)))
	return protocol.AppendProduceResponse(dst, j.corrID, base, uint32(bt.Count))
}
