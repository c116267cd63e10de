package broker

import (
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/valyala/bytebufferpool"

	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// connState is one connection's state. Requests are answered in the order
// they arrived: a response that cannot be sent yet (a produce waiting for
// its fsync, a parked long poll, or anything behind them) waits in slots.
type connState struct {
	mu      sync.Mutex   // guards jobs, working, and the done and resp fields of slots
	jobs    []*job       // storage requests waiting for the connection's goroutine
	working bool         // a goroutine is running jobs
	queued  atomic.Int64 // bytes of produce batches copied for the goroutine
	slots   []*slot      // loop-owned: requests waiting for their turn, oldest first
	out     []byte       // loop-owned: responses gathered during one callback
	fatal   error        // loop-owned: the connection must close

	big        *bytebufferpool.ByteBuffer // loop-owned: a large frame being gathered
	bigSize    int                        // its size
	more       chan struct{}              // mu: closed by queueJob while gather waits
	lastGroup  int                        // produces in the last group (the connection's goroutine)
	lastCommit time.Duration              // how long that group took
}

type slot struct {
	done    bool     // connState.mu
	resp    []byte   // connState.mu: the response frame, once done
	async   bool     // answered by a goroutine (counted in stats.pending)
	consume *consume // a consume, served when it reaches the head; loop-owned
}

// maxGroupBytes bounds the batch bytes of the produces one connection hands
// to storage at once.
const maxGroupBytes = 16 << 20

// maxKeptOut is the largest output buffer a connection keeps between
// callbacks.
const maxKeptOut = 1 << 20

// OnOpen sets up a connection's state.
func (b *Broker) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	c.SetContext(&connState{})
	b.stats.connections.Add(1)
	return nil, gnet.None
}

// OnClose releases what a connection still holds.
func (b *Broker) OnClose(c gnet.Conn, err error) gnet.Action {
	b.stats.connections.Add(-1)
	cs, _ := c.Context().(*connState)
	if cs == nil {
		return gnet.None
	}
	for _, s := range cs.slots {
		if s.consume != nil {
			b.unpark(s.consume)
		}
		if s.async {
			b.stats.pending.Add(-1)
		}
	}
	cs.slots = nil
	if cs.big != nil {
		bytebufferpool.Put(cs.big)
		cs.big = nil
	}
	b.stalledMu.Lock()
	delete(b.stalled, c)
	b.stalledMu.Unlock()
	return gnet.None
}

// OnTraffic answers what can be answered: completed slots first, then new
// frames, as long as the connection's output is not backed up.
func (b *Broker) OnTraffic(c gnet.Conn) gnet.Action {
	cs := c.Context().(*connState)
	b.advance(c, cs)
	action := gnet.None
	if cs.fatal == nil {
		action = b.readFrames(c, cs)
	}
	if cs.fatal == nil && action == gnet.None {
		b.advance(c, cs) // answers the frames just read filed behind nothing pending
	}
	b.flush(c, cs)
	if cs.fatal != nil {
		return gnet.Close
	}
	return action
}

// readFrames handles every whole frame buffered, stopping when the output is
// backed up (backpressure: the client must read before it may send more).
func (b *Broker) readFrames(c gnet.Conn, cs *connState) gnet.Action {
	for cs.fatal == nil {
		if b.backedUp(c, cs) {
			if c.InboundBuffered() > b.cfg.MaxFrameSize+b.cfg.MaxOutboundBytes {
				b.cfg.Logger.Warn("closing a connection that sends without reading", "remote", c.RemoteAddr())
				return gnet.Close
			}
			return gnet.None
		}
		if cs.big != nil {
			// A large frame arriving in pieces: gather it in one buffer.
			if !b.gatherBig(c, cs) {
				return gnet.None
			}
			b.handle(c, cs, cs.big.B)
			bytebufferpool.Put(cs.big)
			cs.big = nil
			continue
		}
		if c.InboundBuffered() < protocol.FrameLengthSize {
			return gnet.None
		}
		hdr, _ := c.Peek(protocol.FrameLengthSize)
		size, err := protocol.PeekFrame(hdr, b.cfg.MaxFrameSize)
		if err != nil && !errors.Is(err, protocol.ErrShortFrame) {
			// Too large or malformed: answer, then close, since the stream
			// cannot be trusted. Nothing of the frame is buffered here.
			b.stats.badFrame.Add(1)
			h, _, _ := protocol.ParseRequestHeader(peekUpTo(c, protocol.HeaderSize))
			b.respondError(cs, h.Op, h.CorrID, err)
			return gnet.Close
		}
		if c.InboundBuffered() < size {
			if size >= bigFrame {
				// The buffer grows as bytes arrive, not to the declared
				// size: a client must send what it announces.
				cs.big, cs.bigSize = bytebufferpool.Get(), size
				cs.big.B = cs.big.B[:0]
				b.gatherBig(c, cs)
			}
			return gnet.None // wait for the rest of the frame
		}
		frame, err := c.Peek(size)
		if err != nil {
			return gnet.None
		}
		b.handle(c, cs, frame)
		_, _ = c.Discard(size)
	}
	return gnet.None
}

// bigFrame is the size from which a frame that arrives in pieces is
// gathered into a buffer of its own as it comes, rather than left to
// gnet's inbound ring buffer, which grows by copying and hands a frame that
// wraps around it out as one more copy.
const bigFrame = 256 << 10

// gatherBig moves what gnet buffered of the large frame being gathered into
// cs.big and reports whether the frame is whole.
func (b *Broker) gatherBig(c gnet.Conn, cs *connState) bool {
	need := cs.bigSize - len(cs.big.B)
	if n := min(need, c.InboundBuffered()); n > 0 {
		chunk, err := c.Next(n)
		if err != nil {
			return false
		}
		cs.big.B = append(cs.big.B, chunk...)
	}
	return len(cs.big.B) == cs.bigSize
}

func peekUpTo(c gnet.Conn, n int) []byte {
	n = min(n, c.InboundBuffered())
	b, _ := c.Peek(n)
	return b
}

func (b *Broker) backedUp(c gnet.Conn, cs *connState) bool {
	if len(cs.slots) >= b.cfg.MaxPending {
		return true // slot completions wake the connection
	}
	if c.OutboundBuffered()+len(cs.out) > b.cfg.MaxOutboundBytes {
		b.stall(c)
		return true
	}
	// Produces copied for the connection's goroutine count too: their
	// completion wakes the connection.
	return cs.queued.Load() > int64(b.cfg.MaxOutboundBytes)
}

// advance sends the responses at the head of the queue that are ready.
func (b *Broker) advance(c gnet.Conn, cs *connState) {
	for len(cs.slots) > 0 && cs.fatal == nil {
		s := cs.slots[0]
		if s.consume != nil {
			if c.OutboundBuffered()+len(cs.out) > b.cfg.MaxOutboundBytes {
				b.stall(c) // resume once the client has read
				return
			}
			if !b.serveConsume(c, cs, s.consume) || len(cs.slots) == 0 || cs.fatal != nil {
				// Not ready, or a failed write closed the connection
				// (gnet calls OnClose from inside Write).
				return
			}
		} else {
			cs.mu.Lock()
			done, resp := s.done, s.resp
			cs.mu.Unlock()
			if !done {
				return
			}
			cs.out = append(cs.out, resp...)
			if s.async {
				b.stats.pending.Add(-1)
			}
		}
		cs.slots[0] = nil
		cs.slots = cs.slots[1:]
	}
}

// flush writes the gathered output; gnet copies what the socket does not take.
func (b *Broker) flush(c gnet.Conn, cs *connState) {
	if len(cs.out) > 0 {
		if _, err := c.Write(cs.out); err != nil {
			cs.fatal = err
		}
	}
	if cap(cs.out) > maxKeptOut {
		cs.out = nil
	} else {
		cs.out = cs.out[:0]
	}
}

// begin returns the buffer a ready response is appended to: the output if
// nothing waits before it, a fresh slice otherwise; end files it.
func (cs *connState) begin() []byte {
	if len(cs.slots) == 0 {
		return cs.out
	}
	return nil
}

func (cs *connState) end(resp []byte) {
	if len(cs.slots) == 0 {
		cs.out = resp
		return
	}
	cs.slots = append(cs.slots, &slot{done: true, resp: resp})
}

func (b *Broker) respondError(cs *connState, op protocol.Op, corrID uint32, err error) {
	if errors.Is(err, protocol.ErrMalformed) || errors.Is(err, protocol.ErrFrameTooLarge) {
		// The stream cannot be trusted past this frame: answer now, ahead of
		// anything still pending, since the connection closes next.
		cs.out = b.appendError(cs.out, op, corrID, err)
		cs.fatal = err
		return
	}
	cs.end(b.appendError(cs.begin(), op, corrID, err))
}

func (b *Broker) appendError(dst []byte, op protocol.Op, corrID uint32, err error) []byte {
	b.stats.errors.Add(1)
	code := codeOf(err)
	if code == protocol.CodeUnknown {
		b.cfg.Logger.Error("request failed", "op", op.String(), "err", err)
	}
	return protocol.AppendErrorResponse(dst, op, corrID, code, clientMessage(err, code))
}

// handle serves one whole request frame, valid until it returns.
//
// Requests run in the order they arrive. With fsync on, a produce waits for
// the disk on a goroutine; while one is in flight on a connection, the
// storage requests after it (produce, topic admin, truncate) join its
// queue and run on that goroutine in order, so consecutive produces to one
// topic are committed together and get offsets in request order. Consumes
// run on the event loop when their turn comes (see advance).
func (b *Broker) handle(c gnet.Conn, cs *connState, frame []byte) {
	b.stats.requests.Add(1)
	start := b.clock()
	if op, later := b.serve(c, cs, frame, start); !later {
		b.observe(op, false, start)
	}
}

// serve is handle's body. It returns the request's op and whether the
// request is answered later (queued or a consume), which observes itself.
func (b *Broker) serve(c gnet.Conn, cs *connState, frame []byte, start time.Time) (op protocol.Op, later bool) {
	h, payload, err := protocol.ParseRequestHeader(frame)
	if err != nil {
		b.respondError(cs, h.Op, h.CorrID, err)
		return h.Op, false
	}
	if b.stopping.Load() {
		b.respondError(cs, h.Op, h.CorrID, errShuttingDown)
		return
	}
	var jb *job
	switch h.Op {
	case protocol.OpPing:
		if err := protocol.ParsePingRequest(payload); err != nil {
			b.respondError(cs, h.Op, h.CorrID, err)
			return h.Op, false
		}
		cs.end(protocol.AppendEmptyResponse(cs.begin(), h.Op, h.CorrID))
		return h.Op, false
	case protocol.OpConsume:
		b.handleConsume(c, cs, h, payload, start)
		return h.Op, true
	case protocol.OpCreateTopic, protocol.OpDeleteTopic, protocol.OpTopicInfo:
		jb, err = b.topicJob(h, payload)
	case protocol.OpListTopics:
		jb, err = b.listJob(h, payload)
	case protocol.OpTruncate:
		jb, err = b.truncateJob(h, payload)
	case protocol.OpProduce:
		jb, err = b.produceJob(h, payload)
	}
	if err != nil {
		b.respondError(cs, h.Op, h.CorrID, err)
		return h.Op, false
	}
	cs.mu.Lock()
	queued := cs.working
	cs.mu.Unlock()
	if !queued && !b.offLoop(h.Op) {
		// Nothing runs before it: run it here, on the loop.
		cs.end(b.runJobs(cs.begin(), []*job{jb}))
		return h.Op, false
	}
	jb.start = start
	b.queueJob(c, cs, jb)
	return h.Op, true
}

// offLoop reports whether op may wait on the disk and so runs on the
// connection's goroutine: create, delete and truncate (directory syncs,
// file removals), and produce when appends fsync. Info, list and produce
// without fsync are memory and page-cache work.
func (b *Broker) offLoop(op protocol.Op) bool {
	switch op {
	case protocol.OpCreateTopic, protocol.OpDeleteTopic, protocol.OpTruncate:
		return true
	case protocol.OpProduce:
		return b.fsync
	}
	return false
}

var errShuttingDown = &protocol.Error{Code: protocol.CodeShuttingDown, Message: "server is shutting down"}

// job is a parsed storage request; its fields are copies that outlive the
// frame.
type job struct {
	op     protocol.Op
	corrID uint32
	topic  string
	// produce
	flags protocol.ProduceFlags
	batch *bytebufferpool.ByteBuffer // pooled copy; nil when run on the loop
	raw   []byte                     // the batch bytes
	// list
	prefix string
	regex  *regexp.Regexp
	// truncate
	by     protocol.TruncateBy
	before int64

	slot  *slot
	start time.Time // when the request arrived, for Config.ObserveRequest
}

func (b *Broker) topicJob(h protocol.RequestHeader, payload []byte) (*job, error) {
	req, err := protocol.ParseTopicRequest(payload)
	if err != nil {
		return nil, err
	}
	return &job{op: h.Op, corrID: h.CorrID, topic: string(req.Topic)}, nil
}

func (b *Broker) listJob(h protocol.RequestHeader, payload []byte) (*job, error) {
	req, err := protocol.ParseListTopicsRequest(payload)
	if err != nil {
		return nil, err
	}
	j := &job{op: h.Op, corrID: h.CorrID, prefix: string(req.Prefix)}
	if len(req.Regex) > 0 {
		if j.regex, err = regexp.Compile(string(req.Regex)); err != nil {
			return nil, fmt.Errorf("%w: regex: %w", protocol.ErrInvalidArgument, err)
		}
	}
	return j, nil
}

func (b *Broker) truncateJob(h protocol.RequestHeader, payload []byte) (*job, error) {
	req, err := protocol.ParseTruncateRequest(payload)
	if err != nil {
		return nil, err
	}
	return &job{op: h.Op, corrID: h.CorrID, topic: string(req.Topic), by: req.By, before: req.Before}, nil
}

func (b *Broker) produceJob(h protocol.RequestHeader, payload []byte) (*job, error) {
	req, err := protocol.ParseProduceRequest(payload)
	if err != nil {
		return nil, err
	}
	// The batch borrows from the frame: fine on the loop, copied if queued.
	return &job{op: h.Op, corrID: h.CorrID, topic: string(req.Topic), flags: req.Flags, raw: req.Batch}, nil
}

// queueJob queues j behind the connection's running jobs, starting the
// goroutine that runs them if none is. Runs on the loop.
func (b *Broker) queueJob(c gnet.Conn, cs *connState, j *job) {
	if j.raw != nil {
		j.batch = bytebufferpool.Get()
		j.batch.B = append(j.batch.B[:0], j.raw...)
		j.raw = j.batch.B
		cs.queued.Add(int64(len(j.raw)))
	}
	j.slot = &slot{async: true}
	cs.slots = append(cs.slots, j.slot)
	b.stats.pending.Add(1)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if !cs.working {
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
		cs.working = true
		go b.work(c, cs)
	}
	cs.jobs = append(cs.jobs, j)
	if cs.more != nil {
		close(cs.more)
		cs.more = nil
	}
}

// work runs a connection's queued jobs in order until none is left.
func (b *Broker) work(c gnet.Conn, cs *connState) {
	defer b.inflight.Done()
	for {
		cs.mu.Lock()
		jobs := cs.jobs
		cs.jobs = nil
		if len(jobs) == 0 {
			cs.working = false
			cs.mu.Unlock()
			return
		}
		cs.mu.Unlock()
		jobs = b.gather(cs, jobs)
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
				cs.lastGroup, cs.lastCommit = n, time.Since(start)
			}
			cs.mu.Lock()
			for i, j := range group {
				j.slot.resp, j.slot.done = resps[i], true
			}
			cs.mu.Unlock()
			for _, j := range group {
				b.observe(j.op, false, j.start)
			}
			for _, j := range group {
				if j.batch != nil {
					cs.queued.Add(-int64(len(j.raw)))
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
func (b *Broker) gather(cs *connState, jobs []*job) []*job {
	if !b.fsync || cs.lastGroup <= 1 || len(jobs) >= cs.lastGroup || jobs[0].op != protocol.OpProduce {
		return jobs
	}
	timer := time.NewTimer(cs.lastCommit / 2)
	defer timer.Stop()
	for len(jobs) < cs.lastGroup {
		cs.mu.Lock()
		if len(cs.jobs) > 0 {
			jobs = append(jobs, cs.jobs...)
			cs.jobs = nil
			cs.mu.Unlock()
			continue
		}
		more := make(chan struct{})
		cs.more = more
		cs.mu.Unlock()
		select {
		case <-more:
		case <-timer.C:
			cs.mu.Lock()
			cs.more = nil
			cs.mu.Unlock()
			return jobs
		}
	}
	return jobs
}

// runJobs runs jobs and appends their responses to dst, in order.
func (b *Broker) runJobs(dst []byte, jobs []*job) []byte {
	for _, r := range b.runJobsEach(jobs) {
		dst = append(dst, r...)
	}
	return dst
}

// runJobsEach runs jobs, all produces to one topic or a single other job,
// and returns one response each.
func (b *Broker) runJobsEach(jobs []*job) [][]byte {
	resps := make([][]byte, len(jobs))
	if jobs[0].op == protocol.OpProduce {
		b.produce(jobs, resps)
		return resps
	}
	for i, j := range jobs {
		resps[i] = b.runJob(nil, j)
	}
	return resps
}

func (b *Broker) runJob(dst []byte, j *job) []byte {
	var err error
	switch j.op {
	case protocol.OpCreateTopic:
		err = b.store.CreateTopic(j.topic)
	case protocol.OpDeleteTopic:
		err = b.store.DeleteTopic(j.topic)
	case protocol.OpTopicInfo:
		var info storage.TopicInfo
		if info, err = b.store.Info(j.topic); err == nil {
			return protocol.AppendTopicInfoResponse(dst, j.corrID, protocol.TopicInfoResponse{
				OldestOffset: info.Oldest, NextOffset: info.Next, Bytes: info.Bytes, Segments: uint32(info.Segments),
			})
		}
	case protocol.OpListTopics:
		names := b.store.ListTopics(j.prefix)
		if j.regex != nil {
			kept := names[:0]
			for _, n := range names {
				if j.regex.MatchString(n) {
					kept = append(kept, n)
				}
			}
			names = kept
		}
		return protocol.AppendListTopicsResponse(dst, j.corrID, names)
	case protocol.OpTruncate:
		var oldest int64
		if oldest, err = b.truncate(j); err == nil {
			return protocol.AppendTruncateResponse(dst, j.corrID, oldest)
		}
	}
	if err != nil {
		return b.appendError(dst, j.op, j.corrID, err)
	}
	return protocol.AppendEmptyResponse(dst, j.op, j.corrID)
}

func (b *Broker) truncate(j *job) (int64, error) {
	info, err := b.store.Info(j.topic)
	if err != nil {
		return 0, err
	}
	switch j.by {
	case protocol.TruncateByOffset:
		if j.before < 0 || j.before > info.Next {
			return 0, fmt.Errorf("%w: truncate before %d: the topic's offsets are [%d, %d]", storage.ErrOffsetOutOfRange, j.before, info.Oldest, info.Next)
		}
		err = b.store.Truncate(j.topic, j.before)
	case protocol.TruncateByTime:
		err = b.store.TruncateTime(j.topic, time.Unix(0, j.before))
	}
	if err == nil {
		info, err = b.store.Info(j.topic)
	}
	return info.Oldest, err
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
