package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/haraqa/haraqa/client"
)

// UI is where a run reports while it goes.
type UI struct {
	// Progress receives a live progress bar with the current rate (nil:
	// none). Give it a terminal only.
	Progress io.Writer
	// Lines receives a plain line of progress each second and one as the
	// ceiling starts, for what is not a terminal (nil: none).
	Lines io.Writer
	// Log receives the embedded server's warnings and errors (nil: discarded).
	Log *slog.Logger
}

// runner holds one run's state.
type runner struct {
	cfg      *Config
	pay      payload
	addr     string
	copts    []client.Option
	shared   *client.Client // with SharedClient
	live     live
	errs     errorLog
	progress io.Writer
	lines    io.Writer
}

func (r *runner) dial(ctx context.Context) (*client.Client, error) {
	return client.Dial(ctx, r.addr, r.copts...)
}

// Run performs the run cfg describes and returns its result. A run whose
// requests failed, or whose consumers found gaps, duplicates or corrupt
// messages, still returns its Result (see Result.OK); the error is for a
// run that could not be made at all (a bad configuration: ErrUsage; a
// server that cannot be reached or started; an interruption).
func Run(ctx context.Context, cfg Config, ui UI) (res *Result, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	codec, _ := codecOf(cfg.Compress)
	r := &runner{
		cfg:      &cfg,
		pay:      newPayload(cfg.Size, codec != 0),
		addr:     cfg.Addr,
		copts:    []client.Option{client.WithCompression(codec), client.WithIdempotence(cfg.Idempotent)},
		progress: ui.Progress,
		lines:    ui.Lines,
	}
	if cfg.AcksLeader {
		r.copts = append(r.copts, client.WithAcks(client.AcksLeader))
	}
	if cfg.Token != "" {
		r.copts = append(r.copts, client.WithToken(cfg.Token), client.WithClientName("haraqa-bench"))
	}
	clientTLS := cfg.TLS
	log := ui.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var srv *embedded
	if cfg.Embedded {
		if srv, clientTLS, err = startEmbedded(&cfg, log); err != nil {
			return nil, err
		}
		defer func() {
			if cerr := srv.close(); cerr != nil && err == nil {
				err = cerr
			}
		}()
		r.addr = srv.addr()
	}
	if clientTLS != nil {
		r.copts = append(r.copts, client.WithTLS(clientTLS))
	}
	admin, err := r.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: server at %s: %w", r.addr, err)
	}
	defer admin.Close()
	if cfg.SharedClient {
		r.shared = admin
	}
	prefix := cfg.TopicPrefix
	if prefix == "" {
		prefix = "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	topics, err := r.createTopics(ctx, admin, prefix, cfg.Topics)
	if err != nil {
		return nil, err
	}
	if !cfg.Embedded && !cfg.Keep {
		defer func() {
			if derr := r.deleteTopics(admin, topics); derr != nil && err == nil {
				err = derr
			}
		}()
	}
	if res, err = r.measure(ctx, srv, admin, topics, prefix); err != nil {
		return nil, err
	}
	return res, nil
}

// measure warms up, runs the timed phase on topics and, with Ceiling, the
// raw baseline, and gathers what the server counted meanwhile.
func (r *runner) measure(ctx context.Context, srv *embedded, admin *client.Client, topics []string, prefix string) (*Result, error) {
	warmBytes, err := r.warmup(ctx, admin, prefix+"-warm")
	if err != nil {
		return nil, err
	}
	if srv != nil {
		// The warm-up's topics are deleted; an embedded server removes
		// their files before the timed phase, as the ceiling does with
		// its warm-up files. (A remote server removes them in the
		// background, which may overlap the timed phase.)
		if err := srv.settle(ctx); err != nil {
			return nil, err
		}
	}
	res := r.newResult()
	res.WarmupBytes = warmBytes
	zeroCopy := r.zeroCopyShare(ctx, srv)
	if srv != nil {
		srv.resetFsyncs()
	}
	fileBytes, err := r.timed(ctx, admin, topics, res)
	if err != nil {
		return nil, err
	}
	if srv != nil {
		if n, l := srv.fsyncs(); n > 0 {
			res.Fsyncs, res.FsyncLatency = n, &l
		}
	}
	res.Errors = r.errs.n.Load()
	if e := r.errs.firstErr(); e != nil {
		res.FirstError = e.Error()
	}
	res.ZeroCopyShare = zeroCopy()
	if r.cfg.Ceiling && res.Messages > 0 {
		if err := r.ceiling(ctx, res, warmBytes, fileBytes); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// scrapeTries and scrapeWait bound the readings of a server's /metrics
// that show nothing consumed yet (a snapshot of before the run).
const (
	scrapeTries = 10
	scrapeWait  = 200 * time.Millisecond
)

// zeroCopyShare reads the server's consume counters now and returns a
// function that tells, from a second reading, the share of bytes consumed
// since that went by sendfile (nil when unknown: a produce run, or no
// counters to read).
func (r *runner) zeroCopyShare(ctx context.Context, srv *embedded) func() *float64 {
	var consumed func(context.Context) (int64, int64, error)
	switch {
	case r.cfg.Mode == ModeProduce:
	case srv != nil:
		consumed = srv.consumed
	case r.cfg.HTTPAddr != "":
		consumed = func(ctx context.Context) (int64, int64, error) {
			return scrapeConsumed(ctx, r.cfg.HTTPAddr, r.cfg.Token)
		}
	}
	none := func() *float64 { return nil }
	if consumed == nil {
		return none
	}
	z0, c0, err := consumed(ctx)
	if err != nil {
		return none
	}
	return func() *float64 {
		// A server's /metrics is a snapshot served for ten times its render
		// time: a reading that shows nothing consumed may be the one taken
		// before the run, so it is taken again a few times.
		for try := 0; ; try++ {
			z1, c1, err := consumed(ctx)
			if dz, dc := z1-z0, c1-c0; err == nil && dz+dc > 0 {
				share := float64(dz) / float64(dz+dc)
				return &share
			}
			if err != nil || srv != nil || try == scrapeTries-1 {
				return nil
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(scrapeWait):
			}
		}
	}
}

// timed runs the timed phase of the run's mode on topics into res and
// returns, for a consume, the bytes the topics hold (the ceiling reads as
// many).
func (r *runner) timed(ctx context.Context, admin *client.Client, topics []string, res *Result) (fileBytes int64, err error) {
	switch r.cfg.Mode {
	case ModeProduce:
		w := r.watch("produce", orUnknown(r.cfg.Messages), producedCount)
		pres, perr := r.produce(ctx, topics, r.bound(), 0, true)
		res.Series = w.end()
		if perr != nil {
			return 0, perr
		}
		res.fromProduce(pres)
	case ModeConsume:
		fill, ferr := r.fill(ctx, topics)
		if ferr != nil {
			return 0, ferr
		}
		ends := make([]int64, len(topics))
		for i, t := range topics {
			info, err := admin.TopicInfo(ctx, t)
			if err != nil {
				return 0, fmt.Errorf("bench: topic %s: %w", t, err)
			}
			ends[i] = info.Next
			fileBytes += info.Bytes
		}
		r.live.produced.Store(0)
		w := r.watch("consume", fill.acked(), consumedCount)
		cres, cerr := r.consume(ctx, topics, splitRanges(ends, r.cfg.Consumers))
		res.Series = w.end()
		if cerr != nil {
			return 0, cerr
		}
		res.fromConsume(cres, fill)
	case ModeBoth:
		w := r.watch("both", -1, consumedCount)
		pres, cres, berr := r.both(ctx, topics, r.bound(), 0, true)
		res.Series = w.end()
		if berr != nil {
			return 0, berr
		}
		res.fromBoth(pres, cres)
	}
	return fileBytes, nil
}

// orUnknown is n, or -1 (unknown, to the progress bar) when n is 0.
func orUnknown(n int64) int64 {
	if n == 0 {
		return -1
	}
	return n
}

// bound is the timed phase's bound.
func (r *runner) bound() bound { return bound{messages: r.cfg.Messages, duration: r.cfg.Duration} }

// createTopics creates n topics named prefix-0, prefix-1, ...
func (r *runner) createTopics(ctx context.Context, c *client.Client, prefix string, n int) ([]string, error) {
	topics := make([]string, n)
	for i := range topics {
		topics[i] = prefix + "-" + strconv.Itoa(i)
		if err := c.CreateTopic(ctx, topics[i]); err != nil && !errors.Is(err, client.ErrTopicExists) {
			return nil, fmt.Errorf("bench: create topic %s: %w", topics[i], err)
		}
	}
	return topics, nil
}

// deleteTopics deletes the run's topics, even after an interruption.
func (r *runner) deleteTopics(c *client.Client, topics []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, t := range topics {
		if err := c.DeleteTopic(ctx, t); err != nil && !errors.Is(err, client.ErrTopicNotFound) {
			errs = append(errs, fmt.Errorf("bench: delete topic %s: %w", t, err))
		}
	}
	return errors.Join(errs...)
}

// warmup runs the workload untimed for cfg.Warmup on topics of its own,
// then deletes them, and returns the payload bytes it produced. It warms
// the client's and the server's heaps and, by deleting what it wrote,
// gives the timed phase recycled page-cache pages, as a server that has
// been running for a while has: on a VM the first touch of a fresh page
// costs about 12-15 us.
func (r *runner) warmup(ctx context.Context, admin *client.Client, prefix string) (int64, error) {
	cfg := r.cfg
	if cfg.Warmup <= 0 {
		return 0, nil
	}
	topics, err := r.createTopics(ctx, admin, prefix, cfg.Topics)
	if err != nil {
		return 0, err
	}
	defer r.live.produced.Store(0)
	defer r.live.consumed.Store(0)
	var produced int64
	switch cfg.Mode {
	case ModeProduce:
		w := r.watch("warm-up", -1, producedCount)
		pres, err := r.produce(ctx, topics, bound{duration: cfg.Warmup}, 0, true)
		w.end()
		if err != nil {
			return 0, err
		}
		produced = pres.acked()
	case ModeConsume:
		w := r.watch("warm-up", -1, consumedCount)
		pres, err := r.produce(ctx, topics, bound{duration: cfg.Warmup / 2}, 0, false)
		if err == nil {
			ends := make([]int64, len(topics))
			for _, p := range pres.producers {
				ends[p.topic] += p.acked
			}
			_, err = r.consume(ctx, topics, splitRanges(ends, cfg.Consumers))
		}
		w.end()
		if err != nil {
			return 0, err
		}
		produced = pres.acked()
	case ModeBoth:
		w := r.watch("warm-up", -1, consumedCount)
		pres, _, err := r.both(ctx, topics, bound{duration: cfg.Warmup}, 0, true)
		w.end()
		if err != nil {
			return 0, err
		}
		produced = pres.acked()
	}
	if err := r.deleteTopics(admin, topics); err != nil {
		return 0, err
	}
	r.errs.reset() // the timed phase counts its own
	return produced * int64(cfg.Size), nil
}

// fill produces the consume mode's messages, untimed: -messages of them,
// or for -duration. It is not paced by -rate. With batches smaller than
// fillSmallBatch it runs at least fillProducers producers pipelined on one
// connection, so that a fill for -duration holds enough small batches to
// time their reading; the batches stored are the same size either way.
func (r *runner) fill(ctx context.Context, topics []string) (produceResult, error) {
	if r.cfg.Batch < fillSmallBatch && r.cfg.Producers < fillProducers {
		cfg, shared := r.cfg, r.shared
		defer func() { r.cfg, r.shared = cfg, shared }()
		c := *cfg
		c.Producers = fillProducers
		r.cfg = &c
		if r.shared == nil {
			cl, err := r.dial(ctx)
			if err != nil {
				return produceResult{}, err
			}
			defer cl.Close()
			r.shared = cl
		}
	}
	w := r.watch("fill", orUnknown(r.cfg.Messages), producedCount)
	pres, err := r.produce(ctx, topics, r.bound(), 0, false)
	w.end()
	return pres, err
}

// Small batches are filled by at least fillProducers producers.
const (
	fillSmallBatch = 10
	fillProducers  = 16
)

// ceiling measures the baseline that fits the run and fills in the
// result's ceiling fields.
func (r *runner) ceiling(ctx context.Context, res *Result, warmBytes, fileBytes int64) error {
	cfg := r.cfg
	var cr ceilingResult
	if r.lines != nil {
		fmt.Fprintf(r.lines, "haraqa-bench: measuring the ceiling for %d messages\n", res.Messages)
	}
	var err error
	switch {
	case cfg.Mode == ModeConsume:
		cr, err = sendfileCeiling(ctx, cfg.Dir, cfg.Consumers, fileBytes)
	case cfg.Mode == ModeProduce && cfg.singleSend():
		cr, err = pingPongCeiling(ctx, cfg.Producers, cfg.Size, res.Messages)
	default:
		perRequest := cfg.Batch
		if cfg.Batch == 1 && cfg.Single == SingleProducer {
			perRequest = producerBatch
		}
		vols := 1
		if cfg.Embedded {
			vols = cfg.Volumes
		}
		cr, err = appendCeiling(ctx, cfg.Dir, vols, cfg.Topics, cfg.Producers, perRequest*cfg.Size, res.Bytes, warmBytes, false)
	}
	if err != nil {
		return err
	}
	res.setCeiling(cr)
	return nil
}

// producerBatch is client.Producer's default batch size, the request size
// of -single producer.
const producerBatch = 1000
