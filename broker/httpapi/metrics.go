package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
)

// metrics holds what /metrics serves: latency histograms observed as
// requests complete, and the broker's and the store's counters read when
// a snapshot is rendered (metricsview.go), so the request paths pay
// nothing for those.
type metrics struct {
	reg      *prometheus.Registry
	requests [256][2]prometheus.Observer // by op (nil: not an op), then waited
	http     *prometheus.HistogramVec
	fsync    prometheus.Histogram
	cache    snapshotCache
	rate     bucket // of the responses sent (Config.MaxMetricsRate)
	api      *API
}

// latencyBuckets span 25 us (a page-cache produce) to a minute (the longest
// long poll), in seconds.
var latencyBuckets = []float64{.000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

func newMetrics(a *API) *metrics {
	reg := prometheus.NewRegistry()
	req := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "haraqa_request_duration_seconds",
		Help:    "Binary protocol requests from arrival to response, by op; op consume_long_poll is a consume that waited for data.",
		Buckets: latencyBuckets,
	}, []string{"op"})
	m := &metrics{
		api:  a,
		reg:  reg,
		rate: newBucket(a.cfg.MaxMetricsRate),
		http: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "haraqa_http_request_duration_seconds",
			Help:    "HTTP API requests from arrival to the end of the response, by route and status code.",
			Buckets: latencyBuckets,
		}, []string{"route", "code"}),
		fsync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "haraqa_fsync_duration_seconds",
			Help:    "fsync of a segment file.",
			Buckets: latencyBuckets,
		}),
	}
	for op := protocol.OpPing; op.Valid(); op++ {
		m.requests[op][0] = req.WithLabelValues(op.String())
		m.requests[op][1] = m.requests[op][0]
	}
	m.requests[protocol.OpConsume][1] = req.WithLabelValues("consume_long_poll")
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collector{m: m},
		req, m.http, m.fsync,
	)
	return m
}

func (m *metrics) observeRequest(op protocol.Op, waited bool, took time.Duration) {
	if !op.Valid() {
		return // a frame with an unknown op, answered with an error
	}
	w := 0
	if waited {
		w = 1
	}
	m.requests[op][w].Observe(took.Seconds())
}

// timed wraps an HTTP route to observe its latency and status code.
func (m *metrics) timed(route string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h(sw, r)
		m.http.WithLabelValues(route, strconv.Itoa(sw.code)).Observe(time.Since(start).Seconds())
	}
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// collector reads the server-wide counters when a snapshot is rendered;
// the per-topic and per-group series are written by the snapshot itself
// (metricsview.go), which the collector's totals come from.
type collector struct{ m *metrics }

var (
	descVolumeBytes   = prometheus.NewDesc("haraqa_volume_bytes", "Bytes of segment data on a volume.", []string{"volume"}, nil)
	descVolumeFree    = prometheus.NewDesc("haraqa_volume_free_bytes", "Free bytes on a volume's file system, measured every second; produces are refused under -min-free-bytes.", []string{"volume"}, nil)
	descVolumeSegs    = prometheus.NewDesc("haraqa_volume_segments", "Segment files on a volume.", []string{"volume"}, nil)
	descSent          = prometheus.NewDesc("haraqa_consume_sent_bytes_total", "Binary protocol consume bytes sent, by how: zero_copy (sendfile) or copied (through a buffer).", []string{"path"}, nil)
	descRequests      = prometheus.NewDesc("haraqa_requests_total", "Binary protocol requests handled.", nil, nil)
	descErrors        = prometheus.NewDesc("haraqa_request_errors_total", "Binary protocol error responses sent.", nil, nil)
	descBadFrames     = prometheus.NewDesc("haraqa_bad_frames_total", "Connections closed for an oversized or malformed frame.", nil, nil)
	descConnections   = prometheus.NewDesc("haraqa_connections", "Open binary protocol connections.", nil, nil)
	descAcceptErrors  = prometheus.NewDesc("haraqa_accept_errors_total", "Failed accepts on the binary port (out of descriptors and the like), each retried after a back-off.", nil, nil)
	descStallClosed   = prometheus.NewDesc("haraqa_stalled_connections_closed_total", "Binary protocol connections closed for not reading their responses (StallTimeout).", nil, nil)
	descRefusedConns  = prometheus.NewDesc("haraqa_refused_connections_total", "Binary protocol connections refused at the connection limit (-max-conns).", nil, nil)
	descBuffered      = prometheus.NewDesc("haraqa_buffered_bytes", "Bytes the binary port buffers for all its connections (input, output, held answers, copied produces); bounded by -max-buffered-bytes.", nil, nil)
	descBudgetPauses  = prometheus.NewDesc("haraqa_budget_pauses_total", "Times a binary protocol connection stopped being read because the server was over -max-buffered-bytes.", nil, nil)
	descIdleClosed    = prometheus.NewDesc("haraqa_idle_connections_closed_total", "Binary protocol connections closed after -idle-timeout with nothing in flight.", nil, nil)
	descTurnsYielded  = prometheus.NewDesc("haraqa_loop_turns_yielded_total", "Times a binary protocol connection's frames held its event loop for a whole turn (200 us) and let the loop serve the others before its next frames.", nil, nil)
	descControlPauses = prometheus.NewDesc("haraqa_control_pauses_total", "Times a binary protocol connection was not read until its next control request was due (-max-control-rate).", nil, nil)
	descBudgetClosed  = prometheus.NewDesc("haraqa_budget_closed_total", "Binary protocol connections closed over -max-buffered-bytes for gathering the largest unfinished frames.", nil, nil)
	descHelloTimeouts = prometheus.NewDesc("haraqa_hello_timeouts_total", "Binary protocol connections closed for no successful hello within -hello-timeout.", nil, nil)
	descParked        = prometheus.NewDesc("haraqa_long_polls_parked", "Binary protocol consumes waiting for data.", nil, nil)
	descRepairs       = prometheus.NewDesc("haraqa_repairs_total", "Repairs made when the volumes were opened.", nil, nil)
	descRepairedBytes = prometheus.NewDesc("haraqa_repaired_bytes_total", "Bytes copied between volumes when they were opened.", nil, nil)
	descTruncated     = prometheus.NewDesc("haraqa_torn_bytes_truncated_total", "Bytes of torn tails cut when the volumes were opened.", nil, nil)
	descUnreadable    = prometheus.NewDesc("haraqa_unreadable_ranges", "Offset ranges corrupted on every volume.", nil, nil)
	descDroppedTails  = prometheus.NewDesc("haraqa_dropped_tail_bytes_total", "Bytes of unacknowledged tails cut when the volumes were opened because copying them to every volume failed for want of space.", nil, nil)
	descOpenFiles     = prometheus.NewDesc("haraqa_open_read_files", "Segment files held open by the read cache.", nil, nil)
	descWriteFiles    = prometheus.NewDesc("haraqa_open_write_files", "Segment files held open for appends (active and next segments).", nil, nil)
	descMaxOpenFiles  = prometheus.NewDesc("haraqa_max_open_files", "The budget of segment files, read and write (-max-open-files).", nil, nil)
	descTopics        = prometheus.NewDesc("haraqa_topics", "Topics.", nil, nil)
	descReadOnly      = prometheus.NewDesc("haraqa_topics_read_only", "Topics whose copy here a failed write or fsync turned read-only; a restart reopens them.", nil, nil)
	descRefusalsPaced = prometheus.NewDesc("haraqa_http_refusals_paced_total", "Refused HTTP requests (401, 403, 429) whose answer waited because their client address was past -http-refusal-rate.", nil, nil)
	descLeaderChanges = prometheus.NewDesc("haraqa_replica_leader_changes_total", "Replicated topics this server took the lead of (-cluster).", nil, nil)
	descISRChanges    = prometheus.NewDesc("haraqa_replica_isr_changes_total", "In-sync set changes this server recorded as a topic's leader.", nil, nil)
	descTruncations   = prometheus.NewDesc("haraqa_replica_truncations_total", "Follower logs cut back to their leader's log (a divergent tail after a leader change).", nil, nil)
	descRepairsRepl   = prometheus.NewDesc("haraqa_replica_repairs_total", "Replicated topics' copies here cut at a range corrupted on every volume, to copy the rest from the leader again.", nil, nil)
	descRepairing     = prometheus.NewDesc("haraqa_replica_repairing_topics", "Replicated topics whose copy here had a range corrupted on every volume at the start and is not back in the in-sync set yet.", nil, nil)
	descOffline       = prometheus.NewDesc("haraqa_replica_offline_topics", "Replicated topics held here that have no leader: every member of their in-sync set is down, and the topic waits for one.", nil, nil)
	descFetchedBytes  = prometheus.NewDesc("haraqa_replica_fetched_bytes_total", "Batch bytes this server copied from leaders as a follower.", nil, nil)
	descTopicsLed     = prometheus.NewDesc("haraqa_replica_topics_led", "Replicated topics this server leads.", nil, nil)
	descUnderRepl     = prometheus.NewDesc("haraqa_replica_under_replicated_topics", "Replicated topics this server leads whose in-sync set is smaller than their replicas.", nil, nil)
	descInSyncMin     = prometheus.NewDesc("haraqa_replica_insync_min", "The smallest in-sync set among the replicated topics this server leads.", nil, nil)
	descLagMessages   = prometheus.NewDesc("haraqa_replica_max_lag_messages", "On the topics this server leads: the most messages a follower has yet to copy.", nil, nil)
	descLagBytes      = prometheus.NewDesc("haraqa_replica_max_lag_bytes", "On the topics this server leads: the most batch bytes a follower has yet to copy.", nil, nil)
	descRenders       = prometheus.NewDesc("haraqa_metrics_renders_total", "Snapshots of /metrics computed; requests within a snapshot's life share it.", nil, nil)
	descRenderSecs    = prometheus.NewDesc("haraqa_metrics_render_seconds", "How long the previous /metrics snapshot took to compute; a snapshot is served for ten times as long.", nil, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descVolumeBytes, descVolumeFree, descVolumeSegs, descSent, descRequests,
		descErrors, descBadFrames, descConnections, descAcceptErrors, descRefusedConns, descStallClosed, descTurnsYielded, descControlPauses, descBuffered, descBudgetPauses, descBudgetClosed, descHelloTimeouts, descIdleClosed, descParked, descRepairs, descRepairedBytes, descTruncated,
		descUnreadable, descDroppedTails, descOpenFiles, descWriteFiles, descMaxOpenFiles, descTopics, descReadOnly, descRenders, descRefusalsPaced, descRenderSecs,
		descLeaderChanges, descISRChanges, descTruncations, descRepairsRepl, descRepairing, descOffline, descFetchedBytes, descTopicsLed, descUnderRepl, descInSyncMin, descLagMessages, descLagBytes} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	metric := func(d *prometheus.Desc, t prometheus.ValueType, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, t, float64(v), labels...)
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) { metric(d, prometheus.CounterValue, v, labels...) }
	gauge := func(d *prometheus.Desc, v int64, labels ...string) { metric(d, prometheus.GaugeValue, v, labels...) }
	counter(descRenders, c.m.cache.renders.Load())
	counter(descRefusalsPaced, c.m.api.refusalsPaced.Load())
	ch <- prometheus.MustNewConstMetric(descRenderSecs, prometheus.GaugeValue, time.Duration(c.m.cache.took.Load()).Seconds())
	tot := c.m.cache.totals.Load()
	if tot == nil || tot.st == nil {
		return // still recovering: nothing to report yet
	}
	st := tot.st
	// Every write goes to every volume, or the topic turns read-only:
	// the volumes hold the same segments.
	free := st.svc.VolumeFree()
	for i, v := range st.svc.Volumes() {
		gauge(descVolumeBytes, tot.bytes, v)
		gauge(descVolumeSegs, tot.segs, v)
		if free[i] >= 0 {
			gauge(descVolumeFree, free[i], v)
		}
	}
	gauge(descTopics, tot.topics)
	gauge(descReadOnly, tot.readOnly)

	b, s := st.broker.Stats(), st.svc.StoreStats()
	counter(descSent, b.ZeroCopyBytes, "zero_copy")
	counter(descSent, b.CopiedBytes, "copied")
	counter(descRequests, b.Requests)
	counter(descErrors, b.Errors)
	counter(descBadFrames, b.ClosedForFrames)
	gauge(descConnections, b.Connections)
	counter(descAcceptErrors, b.AcceptErrors)
	counter(descRefusedConns, b.RefusedConns)
	counter(descStallClosed, b.StallClosed)
	gauge(descBuffered, b.BufferedBytes)
	counter(descBudgetPauses, b.BudgetPauses)
	counter(descIdleClosed, b.IdleClosed)
	counter(descBudgetClosed, b.BudgetClosed)
	counter(descTurnsYielded, b.TurnsYielded)
	counter(descControlPauses, b.ControlPauses)
	counter(descHelloTimeouts, b.HelloTimeouts)
	gauge(descParked, b.ParkedPolls)
	counter(descRepairs, s.Repairs)
	counter(descRepairedBytes, s.RepairedBytes)
	counter(descTruncated, s.TruncatedBytes)
	gauge(descUnreadable, s.UnreadableRanges)
	counter(descDroppedTails, s.DroppedTailBytes)
	gauge(descOpenFiles, int64(s.OpenFiles))
	gauge(descWriteFiles, int64(s.WriteFiles))
	gauge(descMaxOpenFiles, int64(s.MaxOpenFiles))
	if rs := st.svc.ReplicationStats(); rs != nil {
		collectReplication(rs, counter, gauge)
	}
}

// collectReplication adds a cluster member's replication figures.
func collectReplication(rs *service.ReplicationStats, counter, gauge func(*prometheus.Desc, int64, ...string)) {
	counter(descLeaderChanges, rs.LeaderChanges)
	counter(descISRChanges, rs.ISRChanges)
	counter(descTruncations, rs.Truncations)
	counter(descFetchedBytes, rs.FetchedBytes)
	counter(descRepairsRepl, rs.Repairs)
	gauge(descRepairing, rs.Repairing)
	gauge(descOffline, rs.Offline)
	// Server-wide figures only: the per-topic state (leader, epoch,
	// in-sync set, each follower's lag) is in the cluster status
	// (hrqa cluster status), which does not pass topic names to
	// tokens that may not see them.
	var led, under, insyncMin, lagMsgs, lagBytes int64
	insyncMin = -1
	for _, t := range rs.Topics {
		if !t.Leader {
			continue
		}
		led++
		if t.InSync < t.Replicas {
			under++
		}
		if insyncMin < 0 || int64(t.InSync) < insyncMin {
			insyncMin = int64(t.InSync)
		}
		for _, f := range t.Followers {
			lagMsgs, lagBytes = max(lagMsgs, f.Messages), max(lagBytes, f.Bytes)
		}
	}
	gauge(descTopicsLed, led)
	gauge(descUnderRepl, under)
	if insyncMin >= 0 {
		gauge(descInSyncMin, insyncMin)
	}
	gauge(descLagMessages, lagMsgs)
	gauge(descLagBytes, lagBytes)
}
