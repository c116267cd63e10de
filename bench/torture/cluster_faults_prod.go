package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// The producers of the cluster-faults phase, each of one kind, each
// writing payload(id, 0), payload(id, 1), ... to one topic and keeping
// its own ledger: the offset each acknowledged message was given, and
// the times it went without an acknowledgement.

// cfKind is how a producer sends.
type cfKind string

const (
	// cfProducer: a client.Producer (idempotent, batches in flight).
	cfProducer cfKind = "producer"
	// cfSerial: client.Produce, idempotent, one batch at a time.
	cfSerial cfKind = "serial"
	// cfNonIdem: client.Produce with WithIdempotence(false).
	cfNonIdem cfKind = "nonidem"
	// cfHTTP: POST /topics/{topic} on a server's HTTP port, following
	// 307 redirects.
	cfHTTP cfKind = "http"
)

// idempotent reports whether the kind's batches carry a producer id.
func (k cfKind) idempotent() bool { return k == cfProducer || k == cfSerial }

const (
	// cfRequest is the request timeout of the idempotent producers: how
	// long a batch is sent again, to whichever server leads.
	cfRequest = 30 * time.Second
	// cfNonIdemTimeout bounds one produce of a non-idempotent producer,
	// Go or HTTP: after it the outcome is unknown and the batch is not
	// sent again; the next batch is new messages.
	cfNonIdemTimeout = 3 * time.Second
	// cfHTTPTimeout bounds one request of the HTTP producer (curl
	// --max-time): a leader that does not answer in time is suspect for
	// cfSuspect, and a 307 to it is not followed meanwhile.
	cfHTTPTimeout = 1500 * time.Millisecond
	cfSuspect     = 3 * time.Second
	// cfNoteGap is the time without an acknowledgement from which a
	// producer notes the gap, for the frozen window and the report.
	cfNoteGap = 100 * time.Millisecond
	// cfRate bounds each producer's messages a second, so that the phase
	// writes a few hundred megabytes, not gigabytes that every restart
	// would read: unpaced, the nine write 150,000 a second.
	cfRate = 700
)

// cfProd is one producer and its ledger.
type cfProd struct {
	id    int
	topic string
	kind  cfKind

	mu      sync.Mutex
	begun   time.Time     // when it began sending, for cfRate
	acks    map[int]int64 // sequence -> acknowledged offset
	sent    int           // sequences handed out
	lastAck time.Time
	gaps    []foGap // each time of cfNoteGap or more without an acknowledgement
	failed  int     // batches (Futures, for a Producer) that failed, not counted as acknowledged
	resent  int     // batches sent again after a refused connection (HTTP)
	errs    map[string]int
}

func newCfProd(id int, topic string, kind cfKind) *cfProd {
	now := time.Now()
	return &cfProd{id: id, topic: topic, kind: kind, begun: now, acks: map[int]int64{}, lastAck: now, errs: map[string]int{}}
}

// pace sleeps while the producer is ahead of cfRate. One that fell more
// than a second behind (a failover) catches up one second's worth only.
func (p *cfProd) pace() {
	p.mu.Lock()
	due := time.Duration(p.sent) * time.Second / cfRate
	ahead := due - time.Since(p.begun)
	if ahead < -time.Second {
		p.begun = time.Now().Add(-due - time.Second)
	}
	p.mu.Unlock()
	if ahead > 0 {
		time.Sleep(ahead)
	}
}

// ack records that the n messages from sequence first were acknowledged
// at base, base+1, ..., at now. mu must be held.
func (p *cfProd) ackLocked(first, n int, base int64, now time.Time) {
	if d := now.Sub(p.lastAck); d >= cfNoteGap {
		p.gaps = append(p.gaps, foGap{p.lastAck, d})
	}
	if now.After(p.lastAck) {
		p.lastAck = now
	}
	for j := range n {
		p.acks[first+j] = base + int64(j)
	}
}

func (p *cfProd) ack(first, n int, base int64) {
	p.mu.Lock()
	p.ackLocked(first, n, base, time.Now())
	p.mu.Unlock()
}

func (p *cfProd) fail(err error) {
	p.mu.Lock()
	p.failed++
	p.errs[errKind(err)]++
	p.mu.Unlock()
}

// errKind is a short name for a failed produce's error.
func errKind(err error) string {
	if outcomeUnknown(err) {
		return "outcome unknown"
	}
	return kind(err)
}

// outcomeUnknown reports whether err is the server's answer that a
// produce may or may not have been kept (protocol code 30).
func outcomeUnknown(err error) bool {
	var e *client.Error
	return errors.As(err, &e) && e.Code == protocol.CodeOutcomeUnknown
}

// closeGaps notes the time from the last acknowledgement to end as a gap,
// if long enough: a producer stuck when the phase stopped it.
func (p *cfProd) closeGaps(end time.Time) {
	p.mu.Lock()
	if d := end.Sub(p.lastAck); d >= cfNoteGap {
		p.gaps = append(p.gaps, foGap{p.lastAck, d})
		p.lastAck = end
	}
	p.mu.Unlock()
}

// maxGap is the producer's longest time without an acknowledgement.
func (p *cfProd) maxGap() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var g time.Duration
	for _, x := range p.gaps {
		g = max(g, x.d)
	}
	return g
}

// firstAckAfter is the time from t to the producer's first
// acknowledgement after it: the gap t falls in, else under cfNoteGap.
func (p *cfProd) firstAckAfter(t time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, g := range p.gaps {
		end := g.from.Add(g.d)
		if !g.from.After(t) && end.After(t) {
			return end.Sub(t)
		}
	}
	if p.lastAck.Before(t) {
		return time.Since(t) // none since: still waiting
	}
	return 0
}

// cfProds are the phase's producers and their goroutines.
type cfProds struct {
	ctx    context.Context // the producers'; ended by finish
	cancel context.CancelFunc
	p      []*cfProd
	stop   atomic.Bool
	acked  atomic.Int64
	wg     sync.WaitGroup

	producers []func(ctx context.Context) error // each Producer's flush and close
	closers   []func(ctx context.Context) error // each client's close, after the Producers
}

// startCfProds starts the producers: on topics[0] two Producers and a
// serial idempotent producer; on topics[1] a serial idempotent, a
// non-idempotent Go and an HTTP producer; on topics[2], the topic whose
// leader is frozen, an HTTP, a non-idempotent Go and a Producer.
func startCfProds(ctx context.Context, addrs string, webs []string, topics []string) (*cfProds, error) {
	ps := &cfProds{}
	ps.ctx, ps.cancel = context.WithCancel(ctx)
	ctx = ps.ctx
	plan := []struct {
		topic string
		kind  cfKind
	}{
		{topics[0], cfProducer}, {topics[0], cfProducer}, {topics[0], cfSerial},
		{topics[1], cfSerial}, {topics[1], cfNonIdem}, {topics[1], cfHTTP},
		{topics[2], cfHTTP}, {topics[2], cfNonIdem}, {topics[2], cfProducer},
	}
	type starter func()
	var starts []starter
	for i, x := range plan {
		p := newCfProd(i, x.topic, x.kind)
		ps.p = append(ps.p, p)
		switch x.kind {
		case cfProducer, cfSerial:
			c, err := client.Dial(ctx, addrs, client.WithDialTimeout(time.Second),
				client.WithRequestTimeout(cfRequest), client.WithRetries(3, 20*time.Millisecond))
			if err != nil {
				ps.close()
				ps.cancel()
				return nil, err
			}
			ps.closers = append(ps.closers, func(context.Context) error { return c.Close() })
			if x.kind == cfSerial {
				starts = append(starts, func() { ps.serial(ctx, p, c) })
				continue
			}
			// Small batches, a short linger, four or eight in flight.
			pr := c.NewProducer(x.topic, client.WithBatchSize(10+10*(i%2)), client.WithLinger(time.Millisecond),
				client.WithMaxInFlight(4+4*(i%2)), client.WithMaxBuffered(20000, 16<<20))
			ps.producers = append(ps.producers, func(ctx context.Context) error {
				if err := pr.Flush(ctx); err != nil {
					return err
				}
				return pr.Close()
			})
			futures := make(chan cfFuture, 4096)
			starts = append(starts, func() { ps.send(ctx, p, pr, futures) }, func() { ps.collect(p, futures) })
		case cfNonIdem:
			c, err := client.Dial(ctx, addrs, client.WithIdempotence(false), client.WithDialTimeout(time.Second),
				client.WithRequestTimeout(cfNonIdemTimeout), client.WithRetries(3, 20*time.Millisecond))
			if err != nil {
				ps.close()
				ps.cancel()
				return nil, err
			}
			ps.closers = append(ps.closers, func(context.Context) error { return c.Close() })
			starts = append(starts, func() { ps.serial(ctx, p, c) })
		case cfHTTP:
			starts = append(starts, func() { ps.http(ctx, p, webs) })
		}
	}
	for _, s := range starts {
		ps.wg.Go(s)
	}
	return ps, nil
}

// serial produces batches of 1, 10, 50 and 100 messages in turn, one at a
// time; a batch that fails is not sent again (the client has sent it
// again where that was harmless: to the leader a server named, or, for
// an idempotent client, anywhere).
func (ps *cfProds) serial(ctx context.Context, p *cfProd, c *client.Client) {
	for k := 0; !ps.stop.Load(); k++ {
		p.pace()
		n := []int{1, 10, 50, 100}[k%4]
		first, msgs := p.batch(n)
		base, err := c.Produce(ctx, p.topic, msgs...)
		if err != nil {
			p.fail(err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.ack(first, n, base)
		ps.acked.Add(int64(n))
	}
}

// batch takes the next n sequences and returns the first and the messages.
func (p *cfProd) batch(n int) (int, [][]byte) {
	p.mu.Lock()
	first := p.sent
	p.sent += n
	p.mu.Unlock()
	msgs := make([][]byte, n)
	for j := range msgs {
		msgs[j] = payload(p.id, first+j)
	}
	return first, msgs
}

// cfFuture is a Producer's Future and the sequence it was sent with.
type cfFuture struct {
	seq int
	f   *client.Future
}

// send hands messages to the Producer until stopped or Send fails.
func (ps *cfProds) send(ctx context.Context, p *cfProd, pr *client.Producer, out chan<- cfFuture) {
	defer close(out)
	for !ps.stop.Load() {
		p.pace()
		seq, msgs := p.batch(1)
		f, err := pr.Send(ctx, msgs[0])
		if err != nil {
			p.fail(fmt.Errorf("send: %w", err))
			return
		}
		out <- cfFuture{seq, f}
	}
}

// collect waits for each Future in Send order and records its offset.
func (ps *cfProds) collect(p *cfProd, in <-chan cfFuture) {
	for f := range in {
		off, err := f.f.Wait(ps.ctx) // every Future should end within cfRequest
		if err != nil {
			p.fail(err)
			continue
		}
		p.ack(f.seq, 1, off)
		ps.acked.Add(1)
	}
}

// http POSTs batches of 10 messages to the servers' HTTP ports, following
// 307 redirects as curl -L does, moving to the next server after a
// failure. A batch is sent again only when no server stored it: a
// connection was refused (a 307's target, or the first server), or a 307
// named a server that did not answer this producer within cfSuspect (a
// frozen leader the cluster has not replaced yet: the producer asks
// another server shortly instead, as the Go client's attempt timeout
// does). A timeout, a broken connection or any status but 200 and 307
// leaves its outcome unknown, and the next batch is new messages.
func (ps *cfProds) http(ctx context.Context, p *cfProd, webs []string) {
	var mu sync.Mutex
	hung := map[string]time.Time{} // host -> when a request to it timed out
	suspect := func(host string) bool {
		mu.Lock()
		defer mu.Unlock()
		return time.Since(hung[host]) < cfSuspect
	}
	hc := &http.Client{Timeout: cfHTTPTimeout, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		if suspect(req.URL.Host) {
			return errSuspectLeader
		}
		return nil
	}}
	defer hc.CloseIdleConnections()
	srv := p.id % len(webs)
	for !ps.stop.Load() {
		p.pace()
		const n = 10
		first, msgs := p.batch(n)
		sizes := make([]string, n)
		for j, m := range msgs {
			sizes[j] = strconv.Itoa(len(m))
		}
		body := bytes.Join(msgs, nil)
		for try := 0; ; try++ {
			if suspect(webs[srv]) {
				srv = (srv + 1) % len(webs)
			}
			base, err := cfPost(ctx, hc, "http://"+webs[srv]+"/topics/"+p.topic, strings.Join(sizes, ":"), body, n)
			if err == nil {
				p.ack(first, n, base)
				ps.acked.Add(n)
				break
			}
			var ue *url.Error
			if errors.As(err, &ue) && ue.Timeout() {
				if u, perr := url.Parse(ue.URL); perr == nil {
					mu.Lock()
					hung[u.Host] = time.Now()
					mu.Unlock()
				}
			}
			srv = (srv + 1) % len(webs)
			if (errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, errSuspectLeader)) && try < 100 && !ps.stop.Load() {
				p.mu.Lock()
				p.resent++
				p.mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				continue
			}
			p.fail(err)
			time.Sleep(10 * time.Millisecond)
			break
		}
	}
}

// errSuspectLeader: a 307 named a server that did not answer this HTTP
// producer lately; nothing was stored (a redirect is answered before any
// write).
var errSuspectLeader = errors.New("redirected to a server that did not answer lately")

// cfPost is one produce over HTTP: the base offset of the n messages.
func cfPost(ctx context.Context, hc *http.Client, url, sizes string, body []byte, n int) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Sizes", sizes)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Offset int64 `json:"offset"`
		Count  int   `json:"count"`
	}
	if resp.StatusCode != http.StatusOK {
		var b [200]byte
		k, _ := resp.Body.Read(b[:])
		return 0, fmt.Errorf("http %d: %s", resp.StatusCode, bytes.TrimSpace(b[:k]))
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	if r.Count != n {
		return 0, fmt.Errorf("http: %d messages acknowledged of %d", r.Count, n)
	}
	return r.Offset, nil
}

// progress waits until n more messages are acknowledged, or fails after wait.
func (ps *cfProds) progress(ctx context.Context, n int64, wait time.Duration) error {
	return waitAcked(ctx, &ps.acked, n, wait)
}

// cfCloseWait bounds the flush and close of the producers at the end,
// and then the wait for their goroutines: a Future not ended by then is
// abandoned (not counted as acknowledged), and said so.
const cfCloseWait = 20 * time.Second

// finish stops the producers, flushes and closes the Producers and the
// clients, all within cfCloseWait, and waits (as long again at most) for
// the producers' goroutines, which the end of their context stops.
func (ps *cfProds) finish() error {
	ps.stop.Store(true)
	end := time.Now()
	for _, p := range ps.p {
		p.closeGaps(end)
	}
	err := ps.close()
	ps.cancel()
	done := make(chan struct{})
	go func() { ps.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(cfCloseWait):
		err = errors.Join(err, fmt.Errorf("producers still running %v after they were told to stop", cfCloseWait))
	}
	return err
}

// close flushes and closes the Producers, then closes the clients, each
// group at once, waiting cfCloseWait at most for each.
func (ps *cfProds) close() error {
	ps.stop.Store(true)
	err := cfCloseAll(ps.producers)
	ps.producers = nil
	err = errors.Join(err, cfCloseAll(ps.closers))
	ps.closers = nil
	return err
}

// cfCloseAll calls every fn at once and waits cfCloseWait at most.
func cfCloseAll(fns []func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), cfCloseWait)
	defer cancel()
	errs := make(chan error, len(fns))
	for _, fn := range fns {
		go func() { errs <- fn(ctx) }()
	}
	var all []error
	for range fns {
		select {
		case err := <-errs:
			all = append(all, err)
		case <-ctx.Done():
			return errors.Join(append(all, fmt.Errorf("a producer's flush or close did not return within %v", cfCloseWait))...)
		}
	}
	return errors.Join(all...)
}

// maxGap is the longest time any producer went without an acknowledgement.
func (ps *cfProds) maxGap() time.Duration {
	var g time.Duration
	for _, p := range ps.p {
		g = max(g, p.maxGap())
	}
	return g
}

// summary lists, per producer, its kind, topic, acknowledged and failed
// batches, its longest gap and its errors by kind.
func (ps *cfProds) summary() string {
	var b strings.Builder
	for _, p := range ps.p {
		p.mu.Lock()
		type kv struct {
			k string
			n int
		}
		var l []kv
		for k, n := range p.errs {
			l = append(l, kv{k, n})
		}
		sort.Slice(l, func(i, j int) bool { return l[i].n > l[j].n })
		var parts []string
		for _, x := range l[:min(len(l), 4)] {
			parts = append(parts, fmt.Sprintf("%d %q", x.n, x.k))
		}
		var g time.Duration
		for _, x := range p.gaps {
			g = max(g, x.d)
		}
		fmt.Fprintf(&b, "\n  P%d %s on %s: %d acknowledged, %d failed, %d resent after a refused connection, longest gap %v; %s",
			p.id, p.kind, p.topic, len(p.acks), p.failed, p.resent, g.Round(time.Millisecond), strings.Join(parts, ", "))
		p.mu.Unlock()
	}
	return b.String()
}
