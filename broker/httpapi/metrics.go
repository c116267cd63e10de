package httpapi

import "github.com/prometheus/client_golang/prometheus"

// collector turns the broker's and the store's counters into Prometheus
// metrics when scraped, so the request paths pay nothing for them.
type collector struct{ api *API }

var (
	descProducedMsgs  = prometheus.NewDesc("haraqa_produced_messages_total", "Messages appended.", nil, nil)
	descProducedBytes = prometheus.NewDesc("haraqa_produced_bytes_total", "Batch bytes appended.", nil, nil)
	descConsumedBytes = prometheus.NewDesc("haraqa_consumed_bytes_total", "Batch bytes sent to consumers, by how they were sent: zero_copy (sendfile) or copied (through a buffer).", []string{"path"}, nil)
	descRequests      = prometheus.NewDesc("haraqa_requests_total", "Binary protocol requests handled.", nil, nil)
	descErrors        = prometheus.NewDesc("haraqa_request_errors_total", "Binary protocol error responses sent.", nil, nil)
	descBadFrames     = prometheus.NewDesc("haraqa_bad_frames_total", "Connections closed for an oversized or malformed frame.", nil, nil)
	descConnections   = prometheus.NewDesc("haraqa_connections", "Open binary protocol connections.", nil, nil)
	descParked        = prometheus.NewDesc("haraqa_long_polls_parked", "Consumes waiting for data.", nil, nil)
	descRepairs       = prometheus.NewDesc("haraqa_repairs_total", "Repairs made when the volumes were opened.", nil, nil)
	descRepairedBytes = prometheus.NewDesc("haraqa_repaired_bytes_total", "Bytes copied between volumes when they were opened.", nil, nil)
	descTruncated     = prometheus.NewDesc("haraqa_torn_bytes_truncated_total", "Bytes of torn tails cut when the volumes were opened.", nil, nil)
	descUnreadable    = prometheus.NewDesc("haraqa_unreadable_ranges", "Offset ranges corrupted on every volume.", nil, nil)
	descOpenFiles     = prometheus.NewDesc("haraqa_open_read_files", "Segment files held open by the read cache.", nil, nil)
	descTopics        = prometheus.NewDesc("haraqa_topics", "Topics.", nil, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descProducedMsgs, descProducedBytes, descConsumedBytes, descRequests,
		descErrors, descBadFrames, descConnections, descParked, descRepairs, descRepairedBytes, descTruncated,
		descUnreadable, descOpenFiles, descTopics} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.api.state.Load()
	if st == nil {
		return // still recovering: nothing to report yet
	}
	b, s := st.broker.Stats(), st.store.Stats()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	counter(descProducedMsgs, b.ProducedMsgs)
	counter(descProducedBytes, b.ProducedBytes)
	counter(descConsumedBytes, b.ZeroCopyBytes, "zero_copy")
	counter(descConsumedBytes, b.CopiedBytes, "copied")
	counter(descRequests, b.Requests)
	counter(descErrors, b.Errors)
	counter(descBadFrames, b.ClosedForFrames)
	gauge(descConnections, b.Connections)
	gauge(descParked, b.ParkedPolls)
	counter(descRepairs, s.Repairs)
	counter(descRepairedBytes, s.RepairedBytes)
	counter(descTruncated, s.TruncatedBytes)
	gauge(descUnreadable, s.UnreadableRanges)
	gauge(descOpenFiles, int64(s.OpenFiles))
	gauge(descTopics, int64(len(st.store.ListTopics(""))))
}
