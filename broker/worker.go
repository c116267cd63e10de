package broker

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/valyala/bytebufferpool"

	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// This file: the connection's worker, a goroutine that runs the storage
// requests that may wait on the disk, in request order, while the event
// loop goes on serving other connections.

// worker is the part of a connection's state shared between its event loop
// and its goroutine.
type worker struct {
	mu      sync.Mutex    // guards jobs, working and more, and the done and resp fields of slots
	jobs    []*job        // requests waiting for the goroutine
	working bool          // the goroutine is running
	more    chan struct{} // closed by queueJob while gather waits
	queued  atomic.Int64  // bytes of produce batches copied for the goroutine

	// Owned by the goroutine.
	lastGroup  int           // produces in the last group
	lastCommit time.Duration // how long that group took
}

// maxGroupBytes bounds the batch bytes of the produces one connection hands
// to storage at once.
const maxGroupBytes = 16 << 20

// queueJob queues j behind the connection's running jobs, starting the
// goroutine that runs them if none is. Runs on the loop.
func (b *Broker) queueJob(c gnet.Conn, cs *connState, j *job) {
	if j.raw != nil {
		j.batch = bytebufferpool.Get()
		j.batch.B = append(j.batch.B[:0], j.raw...)
		j.raw = j.batch.B
		cs.w.queued.Add(int64(len(j.raw)))
	}
	j.slot = &slot{async: true}
	cs.slots = append(cs.slots, j.slot)
	b.stats.pending.Add(1)
	cs.w.mu.Lock()
	defer cs.w.mu.Unlock()
	if !cs.w.working {
		// inflight.Add must not race Shutdown's Wait: both go through stopMu.
		b.stopMu.RLock()
		defer b.stopMu.RUnlock()
		if b.stopping.Load() {
			j.slot.resp, j.slot.done = b.appendError(nil, j.op, j.corrID, errShuttingDown), true
			b.observe(j.op, false, j.start)
			if j.batch != nil {
				bytebufferpool.Put(j.batch)
			}
			return
		}
		b.inflight.Add(1)
		cs.w.working = true
		go b.work(c, &cs.w)
	}
	cs.w.jobs = append(cs.w.jobs, j)
	if cs.w.more != nil {
		close(cs.w.more)
		cs.w.more = nil
	}
}

// busy reports whether the goroutine is running jobs: a job queued now
// runs after them.
func (w *worker) busy() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.working
}

// work runs a connection's queued jobs in order until none is left.
func (b *Broker) work(c gnet.Conn, w *worker) {
	defer b.inflight.Done()
	for {
		w.mu.Lock()
		jobs := w.jobs
		w.jobs = nil
		if len(jobs) == 0 {
			w.working = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		jobs = b.gather(w, jobs)
		for len(jobs) > 0 {
			// Consecutive produces to one topic go to storage together.
			n, size := 1, len(jobs[0].raw)
			for n < len(jobs) && jobs[0].op == protocol.OpProduce && jobs[n].op == protocol.OpProduce &&
				jobs[n].topic == jobs[0].topic && size+len(jobs[n].raw) <= maxGroupBytes {
				size += len(jobs[n].raw)
				n++
			}
			group := jobs[:n]
			jobs = jobs[n:]
			start := time.Now()
			resps := b.runJobsEach(group)
			if group[0].op == protocol.OpProduce {
				w.lastGroup, w.lastCommit = n, time.Since(start)
			}
			w.mu.Lock()
			for i, j := range group {
				j.slot.resp, j.slot.done = resps[i], true
			}
			w.mu.Unlock()
			for _, j := range group {
				b.observe(j.op, false, j.start)
			}
			for _, j := range group {
				if j.batch != nil {
					w.queued.Add(-int64(len(j.raw)))
					bytebufferpool.Put(j.batch)
					j.batch = nil
				}
			}
			_ = c.Wake(nil)
		}
	}
}

// gather waits, with fsync on, while fewer produces are queued than the
// connection's last group held, up to half that group's commit time: the
// clients just answered are sending again, and one fsync for all of them
// costs what one for half of them does. Only the connection's goroutine
// calls it.
func (b *Broker) gather(w *worker, jobs []*job) []*job {
	if !b.fsync || w.lastGroup <= 1 || len(jobs) >= w.lastGroup || jobs[0].op != protocol.OpProduce {
		return jobs
	}
	timer := time.NewTimer(w.lastCommit / 2)
	defer timer.Stop()
	for len(jobs) < w.lastGroup {
		w.mu.Lock()
		if len(w.jobs) > 0 {
			jobs = append(jobs, w.jobs...)
			w.jobs = nil
			w.mu.Unlock()
			continue
		}
		more := make(chan struct{})
		w.more = more
		w.mu.Unlock()
		select {
		case <-more:
		case <-timer.C:
			w.mu.Lock()
			w.more = nil
			w.mu.Unlock()
			return jobs
		}
	}
	return jobs
}

// produce appends the batches of jobs, produces to one topic, together,
// creating the topic first when asked to and it is missing.
func (b *Broker) produce(jobs []*job, resps [][]byte) {
	topic := jobs[0].topic
	batches := make([][]byte, len(jobs))
	for i, j := range jobs {
		batches[i] = j.raw
	}
	bases, errs := b.store.AppendMany(topic, batches)
	var retry []int
	for i, err := range errs {
		if errors.Is(err, storage.ErrTopicNotFound) && jobs[i].flags&protocol.ProduceCreateTopic != 0 {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		if cerr := b.store.CreateTopic(topic); cerr == nil || errors.Is(cerr, storage.ErrTopicExists) {
			again := make([][]byte, len(retry))
			for k, i := range retry {
				again[k] = batches[i]
			}
			rb, re := b.store.AppendMany(topic, again)
			for k, i := range retry {
				bases[i], errs[i] = rb[k], re[k]
			}
		}
	}
	for i, j := range jobs {
		if errs[i] != nil {
			resps[i] = b.appendError(nil, protocol.OpProduce, j.corrID, errs[i])
			continue
		}
		bt, _, _ := protocol.ParseBatch(batches[i]) // valid: storage accepted it
		b.stats.producedMsgs.Add(int64(bt.Count))
		b.stats.producedBytes.Add(int64(len(batches[i])))
		resps[i] = protocol.AppendProduceResponse(nil, j.corrID, bases[i], uint32(bt.Count))
	}
}
