package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/client"
)

// idemTopics are the topics the idempotent producers write, in turn.
var idemTopics = []string{"idem-a", "idem-b"}

const (
	// idemWindow is each producer client's request timeout: how long a
	// batch is sent again after its first send. It spans a kill, the
	// downtime and a restart that reads every volume, several times over.
	idemWindow = 60 * time.Second
	// idemBackoff is the first wait between resends (doubled up to the
	// client's 1 s ceiling), so producers find a restarted server soon.
	idemBackoff = 10 * time.Millisecond
	// idemProgress is how many messages the producers must have had
	// acknowledged by a server before it is killed, so each kill finds
	// them sending; idemProgressWait bounds the wait for them.
	idemProgress     = 500
	idemProgressWait = 30 * time.Second
	// idemPace: each producer sleeps a millisecond every idemPace
	// messages, so that ten cycles write tens of megabytes, not gigabytes
	// that every restart would have to read.
	idemPace = 25
)

// runIdempotent: idempotent Producers sending without pause through
// -cycles kills of the server, each restarted on the same port and
// volumes while the producers resend; then every message checked once.
func runIdempotent(ctx context.Context, e *env) (string, error) {
	vols := e.volumes("idempotent", 3)
	port, err := freePort()
	if err != nil {
		return "no port", err
	}
	spec := func(i int) serverSpec {
		return serverSpec{bin: e.bin, volumes: vols, tcp: port,
			args: []string{"-entries", "500", "-fsync", fsyncPolicies[i%2], "-ballast", "0"}}
	}
	s, err := start(spec(0))
	if err != nil {
		return "first start", err
	}
	defer func() {
		if s != nil && s.alive() {
			s.kill()
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ps, err := startIdemProducers(ctx, s.addr, e.cfg.producers)
	if err != nil {
		return "producers", err
	}
	defer ps.closeClients()
	n := e.cfg.cycles
	var downs time.Duration
	for i := range n {
		if err := ps.progress(ctx, idemProgress, idemProgressWait); err != nil {
			return ps.partial(i), fmt.Errorf("cycle %d (fsync %s): %w\n%s", i, fsyncPolicies[i%2], err, tail(s.output()))
		}
		time.Sleep(50*time.Millisecond + time.Duration(e.rnd.Int64N(int64(700*time.Millisecond))))
		s.kill()
		begun := time.Now()
		time.Sleep(time.Duration(e.rnd.Int64N(int64(300 * time.Millisecond))))
		if s, err = start(spec(i + 1)); err != nil {
			return ps.partial(i), fmt.Errorf("cycle %d: restart on port %d: %w", i, port, err)
		}
		downs += time.Since(begun)
	}
	if err := ps.progress(ctx, idemProgress, idemProgressWait); err != nil {
		return ps.partial(n), fmt.Errorf("after the last restart: %w\n%s", err, tail(s.output()))
	}
	res, err := ps.finish(ctx)
	if err != nil {
		return ps.partial(n), fmt.Errorf("%w\n%s", err, tail(s.output()))
	}
	c, err := s.dial(ctx)
	if err != nil {
		return ps.partial(n), err
	}
	defer c.Close()
	check := newOnceCheck(ps.topics(), res.sent)
	for _, t := range idemTopics {
		if err := readOnce(ctx, c, t, check); err != nil {
			return ps.partial(n), err
		}
	}
	r, err := check.finish()
	verdict := "each read once at its Future's offset, in Send order"
	if err != nil {
		verdict = "not all read once at their Futures' offsets"
	}
	line := fmt.Sprintf("%d producers, %d messages sent over %d kill -9 cycles (fsync never and always in turn, %s down on average, the same port): %d acknowledged, %s; %d Futures failed (%d of those stored, once); %d read in all; duplicates %d; %d reconnects, %d messages sent again, %d client errors",
		len(ps.p), r.acked+r.failed, n, (downs / time.Duration(max(n, 1))).Round(time.Millisecond),
		r.acked, verdict, r.failed, r.failedStored, r.present, r.duplicates, res.stats.Reconnects, res.resent, res.stats.Errors)
	if err != nil {
		return line, err
	}
	if r.failed > 0 {
		return line, fmt.Errorf("%d Futures failed within the %s window: %w", r.failed, idemWindow, res.firstErr)
	}
	return line, s.stop()
}

// readOnce feeds every message of topic, from offset 0 to its end, to check.
func readOnce(ctx context.Context, c *client.Client, topic string, check *onceCheck) error {
	info, err := c.TopicInfo(ctx, topic)
	if err != nil {
		return fmt.Errorf("%s: topic info: %w", topic, err)
	}
	if info.Oldest != 0 {
		return fmt.Errorf("%s: oldest offset %d, want 0 (nothing was truncated)", topic, info.Oldest)
	}
	var msgs []client.Message
	for off := int64(0); off < info.Next; {
		if msgs, _, err = c.ConsumeInto(ctx, msgs[:0], topic, off, 2000); err != nil {
			return fmt.Errorf("%s: consume at %d of %d: %w", topic, off, info.Next, err)
		}
		if len(msgs) == 0 {
			return fmt.Errorf("%s: consume at %d returned nothing, next offset %d", topic, off, info.Next)
		}
		for _, m := range msgs {
			if m.Offset != off {
				return fmt.Errorf("%s: offsets not dense: got %d, want %d", topic, m.Offset, off)
			}
			check.message(topic, off, m.Value)
			off++
		}
	}
	return nil
}

// idemProducer is one client with one idempotent Producer, sending
// payload(id, 0), payload(id, 1), ... until told to stop.
type idemProducer struct {
	id      int
	topic   string
	c       *client.Client
	p       *client.Producer
	futures chan *client.Future // to the collector, in Send order
	offs    []int64             // the collector's: sequence -> offset, or futureFailed
	failErr error               // the collector's: the first Future's error
	sendErr error               // the sender's: why Send failed
}

// idemProducers are the phase's producers and their goroutines.
type idemProducers struct {
	p    []*idemProducer
	stop atomic.Bool
	wg   sync.WaitGroup // senders and collectors
}

// idemResult is what the producers did, once finished.
type idemResult struct {
	sent     map[int][]int64 // producer -> sequence -> offset, or futureFailed
	stats    client.Stats    // summed over the clients
	resent   int64           // messages sent more than once (at least)
	firstErr error           // the first failed Future's error
}

// startIdemProducers dials n clients, each with its own Producer, and
// starts them sending.
func startIdemProducers(ctx context.Context, addr string, n int) (*idemProducers, error) {
	ps := &idemProducers{}
	for i := range n {
		c, err := client.Dial(ctx, addr, client.WithDialTimeout(time.Second),
			client.WithRequestTimeout(idemWindow), client.WithRetries(1000, idemBackoff))
		if err != nil {
			ps.closeClients()
			return nil, fmt.Errorf("producer %d: %w", i, err)
		}
		// Batches of one message, ten or a hundred; four or eight in
		// flight; a linger of 2 ms, or none (Send writes the batch itself
		// when it can), every other pair.
		batch := []int{1, 10, 100}[i%3]
		linger := []time.Duration{2 * time.Millisecond, 0}[i/2%2]
		p := c.NewProducer(idemTopics[i%len(idemTopics)], client.WithBatchSize(batch),
			client.WithLinger(linger), client.WithMaxInFlight(4+4*(i%2)),
			client.WithMaxBuffered(20000, 16<<20))
		ps.p = append(ps.p, &idemProducer{id: i, topic: idemTopics[i%len(idemTopics)], c: c, p: p,
			futures: make(chan *client.Future, 4096)})
	}
	for _, ip := range ps.p {
		ps.wg.Go(func() { ip.send(ctx, &ps.stop) })
		ps.wg.Go(ip.collect)
	}
	return ps, nil
}

// send hands messages to the Producer until stop is set or Send fails.
func (ip *idemProducer) send(ctx context.Context, stop *atomic.Bool) {
	defer close(ip.futures)
	for seq := 0; !stop.Load(); seq++ {
		f, err := ip.p.Send(ctx, payload(ip.id, seq))
		if err != nil {
			ip.sendErr = err
			return
		}
		ip.futures <- f
		if seq%idemPace == idemPace-1 {
			time.Sleep(time.Millisecond)
		}
	}
}

// collect waits for each Future in turn and records its offset.
func (ip *idemProducer) collect() {
	for f := range ip.futures {
		off, err := f.Wait(context.Background()) // every Future ends within idemWindow
		if err != nil {
			off = futureFailed
			if ip.failErr == nil {
				ip.failErr = fmt.Errorf("producer %d S%d: %w", ip.id, len(ip.offs), err)
			}
		}
		ip.offs = append(ip.offs, off)
	}
}

// acked is the number of messages the servers acknowledged to all clients.
func (ps *idemProducers) acked() int64 {
	var n int64
	for _, ip := range ps.p {
		n += ip.c.Stats().MessagesAcked
	}
	return n
}

// progress waits until n more messages are acknowledged, or fails after wait.
func (ps *idemProducers) progress(ctx context.Context, n int64, wait time.Duration) error {
	from := ps.acked()
	deadline := time.Now().Add(wait)
	for ps.acked() < from+n {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d messages acknowledged in %s, want %d", ps.acked()-from, wait, n)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// finish stops the senders, flushes and closes every Producer and waits
// for every Future.
func (ps *idemProducers) finish(ctx context.Context) (idemResult, error) {
	ps.stop.Store(true)
	var errs []error
	for _, ip := range ps.p {
		fctx, cancel := context.WithTimeout(ctx, idemWindow+30*time.Second)
		err := ip.p.Flush(fctx)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("producer %d: flush: %w", ip.id, err))
		}
	}
	for _, ip := range ps.p {
		if err := ip.p.Close(); err != nil {
			errs = append(errs, fmt.Errorf("producer %d: close: %w", ip.id, err))
		}
	}
	ps.wg.Wait()
	res := idemResult{sent: make(map[int][]int64)}
	var handed int64
	for _, ip := range ps.p {
		if ip.sendErr != nil {
			errs = append(errs, fmt.Errorf("producer %d: send S%d: %w", ip.id, len(ip.offs), ip.sendErr))
		}
		if res.firstErr == nil {
			res.firstErr = ip.failErr
		}
		res.sent[ip.id] = ip.offs
		handed += int64(len(ip.offs))
		st := ip.c.Stats()
		res.stats.MessagesSent += st.MessagesSent
		res.stats.MessagesAcked += st.MessagesAcked
		res.stats.Errors += st.Errors
		res.stats.Reconnects += st.Reconnects
	}
	// Each batch is counted in MessagesSent at every send; one that never
	// reached a connection is counted not at all, so this is a floor.
	res.resent = max(res.stats.MessagesSent-handed, 0)
	return res, errors.Join(errs...)
}

// topics maps each producer to its topic.
func (ps *idemProducers) topics() map[int]string {
	m := make(map[int]string, len(ps.p))
	for _, ip := range ps.p {
		m[ip.id] = ip.topic
	}
	return m
}

// partial is the summary of a run that stopped at cycle i.
func (ps *idemProducers) partial(i int) string {
	return fmt.Sprintf("%d producers, %d messages acknowledged, stopped at cycle %d", len(ps.p), ps.acked(), i)
}

func (ps *idemProducers) closeClients() {
	ps.stop.Store(true)
	for _, ip := range ps.p {
		ip.c.Close()
	}
}
