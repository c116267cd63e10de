package httpapi

import (
	"bytes"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/haraqa/haraqa/broker/auth"
	"github.com/haraqa/haraqa/broker/internal/limit"
	"github.com/haraqa/haraqa/broker/service"
)

// This file: what GET /metrics sends. A request is answered from a
// snapshot: the whole text, rendered by one goroutine at a time and
// shared by every request that comes while it is fresh, for ten times as
// long as it took to render (at most maxSnapshotAge). Scrapes then cost
// at most about a tenth of one core, however many clients ask and however
// many topics the server holds. The per-topic and per-group samples are
// kept one a line beside the topic they name, so that a token that may see
// only some topics is sent those lines alone, from the same snapshot.

// snapshotLife is how many times its render time a snapshot is served;
// maxSnapshotAge bounds it.
const (
	snapshotLife   = 10
	maxSnapshotAge = 10 * time.Second
)

// metricsContentType is the Prometheus text format's.
const metricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// snapshotCache holds the current snapshot and renders the next.
type snapshotCache struct {
	mu      sync.Mutex // held by the goroutine rendering
	cur     atomic.Pointer[snapshot]
	renders atomic.Int64 // snapshots rendered
	took    atomic.Int64 // nanoseconds the previous render took
	totals  atomic.Pointer[totals]
}

// totals are what a render read of the topics for the server-wide series
// (collector).
type totals struct {
	st                  *state
	bytes, segs, topics int64
	readOnly            int64 // topics turned read-only
}

// snapshot is one rendering of /metrics.
type snapshot struct {
	st      *state // the state rendered; nil while recovering
	expires time.Time
	head    []byte   // the registry's families: Go, process, latencies, server-wide series
	topics  []string // the topics the samples below name, sorted
	fams    []family // per-topic and per-group families
}

// family is one metric family whose samples each name a topic.
type family struct {
	header []byte  // its # HELP and # TYPE lines
	body   []byte  // its samples, one a line
	ends   []int   // where each sample's line ends in body
	topic  []int32 // the index in snapshot.topics of each sample's topic
}

func (f *family) add(topic int32, line []byte) {
	f.body = append(f.body, line...)
	f.ends = append(f.ends, len(f.body))
	f.topic = append(f.topic, topic)
}

// topicFamilies are the per-topic series.
var topicFamilies = []struct {
	name, help, typ string
	value           func(*service.TopicStats) int64
}{
	{"haraqa_produced_messages_total", "Messages appended for producers, over both protocols (a follower's copies are in haraqa_replicated_messages_total).", "counter", func(t *service.TopicStats) int64 { return t.ProducedMessages }},
	{"haraqa_produced_bytes_total", "Batch bytes appended for producers, over both protocols.", "counter", func(t *service.TopicStats) int64 { return t.ProducedBytes }},
	{"haraqa_consumed_messages_total", "Messages read for consumers, over both protocols (followers' fetches are in haraqa_replica_read_messages_total).", "counter", func(t *service.TopicStats) int64 { return t.ConsumedMessages }},
	{"haraqa_consumed_bytes_total", "Batch bytes read for consumers, over both protocols.", "counter", func(t *service.TopicStats) int64 { return t.ConsumedBytes }},
	{"haraqa_replicated_messages_total", "Messages this server copied from the topic's leader as a follower (not in haraqa_produced_messages_total).", "counter", func(t *service.TopicStats) int64 { return t.ReplicatedMessages }},
	{"haraqa_replicated_bytes_total", "Batch bytes this server copied from the topic's leader as a follower (not in haraqa_produced_bytes_total).", "counter", func(t *service.TopicStats) int64 { return t.ReplicatedBytes }},
	{"haraqa_replica_read_messages_total", "Messages this server read for its followers' fetches as the topic's leader (not in haraqa_consumed_messages_total).", "counter", func(t *service.TopicStats) int64 { return t.ReplicaReadMessages }},
	{"haraqa_replica_read_bytes_total", "Batch bytes this server read for its followers' fetches as the topic's leader (not in haraqa_consumed_bytes_total).", "counter", func(t *service.TopicStats) int64 { return t.ReplicaReadBytes }},
	{"haraqa_topic_bytes", "Bytes of segment data a topic holds on each volume.", "gauge", func(t *service.TopicStats) int64 { return t.Bytes }},
	{"haraqa_topic_oldest_offset", "Oldest readable offset of a topic.", "gauge", func(t *service.TopicStats) int64 { return t.Oldest }},
	{"haraqa_topic_next_offset", "Offset the next message of a topic will get.", "gauge", func(t *service.TopicStats) int64 { return t.Next }},
}

// groupFamilies are the per-group series, labelled group and topic.
var groupFamilies = []struct {
	name, help string
	value      func(*service.GroupOffset) int64
}{
	{"haraqa_consumer_group_lag_messages", "Messages a consumer group has yet to commit on a topic: the topic's next offset minus where the group reads from (its committed offset, raised to the oldest offset kept).", func(g *service.GroupOffset) int64 { return g.Next - g.Start }},
	{"haraqa_consumer_group_committed_offset", "The offset a consumer group committed on a topic: the offset it reads next.", func(g *service.GroupOffset) int64 { return g.Committed }},
}

// replicaFamilies are the per-topic series of a cluster's replicated
// topics, labelled topic: where this server leads the topic (leader 1),
// its replicas and in-sync set, and each follower's lag, labelled
// replica too, which only the leader knows.
var replicaFamilies = []struct {
	name, help string
}{
	{"haraqa_topic_leader", "1 where this server leads the replicated topic, 0 where it follows (-cluster)."},
	{"haraqa_topic_replicas", "Servers holding the replicated topic, on its leader."},
	{"haraqa_topic_insync_replicas", "The replicated topic's in-sync set, on its leader: fewer than haraqa_topic_replicas is under-replicated."},
	{"haraqa_topic_replica_lag_messages", "Messages a follower (replica) has yet to copy of the topic, on its leader."},
	{"haraqa_topic_replica_lag_bytes", "Batch bytes a follower (replica) has yet to copy of the topic, on its leader."},
}

// snapshot returns a fresh snapshot of st, rendering one if the current
// one has expired: one goroutine renders, the others wait for its result.
func (m *metrics) snapshot(st *state) *snapshot {
	fresh := func(s *snapshot) bool { return s != nil && s.st == st && time.Now().Before(s.expires) }
	if s := m.cache.cur.Load(); fresh(s) {
		return s
	}
	m.cache.mu.Lock()
	defer m.cache.mu.Unlock()
	if s := m.cache.cur.Load(); fresh(s) {
		return s // rendered while this one waited
	}
	start := time.Now()
	s := m.render(st)
	took := time.Since(start)
	m.cache.took.Store(int64(took))
	s.expires = time.Now().Add(min(snapshotLife*took, maxSnapshotAge))
	m.cache.cur.Store(s)
	return s
}

// render computes a snapshot of st.
func (m *metrics) render(st *state) *snapshot {
	s := &snapshot{st: st, fams: make([]family, len(topicFamilies)+len(groupFamilies)+len(replicaFamilies))}
	m.cache.renders.Add(1)
	tot := &totals{st: st}
	if st != nil {
		stats := st.svc.TopicStats()
		slices.SortFunc(stats, func(a, b service.TopicStats) int { return strings.Compare(a.Name, b.Name) })
		s.renderTopics(stats)
		s.renderGroups(st.svc.GroupStats())
		if rs := st.svc.ReplicationStats(); rs != nil {
			s.renderReplicas(rs.Topics)
		}
		for i := range stats {
			tot.bytes += stats[i].Bytes
			tot.segs += int64(stats[i].Segments)
			if stats[i].ReadOnly {
				tot.readOnly++
			}
		}
		tot.topics = int64(len(stats))
	}
	m.cache.totals.Store(tot)
	var head bytes.Buffer
	families, err := m.reg.Gather()
	for _, f := range families {
		_, _ = expfmt.MetricFamilyToText(&head, f)
	}
	if err != nil {
		// A collector failed: serve what was gathered, as promhttp's
		// ContinueOnError would, and say so in the text.
		head.WriteString("# gather error: " + strings.ReplaceAll(err.Error(), "\n", " ") + "\n")
	}
	s.head = head.Bytes()
	return s
}

// renderTopics writes the per-topic families of stats, sorted by name.
func (s *snapshot) renderTopics(stats []service.TopicStats) {
	s.topics = make([]string, len(stats))
	var line []byte
	for fi, f := range topicFamilies {
		s.fams[fi].header = familyHeader(f.name, f.help, f.typ)
		for ti := range stats {
			t := &stats[ti]
			s.topics[ti] = t.Name
			line = append(append(line[:0], f.name...), `{topic="`...)
			line = appendLabelValue(line, t.Name)
			line = append(line, `"} `...)
			line = append(strconv.AppendInt(line, f.value(t), 10), '\n')
			s.fams[fi].add(int32(ti), line)
		}
	}
}

// renderGroups writes the per-group families of groups, by topic, of the
// topics renderTopics wrote (a topic created since has none yet).
func (s *snapshot) renderGroups(groups map[string][]service.GroupOffset) {
	base := len(topicFamilies)
	for fi, f := range groupFamilies {
		s.fams[base+fi].header = familyHeader(f.name, f.help, "gauge")
	}
	var line []byte
	for ti, topic := range s.topics {
		gs := groups[topic]
		slices.SortFunc(gs, func(a, b service.GroupOffset) int { return strings.Compare(a.Group, b.Group) })
		for gi := range gs {
			g := &gs[gi]
			if g.Committed == service.NoOffset {
				continue // a lease only: nothing committed to measure from
			}
			for fi, f := range groupFamilies {
				line = append(append(line[:0], f.name...), `{group="`...)
				line = appendLabelValue(line, g.Group)
				line = append(line, `",topic="`...)
				line = appendLabelValue(line, topic)
				line = append(line, `"} `...)
				line = append(strconv.AppendInt(line, f.value(g), 10), '\n')
				s.fams[base+fi].add(int32(ti), line)
			}
		}
	}
}

// renderReplicas writes the replicated topics' families, of the topics
// renderTopics wrote.
func (s *snapshot) renderReplicas(topics []service.ReplicaTopicStats) {
	base := len(topicFamilies) + len(groupFamilies)
	for fi, f := range replicaFamilies {
		s.fams[base+fi].header = familyHeader(f.name, f.help, "gauge")
	}
	var line []byte
	sample := func(fi int, ti int32, topic, replica string, v int64) {
		line = append(append(line[:0], replicaFamilies[fi].name...), `{`...)
		if replica != "" {
			line = append(line, `replica="`...)
			line = appendLabelValue(line, replica)
			line = append(line, `",`...)
		}
		line = append(line, `topic="`...)
		line = appendLabelValue(line, topic)
		line = append(line, `"} `...)
		line = append(strconv.AppendInt(line, v, 10), '\n')
		s.fams[base+fi].add(ti, line)
	}
	for i := range topics {
		t := &topics[i]
		k, ok := slices.BinarySearch(s.topics, t.Topic)
		if !ok {
			continue // not in the store yet
		}
		ti := int32(k)
		if !t.Leader {
			sample(0, ti, t.Topic, "", 0)
			continue
		}
		sample(0, ti, t.Topic, "", 1)
		sample(1, ti, t.Topic, "", int64(t.Replicas))
		sample(2, ti, t.Topic, "", int64(t.InSync))
		for _, f := range t.Followers {
			sample(3, ti, t.Topic, f.ID, f.Messages)
		}
		for _, f := range t.Followers {
			sample(4, ti, t.Topic, f.ID, f.Bytes)
		}
	}
}

func familyHeader(name, help, typ string) []byte {
	return []byte("# HELP " + name + " " + help + "\n# TYPE " + name + " " + typ + "\n")
}

// appendLabelValue appends v escaped as the text format wants it.
func appendLabelValue(b []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			b = append(b, `\\`...)
		case '"':
			b = append(b, `\"`...)
		case '\n':
			b = append(b, `\n`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// write sends s: every sample, or with a grant not on every topic only
// the samples of the topics g holds the metrics right on.
func (s *snapshot) write(w http.ResponseWriter, g *auth.Grant) {
	w.Header().Set("Content-Type", metricsContentType)
	_, _ = w.Write(s.head)
	if g == nil || g.AllowAll(auth.Metrics) {
		for _, f := range s.fams {
			if len(f.ends) > 0 {
				_, _ = w.Write(f.header)
				_, _ = w.Write(f.body)
			}
		}
		return
	}
	seen := make([]bool, len(s.topics))
	for i, t := range s.topics {
		seen[i] = g.Allow(auth.Metrics, t)
	}
	var out []byte
	for _, f := range s.fams {
		head := false
		start := 0
		for i, end := range f.ends {
			if seen[f.topic[i]] {
				if !head {
					out, head = append(out, f.header...), true
				}
				out = append(out, f.body[start:end]...)
			}
			start = end
		}
	}
	_, _ = w.Write(out)
}

// DefaultMaxMetricsRate is Config.MaxMetricsRate's default: /metrics
// responses a second, all clients together. Prometheus scrapes a server
// every 15 to 60 seconds; four a second leave room for many scrapers and
// a person with curl.
const DefaultMaxMetricsRate = 4

// bucket is a token bucket of rate tokens a second, holding at most twice
// that (at least one).
type bucket struct {
	mu     sync.Mutex
	tokens limit.Bucket // guarded by mu
}

func newBucket(rate float64) bucket {
	return bucket{tokens: limit.PerSecond(rate, max(1, 2*rate))}
}

// allow takes a token at now, if there is one.
func (b *bucket) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tokens.Take(now)
}
