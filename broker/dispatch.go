package broker

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// This file: request dispatch. A whole frame is parsed into a job and run
// on the loop, or queued for the connection's worker; consumes go to
// consume.go.

// handle serves one whole request frame, valid until it returns.
//
// Requests run in the order they arrive. With fsync on, a produce waits for
// the disk on a goroutine; while one is in flight on a connection, the
// storage requests after it (produce, topic admin, truncate) join its
// queue and run on that goroutine in order, so consecutive produces to one
// topic are committed together and get offsets in request order. Consumes
// run on the event loop when their turn comes (see advance).
func (cs *conn) handle(frame []byte) {
	b := cs.b
	b.stats.requests.Add(1)
	start := b.clock()
	if op, later := cs.serve(frame, start); !later {
		b.observe(op, false, start)
	}
}

// serve is handle's body. It returns the request's op and whether the
// request is answered later (queued or a consume), which observes itself.
func (cs *conn) serve(frame []byte, start time.Time) (op protocol.Op, later bool) {
	cs.cutWait()
	h, payload, err := protocol.ParseRequestHeader(frame)
	if err != nil {
		cs.respondError(h.Op, h.CorrID, err)
		return h.Op, false
	}
	if cs.refuse(h) {
		return h.Op, false
	}
	switch h.Op {
	case protocol.OpHello:
		cs.hello(h, payload)
		return h.Op, false
	case protocol.OpPing:
		if err := protocol.ParsePingRequest(payload); err != nil {
			cs.respondError(h.Op, h.CorrID, err)
			return h.Op, false
		}
		cs.end(protocol.AppendEmptyResponse(cs.begin(), h.Op, h.CorrID))
		return h.Op, false
	case protocol.OpConsume:
		cs.handleConsume(h, payload, start)
		return h.Op, true
	case protocol.OpReplicaFetch:
		cs.handleReplicaFetch(h, payload, start)
		return h.Op, true
	case protocol.OpReplicaWait:
		cs.handleReplicaWait(h, payload, start)
		return h.Op, true
	case protocol.OpEpochEnd, protocol.OpClusterStatus, protocol.OpProducerOwners, protocol.OpLogEnds:
		cs.clusterOp(h, payload)
		return h.Op, false
	}
	return h.Op, cs.serveJob(h, payload, start)
}

// serveJob parses a storage request into a job, refuses it at once when
// the caller may not or its batch could never fit, and runs or queues
// it. It reports whether the request is answered later.
func (cs *conn) serveJob(h protocol.RequestHeader, payload []byte, start time.Time) (later bool) {
	b := cs.b
	jb, err := b.parseJob(h, payload)
	if err == nil && h.Op != protocol.OpListTopics {
		err = b.svc.Allow(cs.caller, h.Op, jb.topic) // refused at once; the service checks again when it runs
	}
	if err == nil && jb.decode {
		err = b.decodeFits(jb)
	}
	if err != nil {
		cs.respondError(h.Op, h.CorrID, err)
		return false
	}
	jb.caller, jb.start = cs.caller, start
	return cs.schedule(jb)
}

// parseJob parses the payload of a storage request into a job.
func (b *Broker) parseJob(h protocol.RequestHeader, payload []byte) (*job, error) {
	switch h.Op {
	case protocol.OpCreateTopic, protocol.OpDeleteTopic, protocol.OpTopicInfo:
		return b.topicJob(h, payload)
	case protocol.OpListTopics:
		return b.listJob(h, payload)
	case protocol.OpTruncate:
		return b.truncateJob(h, payload)
	case protocol.OpOffsetAt:
		return b.offsetAtJob(h, payload)
	case protocol.OpProduce:
		return b.produceJob(h, payload)
	case protocol.OpImport:
		return b.importJob(h, payload)
	case protocol.OpCommitOffset, protocol.OpFetchOffset, protocol.OpGroupLease, protocol.OpListGroups, protocol.OpDeleteGroup:
		return b.groupJob(h, payload)
	case protocol.OpClusterMember:
		return memberJob(h, payload)
	case protocol.OpTopicReplicas:
		return replicasJob(h, payload)
	}
	return nil, nil
}

// schedule runs jb on the loop when nothing runs before it and it is
// memory work, or hands it to the connection's goroutine: behind the
// requests queued there, or as a produce that waits for the disk or the
// followers. It reports whether the request is answered later.
func (cs *conn) schedule(jb *job) (later bool) {
	b := cs.b
	switch {
	case cs.w.busy():
		// Behind the storage requests the connection's goroutine runs.
	case jb.op == protocol.OpProduce && (b.fsync || b.svc.MayWaitForReplicas(jb.topic)) && !jb.decode:
		// (A replicated topic's waits for its followers, off the loop.)
		cs.produceAsync(jb)
		return true
	case cs.w.inStore.Load() > 0:
		// Produces are being stored: the goroutine runs it once they are,
		// so that it sees them.
	case !b.offLoop(jb):
		// Nothing runs before it: run it here, on the loop.
		cs.end(b.runJobs(cs.begin(), []*job{jb}))
		return false
	}
	cs.take(jb)
	cs.queueJob(jb)
	return true
}

// refuse answers at once, and reports, a request the server does not
// serve: it is stopping, or the connection needs a hello first.
func (cs *conn) refuse(h protocol.RequestHeader) bool {
	switch {
	case cs.b.stopping.Load():
		cs.respondError(h.Op, h.CorrID, errShuttingDown)
	case cs.needsHello(h.Op):
		cs.respondError(h.Op, h.CorrID, service.ErrUnauthenticated)
	default:
		return false
	}
	return true
}

// memberJob parses a cluster member request: a Raft commit, off the loop.
func memberJob(h protocol.RequestHeader, payload []byte) (*job, error) {
	action, entry, err := protocol.ParseClusterMemberRequest(payload)
	if err != nil {
		return nil, err
	}
	return &job{op: h.Op, corrID: h.CorrID, topic: service.MembershipTopic, memberAction: action, member: string(entry)}, nil
}

func replicasJob(h protocol.RequestHeader, payload []byte) (*job, error) {
	topic, n, err := protocol.ParseTopicReplicasRequest(payload)
	if err != nil {
		return nil, err
	}
	return &job{op: h.Op, corrID: h.CorrID, topic: string(topic), replicas: int(n)}, nil
}

// offLoop reports whether j may wait on the disk or spend CPU and so runs
// on the connection's goroutine: create, delete and truncate (directory
// syncs, file removals), the group ops (a commit rewrites a file per
// volume under the lock the others take), produce when appends fsync or
// its batch is compressed (storage decodes it to check it, waiting for a
// decode worker), and a list filtered by a regex. Info, a plain list and
// an uncompressed produce without fsync are memory and page-cache work:
// the walk over an uncompressed batch's messages (at most
// protocol.MaxBatchMessages) costs less than writing its bytes.
func (b *Broker) offLoop(j *job) bool {
	switch j.op {
	case protocol.OpCreateTopic, protocol.OpDeleteTopic, protocol.OpTruncate, protocol.OpOffsetAt, protocol.OpImport, protocol.OpClusterMember, protocol.OpTopicReplicas:
		return true // import: meta files and data written durably; offset at: a binary search that reads batch headers from the disk; cluster member, topic replicas: a Raft commit
	case protocol.OpCommitOffset, protocol.OpDeleteGroup, protocol.OpFetchOffset, protocol.OpGroupLease, protocol.OpListGroups:
		// A commit rewrites the groups file on every volume, holding the
		// topic's group table meanwhile, which the others take.
		return true
	case protocol.OpListTopics:
		return j.regex != "" // compiling and matching: CPU no event loop may spend
	case protocol.OpProduce:
		return b.fsync || j.decode || b.svc.MayWaitForReplicas(j.topic)
	}
	return false
}

// clusterOp answers the cluster's small ops on the loop: a follower's
// epoch end and producer owners requests, the controller's log ends and
// cluster status. (Producer
// owners takes the topic's write lock, which an append holds for a page
// cache write: a follower asks it only for producers new to it.)
func (cs *conn) clusterOp(h protocol.RequestHeader, payload []byte) {
	if h.Op == protocol.OpProducerOwners {
		topic, ids, err := protocol.ParseProducerOwnersRequest(payload)
		var owners map[uint64]string
		if err == nil {
			owners, err = cs.b.svc.ProducerOwners(cs.caller, string(topic), ids)
		}
		if err != nil {
			cs.respondError(h.Op, h.CorrID, err)
			return
		}
		cs.end(protocol.AppendProducerOwnersResponse(cs.begin(), h.CorrID, owners))
		return
	}
	if h.Op == protocol.OpLogEnds {
		cs.logEnds(h, payload)
		return
	}
	if h.Op == protocol.OpClusterStatus {
		st, err := cs.b.svc.ClusterStatus(cs.caller)
		var b []byte
		if err == nil {
			b, err = json.Marshal(st)
		}
		if err != nil {
			cs.respondError(h.Op, h.CorrID, err)
			return
		}
		cs.end(protocol.AppendClusterStatusResponse(cs.begin(), h.CorrID, b))
		return
	}
	topic, epoch, err := protocol.ParseEpochEndRequest(payload)
	var found, end int64
	if err == nil {
		found, end, err = cs.b.svc.EpochEnd(cs.caller, string(topic), epoch)
	}
	if err != nil {
		cs.respondError(h.Op, h.CorrID, err)
		return
	}
	cs.end(protocol.AppendEpochEndResponse(cs.begin(), h.CorrID, found, end))
}

// logEnds answers a log ends request: for each topic, a look at its
// epochs and next offset in memory (storage.Log.Info and Epochs).
func (cs *conn) logEnds(h protocol.RequestHeader, payload []byte) {
	names, err := protocol.ParseLogEndsRequest(payload)
	var ends []protocol.LogEnd
	if err == nil {
		topics := make([]string, len(names))
		for i, n := range names {
			topics[i] = string(n)
		}
		ends, err = cs.b.svc.LogEnds(cs.caller, topics)
	}
	if err != nil {
		cs.respondError(h.Op, h.CorrID, err)
		return
	}
	cs.end(protocol.AppendLogEndsResponse(cs.begin(), h.CorrID, ends))
}

// decodeFits refuses at once, on the loop, a compressed batch that
// declares more decoded bytes than the memory budget
// (Config.MaxBufferedBytes) holds: its decode could never fit it. Storage
// bounds the declared size by the largest batch and its decode budget
// before it decodes anything (storage.Options.MaxDecodeBytes).
func (b *Broker) decodeFits(j *job) error {
	if budget := b.cfg.MaxBufferedBytes; budget > 0 && int64(j.rawSize) > budget {
		return fmt.Errorf("%w: topic %q: %w: body declares %d bytes decoded, over the server's memory budget of %d (-max-buffered-bytes)",
			storage.ErrInvalidBatch, j.topic, protocol.ErrBadBody, j.rawSize, budget)
	}
	return nil
}

var errShuttingDown = &protocol.Error{Code: protocol.CodeShuttingDown, Message: "server is shutting down"}

// job is a parsed storage request; its fields are copies that outlive the
// frame.
type job struct {
	op     protocol.Op
	corrID uint32
	topic  string
	caller service.Caller // the connection's when it was parsed
	// produce
	flags   protocol.ProduceFlags
	expect  int64                      // with protocol.ProduceExpectOffset, the next offset required; else -1
	batch   *bytebufferpool.ByteBuffer // pooled copy; nil when run on the loop
	raw     []byte                     // the batch bytes
	decode  bool                       // the batch is compressed: storage decodes it, never on the loop
	rawSize int                        // with decode, the decoded size its header declares
	// cluster member: the action and the entry
	memberAction uint8
	member       string
	replicas     int // topic replicas: the replication factor asked for
	// list
	prefix string
	regex  string // list: the filter, compiled where the job runs
	// import: raw holds the batches
	iflags protocol.ImportFlags
	offset int64
	// truncate
	by     protocol.TruncateBy
	before int64
	// consumer group ops (groups.go)
	grp *groupReq

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
	return &job{op: h.Op, corrID: h.CorrID, prefix: string(req.Prefix), regex: string(req.Regex)}, nil
}

func (b *Broker) truncateJob(h protocol.RequestHeader, payload []byte) (*job, error) {
	req, err := protocol.ParseTruncateRequest(payload)
	if err != nil {
		return nil, err
	}
	return &job{op: h.Op, corrID: h.CorrID, topic: string(req.Topic), by: req.By, before: req.Before}, nil
}

func (b *Broker) offsetAtJob(h protocol.RequestHeader, payload []byte) (*job, error) {
	req, err := protocol.ParseOffsetAtRequest(payload)
	if err != nil {
		return nil, err
	}
	return &job{op: h.Op, corrID: h.CorrID, topic: string(req.Topic), before: req.Time}, nil
}

func (b *Broker) produceJob(h protocol.RequestHeader, payload []byte) (*job, error) {
	req, err := protocol.ParseProduceRequest(payload)
	if err != nil {
		return nil, err
	}
	// The batch borrows from the frame: fine on the loop, copied if queued.
	expect := int64(-1)
	if req.Flags&protocol.ProduceExpectOffset != 0 {
		expect = req.Expect
	}
	j := &job{op: h.Op, corrID: h.CorrID, topic: string(req.Topic), flags: req.Flags, expect: expect, raw: req.Batch}
	// Only the header is read here, and for an uncompressed batch one
	// byte. A batch it cannot parse is refused by storage before anything
	// is decoded, wherever it runs.
	if protocol.BatchCodec(req.Batch) != protocol.CodecNone {
		if bt, _, err := protocol.ParseBatch(req.Batch); err == nil && bt.Codec != protocol.CodecNone {
			j.decode, j.rawSize = true, bt.RawSize
		}
	}
	return j, nil
}

func (b *Broker) importJob(h protocol.RequestHeader, payload []byte) (*job, error) {
	req, err := protocol.ParseImportRequest(payload)
	if err != nil {
		return nil, err
	}
	// The batches borrow from the frame; an import always runs off the
	// loop, so take copies them.
	return &job{op: h.Op, corrID: h.CorrID, topic: string(req.Topic), iflags: req.Flags, offset: req.Offset, raw: req.Batches}, nil
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
	if isGroupOp(j.op) {
		return b.runGroupJob(dst, j)
	}
	var err error
	switch j.op {
	case protocol.OpCreateTopic:
		err = b.svc.CreateTopic(j.caller, j.topic)
	case protocol.OpDeleteTopic:
		err = b.svc.DeleteTopic(j.caller, j.topic)
	case protocol.OpClusterMember:
		err = b.svc.ClusterMember(j.caller, j.memberAction, j.member)
	case protocol.OpTopicReplicas:
		_, err = b.svc.SetReplicas(j.caller, j.topic, j.replicas)
	case protocol.OpTopicInfo:
		var info service.TopicInfo
		if info, err = b.svc.Info(j.caller, j.topic); err == nil {
			return protocol.AppendTopicInfoResponse(dst, j.corrID, protocol.TopicInfoResponse{
				OldestOffset: info.Oldest, NextOffset: info.Next, Bytes: info.Bytes, Segments: uint32(info.Segments),
			})
		}
	case protocol.OpListTopics:
		var names []string
		if names, err = b.svc.ListTopics(j.caller, j.prefix, j.regex); err == nil {
			return protocol.AppendListTopicsResponse(dst, j.corrID, names)
		}
	case protocol.OpTruncate:
		var info service.TopicInfo
		if info, err = b.truncate(j); err == nil {
			return protocol.AppendTruncateResponse(dst, j.corrID, info.Oldest)
		}
	case protocol.OpOffsetAt:
		var off int64
		if off, err = b.svc.OffsetAt(j.caller, j.topic, time.Unix(0, j.before)); err == nil {
			return protocol.AppendOffsetAtResponse(dst, j.corrID, off)
		}
	case protocol.OpImport:
		var resp protocol.ImportResponse
		if resp, err = b.importBatches(j); err == nil {
			return protocol.AppendImportResponse(dst, j.corrID, resp)
		}
	}
	if err != nil {
		return b.appendError(dst, j.op, j.corrID, err)
	}
	return protocol.AppendEmptyResponse(dst, j.op, j.corrID)
}

func (b *Broker) truncate(j *job) (service.TopicInfo, error) {
	if j.by == protocol.TruncateByTime {
		return b.svc.TruncateTime(j.caller, j.topic, time.Unix(0, j.before))
	}
	return b.svc.Truncate(j.caller, j.topic, j.before)
}

// importBatches stores the batches of the import j, creating the topic
// first when asked to and it is missing.
func (b *Broker) importBatches(j *job) (protocol.ImportResponse, error) {
	oldest, next, err := b.svc.Import(j.caller, j.topic, j.offset, j.raw, j.iflags&protocol.ImportCreateTopic != 0)
	if err == nil {
		b.stats.producedBytes.Add(int64(len(j.raw)))
	}
	return protocol.ImportResponse{OldestOffset: oldest, NextOffset: next}, err
}
