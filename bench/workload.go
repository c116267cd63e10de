package bench

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/haraqa/haraqa/client"
)

// maxConsecutiveErrors stops a producer or consumer whose requests keep
// failing (a server gone away), so a broken run ends instead of retrying
// for its whole length.
const maxConsecutiveErrors = 10

// live are the running totals the sampler and the progress bar read.
type live struct {
	produced, consumed atomic.Int64 // messages
}

// errorLog counts failed requests and keeps the first error.
type errorLog struct {
	n     atomic.Int64
	mu    sync.Mutex
	first error
}

func (e *errorLog) add(err error) {
	if e.n.Add(1) == 1 {
		e.mu.Lock()
		e.first = err
		e.mu.Unlock()
	}
}

// reset forgets the errors counted so far. No request may be running.
func (e *errorLog) reset() {
	e.n.Store(0)
	e.mu.Lock()
	e.first = nil
	e.mu.Unlock()
}

func (e *errorLog) firstErr() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.first
}

// bound ends a phase: after messages in all (split among the workers) or
// after duration, whichever is set.
type bound struct {
	messages int64
	duration time.Duration
}

// share returns worker i of n's part of the messages (0 when by duration).
func (b bound) share(i, n int) int64 {
	if b.messages == 0 {
		return 0
	}
	q := b.messages / int64(n)
	if int64(i) < b.messages%int64(n) {
		q++
	}
	return q
}

// producerStats is what one producer did.
type producerStats struct {
	id     uint32
	topic  int
	sent   uint64 // sequence numbers used: messages sent, acknowledged or not
	acked  int64
	errors int64
	end    time.Time // when its last request finished
	hist   *hdrhistogram.Histogram
}

// consumerStats is what one consumer did.
type consumerStats struct {
	checkers map[int]*checker // by topic index
	received int64
	errors   int64
	last     time.Time // when its last message arrived
	hist     *hdrhistogram.Histogram
}

// produceResult is a producing phase's outcome.
type produceResult struct {
	start     time.Time
	end       time.Time // the last producer's last answer
	producers []*producerStats
}

func (p produceResult) acked() (n int64) {
	for _, s := range p.producers {
		n += s.acked
	}
	return n
}

// sentByTopic returns, for each topic index, the sequence numbers used by
// each producer that wrote it.
func (p produceResult) sentByTopic() map[int]map[uint32]uint64 {
	out := make(map[int]map[uint32]uint64)
	for _, s := range p.producers {
		if out[s.topic] == nil {
			out[s.topic] = make(map[uint32]uint64)
		}
		out[s.topic][s.id] = s.sent
	}
	return out
}

// clients hands out the client of each worker: a shared one, or one each,
// dialed before the timed part of a phase starts.
type clients struct {
	r      *runner
	shared *client.Client
	own    []*client.Client
}

func (r *runner) newClients(ctx context.Context, n int) (*clients, error) {
	cs := &clients{r: r, shared: r.shared}
	if r.shared != nil {
		return cs, nil
	}
	for range n {
		c, err := r.dial(ctx)
		if err != nil {
			cs.close()
			return nil, err
		}
		cs.own = append(cs.own, c)
	}
	return cs, nil
}

func (cs *clients) get(i int) *client.Client {
	if cs.shared != nil {
		return cs.shared
	}
	return cs.own[i]
}

func (cs *clients) close() {
	for _, c := range cs.own {
		c.Close()
	}
}

// produce runs cfg.Producers producers on topics until b. Producer i
// writes topics[i mod len(topics)] with id idBase+i. With paced, the
// producers follow the configured rate.
func (r *runner) produce(ctx context.Context, topics []string, b bound, idBase uint32, paced bool) (produceResult, error) {
	n := r.cfg.Producers
	cs, err := r.newClients(ctx, n)
	if err != nil {
		return produceResult{}, err
	}
	defer cs.close()
	res := produceResult{producers: make([]*producerStats, n)}
	for i := range res.producers {
		res.producers[i] = &producerStats{id: idBase + uint32(i), topic: i % len(topics), hist: newHist()}
	}
	var stop atomic.Bool
	res.start = time.Now()
	if b.duration > 0 {
		t := time.AfterFunc(b.duration, func() { stop.Store(true) })
		defer t.Stop()
	}
	rate := 0.0
	if paced && r.cfg.Rate > 0 {
		rate = r.cfg.Rate / float64(n)
	}
	var wg sync.WaitGroup
	for i, st := range res.producers {
		wg.Go(func() {
			w := producerWork{c: cs.get(i), topic: topics[st.topic], st: st, quota: b.share(i, n),
				stop: &stop, rate: rate, start: res.start}
			if r.cfg.Batch == 1 && r.cfg.Single == SingleProducer {
				r.runProducer(ctx, w)
			} else {
				r.runProduce(ctx, w)
			}
			st.end = time.Now()
		})
	}
	wg.Wait()
	for _, st := range res.producers {
		if st.end.After(res.end) {
			res.end = st.end
		}
	}
	if ctx.Err() != nil {
		return res, ErrInterrupted
	}
	return res, nil
}

// producerWork is one producer's assignment.
type producerWork struct {
	c     *client.Client
	topic string
	st    *producerStats
	quota int64 // messages; 0: until stop
	stop  *atomic.Bool
	rate  float64 // messages per second; 0: as fast as acknowledged
	start time.Time
}

// next returns how many messages the next request carries (0: done) and
// its intended send time, sleeping until then when paced.
func (w *producerWork) next(ctx context.Context, batch int, k int64) (int, time.Time) {
	n := batch
	if w.quota > 0 {
		n = int(min(int64(n), w.quota-int64(w.st.sent)))
		if n <= 0 {
			return 0, time.Time{}
		}
	}
	if w.stop.Load() || ctx.Err() != nil {
		return 0, time.Time{}
	}
	if w.rate <= 0 {
		return n, time.Now()
	}
	// Open model: request k is due at start + k*batch/rate, whether or not
	// the server kept up; latency counts from then.
	due := w.start.Add(time.Duration(float64(k) * float64(batch) / w.rate * float64(time.Second)))
	if time.Until(due) > 0 {
		if !sleepUntil(ctx, due) || w.stop.Load() {
			return 0, time.Time{}
		}
	}
	return n, due
}

// runProduce sends batches with Client.Produce, each waiting for its
// acknowledgement.
func (r *runner) runProduce(ctx context.Context, w producerWork) {
	msgs := make([][]byte, r.cfg.Batch)
	for i := range msgs {
		msgs[i] = r.pay.newMessage()
	}
	st := w.st
	failures := 0
	for k := int64(0); ; k++ {
		n, due := w.next(ctx, r.cfg.Batch, k)
		if n == 0 {
			return
		}
		ts := due.UnixNano()
		for j := range n {
			r.pay.stamp(msgs[j], st.id, st.sent+uint64(j), ts)
		}
		_, err := w.c.Produce(ctx, w.topic, msgs[:n]...)
		done := time.Now()
		st.sent += uint64(n)
		if err != nil {
			if r.failed(ctx, err, &st.errors, &failures) {
				return
			}
			continue
		}
		failures = 0
		st.acked += int64(n)
		r.live.produced.Add(int64(n))
		record(st.hist, done.Sub(due))
	}
}

// runProducer sends single messages through a batching client.Producer; a
// collector waits for the futures in order and records each message's
// latency from its send (or due) time to its acknowledgement.
func (r *runner) runProducer(ctx context.Context, w producerWork) {
	type pending struct {
		f   *client.Future
		due time.Time
	}
	p := w.c.NewProducer(w.topic, client.WithLinger(r.cfg.Linger), client.WithMaxInFlight(r.cfg.MaxInFlight))
	ch := make(chan pending, 4096)
	st := w.st
	var collected sync.WaitGroup
	var stopSending atomic.Bool
	collected.Go(func() {
		failures := 0
		for pd := range ch {
			_, err := pd.f.Wait(context.Background()) // every future completes: Close flushes
			if err != nil {
				if r.failed(context.Background(), err, &st.errors, &failures) {
					stopSending.Store(true)
				}
				continue
			}
			failures = 0
			st.acked++
			r.live.produced.Add(1)
			record(st.hist, time.Since(pd.due))
		}
	})
	msg := r.pay.newMessage()
	for k := int64(0); !stopSending.Load(); k++ {
		n, due := w.next(ctx, 1, k)
		if n == 0 {
			break
		}
		r.pay.stamp(msg, st.id, st.sent, due.UnixNano())
		f, err := p.Send(ctx, msg)
		st.sent++
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			// Not sent at all: no sequence number is lost.
			st.sent--
			r.errs.add(err)
			break
		}
		ch <- pending{f, due}
	}
	if err := p.Close(); err != nil && ctx.Err() == nil {
		r.errs.add(err)
	}
	close(ch)
	collected.Wait()
}

// consumeRange is a part of a topic one consumer reads: offsets [from, to).
type consumeRange struct {
	topic    int
	from, to int64
}

// splitRanges assigns the topics' offsets [0, ends[t]) to n consumers.
// With at least as many consumers as topics, consumer j reads a part of
// topic j mod T, each topic's offsets split evenly among its consumers;
// with fewer, consumer j reads whole topics t with t mod n == j.
func splitRanges(ends []int64, n int) [][]consumeRange {
	out := make([][]consumeRange, n)
	t := len(ends)
	if n < t {
		for i, end := range ends {
			out[i%n] = append(out[i%n], consumeRange{i, 0, end})
		}
		return out
	}
	for topic, end := range ends {
		var readers []int
		for j := topic; j < n; j += t {
			readers = append(readers, j)
		}
		k := int64(len(readers))
		for i, j := range readers {
			from, to := end*int64(i)/k, end*int64(i+1)/k
			out[j] = append(out[j], consumeRange{topic, from, to})
		}
	}
	return out
}

// consumeResult is a consuming phase's outcome.
type consumeResult struct {
	start, end time.Time
	consumers  []*consumerStats
}

// consume reads the ranges, one consumer each, once, with a client.Reader
// per range: each Next returns one response's messages, timed, while the
// Reader already asks for the next.
// Messages are checked for size and sequence, not checksum (the client
// has checked each batch's CRC).
func (r *runner) consume(ctx context.Context, topics []string, ranges [][]consumeRange) (consumeResult, error) {
	cs, err := r.newClients(ctx, len(ranges))
	if err != nil {
		return consumeResult{}, err
	}
	defer cs.close()
	res := consumeResult{consumers: make([]*consumerStats, len(ranges))}
	for i := range res.consumers {
		res.consumers[i] = &consumerStats{checkers: make(map[int]*checker), hist: newHist()}
	}
	var wg sync.WaitGroup
	res.start = time.Now()
	for i, st := range res.consumers {
		wg.Go(func() {
			c := cs.get(i)
			for _, rg := range ranges[i] {
				chk := st.checkers[rg.topic]
				if chk == nil {
					chk = newChecker(r.cfg.Size, false)
					st.checkers[rg.topic] = chk
				}
				r.consumeRange(ctx, c, topics[rg.topic], rg, st, chk)
			}
			st.last = time.Now()
		})
	}
	wg.Wait()
	for _, st := range res.consumers {
		if st.last.After(res.end) {
			res.end = st.last
		}
	}
	if ctx.Err() != nil {
		return res, ErrInterrupted
	}
	return res, nil
}

// consumeRange reads rg of topic with one Reader on c, checking each
// message with chk and counting in st, until the range is read, ctx ends
// or maxConsecutiveErrors reads in a row fail.
func (r *runner) consumeRange(ctx context.Context, c *client.Client, topic string, rg consumeRange, st *consumerStats, chk *checker) {
	rd, err := c.NewReader(topic, rg.from)
	if err != nil {
		st.errors++
		r.errs.add(err)
		return
	}
	defer rd.Close()
	failures := 0
	for off := rg.from; off < rg.to && ctx.Err() == nil; {
		t0 := time.Now()
		msgs, err := rd.Next(ctx)
		t1 := time.Now()
		if err != nil {
			if r.failed(ctx, err, &st.errors, &failures) {
				return
			}
			continue
		}
		failures = 0
		record(st.hist, t1.Sub(t0))
		got := int64(0)
		for _, m := range msgs {
			if m.Offset >= rg.to {
				break
			}
			chk.add(m.Value)
			got++
		}
		st.received += got
		r.live.consumed.Add(got)
		off = rd.Offset()
	}
}

// follower is a consumer of both mode: it follows one topic from offset 0
// until it has read up to target.
type follower struct {
	topic  int
	target atomic.Int64 // the topic's end once producing has stopped
	next   atomic.Int64 // offset after the last message read
	st     *consumerStats
	cancel context.CancelFunc
}

// both runs producers and followers at once: each follower reads its
// topic from the start with Client.Messages (long polls), verifies every
// message and records its end-to-end latency from the send time in its
// header. Once the producers stop, the followers read on to the topics'
// end; one that makes no progress for drainTimeout is stopped and what it
// missed is reported as gaps.
func (r *runner) both(ctx context.Context, topics []string, b bound, idBase uint32, paced bool) (produceResult, consumeResult, error) {
	nc := r.cfg.Consumers
	cs, err := r.newClients(ctx, nc)
	if err != nil {
		return produceResult{}, consumeResult{}, err
	}
	defer cs.close()
	fs := make([]*follower, nc)
	cres := consumeResult{consumers: make([]*consumerStats, nc)}
	var wg sync.WaitGroup
	for j := range fs {
		st := &consumerStats{checkers: map[int]*checker{j % len(topics): newChecker(r.cfg.Size, true)}, hist: newHist()}
		cres.consumers[j] = st
		fctx, cancel := context.WithCancel(ctx)
		f := &follower{topic: j % len(topics), st: st, cancel: cancel}
		f.target.Store(math.MaxInt64)
		fs[j] = f
		wg.Go(func() {
			defer cancel()
			r.follow(fctx, cs.get(j), topics[f.topic], f)
		})
	}
	cres.start = time.Now()
	pres, perr := r.produce(ctx, topics, b, idBase, paced)
	if perr == nil {
		perr = r.drain(ctx, cs.get(0), topics, fs)
	}
	for _, f := range fs {
		if perr != nil {
			f.cancel()
		}
	}
	wg.Wait()
	cres.end = pres.end
	for _, st := range cres.consumers {
		if st.last.After(cres.end) {
			cres.end = st.last
		}
	}
	if ctx.Err() != nil {
		return pres, cres, ErrInterrupted
	}
	return pres, cres, perr
}

// drainTimeout is how long a follower may go without a message, once the
// producers have stopped, before it is given up on.
const drainTimeout = 10 * time.Second

// drain sets each follower's target to its topic's end and waits until
// every follower has reached it or stalled.
func (r *runner) drain(ctx context.Context, c *client.Client, topics []string, fs []*follower) error {
	ends := make([]int64, len(topics))
	for i, t := range topics {
		info, err := c.TopicInfo(ctx, t)
		if err != nil {
			return err
		}
		ends[i] = info.Next
	}
	for _, f := range fs {
		f.target.Store(ends[f.topic])
	}
	progress := int64(-1)
	lastMove := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		done, sum := true, int64(0)
		for _, f := range fs {
			next := f.next.Load()
			sum += next
			if next >= f.target.Load() {
				f.cancel() // it may be parked in a long poll after its last message
			} else {
				done = false
			}
		}
		if done {
			return nil
		}
		if sum != progress {
			progress, lastMove = sum, time.Now()
		} else if time.Since(lastMove) > drainTimeout {
			for _, f := range fs {
				f.cancel()
			}
			return nil // what is missing shows as gaps
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ErrInterrupted
		}
	}
}

// follow reads topic from offset 0 until f.target or ctx ends.
func (r *runner) follow(ctx context.Context, c *client.Client, topic string, f *follower) {
	st := f.st
	chk := st.checkers[f.topic]
	rd, err := c.NewReader(topic, 0)
	if err != nil {
		st.errors++
		r.errs.add(err)
		return
	}
	defer rd.Close()
	failures := 0
	for ctx.Err() == nil {
		msgs, err := rd.Next(ctx) // waits with long polls at the end
		if err != nil {
			if r.failed(ctx, err, &st.errors, &failures) {
				return
			}
			continue
		}
		failures = 0
		now := time.Now()
		for _, m := range msgs {
			if h, ok := chk.add(m.Value); ok {
				record(st.hist, now.Sub(time.Unix(0, h.sendNs)))
			}
			st.received++
			r.live.consumed.Add(1)
			f.next.Store(m.Offset + 1)
			if m.Offset+1 >= f.target.Load() {
				st.last = now
				return
			}
		}
		st.last = now
	}
}

// failed records err, a failed request of a worker whose error count is
// errors and whose failures in a row are failures, and reports whether the
// worker should stop: ctx ended (then err is not counted), or
// maxConsecutiveErrors requests in a row failed.
func (r *runner) failed(ctx context.Context, err error, errors *int64, failures *int) bool {
	if ctx.Err() != nil {
		return true
	}
	*errors++
	r.errs.add(err)
	*failures++
	return *failures >= maxConsecutiveErrors
}
