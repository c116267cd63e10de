package storage

import (
	"errors"
	"fmt"
)

// Log is a handle on one log of the store: today a topic's, the one log
// it has. Store.Log looks the log up once; its methods then work on it
// without looking it up again: appends, reads, offsets, watches,
// producers, consumer groups, truncation and replication writes.
//
// A handle stays valid while its log lives. Once the log is deleted
// (Store.DeleteTopic) every method fails with ErrTopicNotFound, and once
// the store is closed with ErrClosed, as a lookup by name would: a held
// handle never writes into a deleted log, even when a topic of the same
// name was created since (look that one up anew). A Log is safe for
// concurrent use.
type Log struct {
	t *topic
}

// Log returns the handle on topic name's log, or an error wrapping
// ErrTopicNotFound (ErrInvalidTopic for a name no topic can have), or
// ErrClosed. It allocates nothing: a topic keeps its handle.
func (s *Store) Log(name string) (*Log, error) {
	t, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	return &t.log, nil
}

// Name is the name of the topic whose log l is.
func (l *Log) Name() string { return l.t.name }

// live returns l's topic, or why it is gone: ErrClosed once the store is
// closing, the ErrTopicNotFound its deletion left, or ErrClosed once it
// is closed.
func (l *Log) live() (*topic, error) {
	t := l.t
	if t.s.closing.Load() {
		return nil, ErrClosed
	}
	t.mu.RLock()
	err := t.err
	t.mu.RUnlock()
	if err != nil && (errors.Is(err, ErrTopicNotFound) || errors.Is(err, ErrClosed)) {
		return nil, err
	}
	return t, nil
}

// AppendOptions are the conditions of one append. The zero AppendOptions
// appends unconditionally, as a trusted owner.
type AppendOptions struct {
	// Expect appends the batch only if the log's next offset is then Next
	// (else ErrOffsetMismatch and nothing is written): optimistic
	// concurrency for writers that read the log's end first. A batch its
	// idempotent producer sent before is answered with its first offset
	// whatever Next says.
	Expect bool
	Next   int64
	// Owner is who sends the batch, a token's hash: an idempotent
	// producer is bound to the owner whose batch first used it, and
	// another owner's batch under it fails with ErrProducerFenced (see
	// Idempotent producers in doc.go). "" is trusted with every producer.
	Owner string
	// StrictSequence appends an idempotent producer's batch only if its
	// sequence is the highest the log stored for the producer plus one
	// (else ErrOutOfOrderSequence, nothing written), so that its batches
	// are stored in sequence order whatever order they arrive in. A batch
	// stored before is answered with its first offset as without it, and
	// a producer the log does not remember takes any sequence.
	StrictSequence bool
	// Tenant names the queue a compressed batch waits in for a decode
	// worker: decodes are shared fairly among tenants (decode.go), and
	// Options.MaxDecodeQueued bounds each one's queue. "" means Owner.
	Tenant string
}

// tenant is the decode queue o's batch waits in.
func (o *AppendOptions) tenant() string {
	if o.Tenant != "" {
		return o.Tenant
	}
	return o.Owner
}

// request fills r with o's conditions and bi, what validate learnt.
func (o *AppendOptions) request(r *appendReq, batch []byte, bi batchInfo) {
	r.batch, r.count, r.pid, r.seq = batch, bi.count, bi.pid, bi.seq
	r.owner, r.strict = o.Owner, o.StrictSequence
	r.cond, r.expect = o.Expect, o.Next
}

// Append validates batch (header, CRC and, when uncompressed, its
// messages), stamps its base offset and append time into it in place,
// writes it to every volume in order and returns its base offset once
// every volume has it (and, with FsyncAlways, once every volume has
// fsynced it), under the conditions of o. Appends that arrive together are
// written together: one write per volume, one fsync. batch must hold
// exactly one batch and must not be used by the caller until Append
// returns.
func (l *Log) Append(batch []byte, o AppendOptions) (int64, error) {
	bi, err := l.t.s.validate(l.t.name, batch, o.tenant())
	if err != nil {
		return 0, err
	}
	t, err := l.live()
	if err != nil {
		return 0, err
	}
	req := reqPool.Get().(*appendReq)
	o.request(req, batch, bi)
	t.committer.appendReqs([]*appendReq{req})
	base, err := req.base, req.err
	*req = appendReq{ready: req.ready}
	reqPool.Put(req)
	return base, err
}

// AppendMany appends batches in the order given, batches[i] under the
// conditions of opts[i] (opts nil: none; else one per batch, or it
// panics), committed together (one write
// and at most one fsync per volume for all of them, with whatever else is
// queued). It is Append for a caller that holds several batches, such as
// a connection pipelining produces: their offsets follow their order.
// bases[i] and errs[i] are the outcome of batches[i]; a batch that fails
// validation does not stop the others.
func (l *Log) AppendMany(batches [][]byte, opts []AppendOptions) (bases []int64, errs []error) {
	if opts != nil && len(opts) != len(batches) {
		panic(fmt.Sprintf("storage: AppendMany of %d batches with %d options", len(batches), len(opts)))
	}
	bases = make([]int64, len(batches))
	errs = make([]error, len(batches))
	infos := make([]batchInfo, len(batches))
	for i, batch := range batches {
		var o AppendOptions
		if opts != nil {
			o = opts[i]
		}
		infos[i], errs[i] = l.t.s.validate(l.t.name, batch, o.tenant())
	}
	t, err := l.live()
	if err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return bases, errs
	}
	reqs := make([]*appendReq, 0, len(batches))
	for i, batch := range batches {
		if errs[i] == nil {
			r := &appendReq{}
			if opts != nil {
				opts[i].request(r, batch, infos[i])
			} else {
				(&AppendOptions{}).request(r, batch, infos[i])
			}
			reqs = append(reqs, r)
		}
	}
	t.committer.appendReqs(reqs)
	j := 0
	for i := range batches {
		if errs[i] == nil {
			bases[i], errs[i] = reqs[j].base, reqs[j].err
			j++
		}
	}
	return bases, errs
}

// AppendAsync is Append without the wait, for a caller that has more to
// send before the answer comes back (a connection pipelining produces): it
// validates batch and queues it for the log's next commit, and returns.
// Validating a compressed batch may wait for a decode worker
// (Options.DecodeWorkers): an event loop hands those to a goroutine.
// Batches queued by one goroutine get offsets in the order queued, and
// share commits (one write and fsync per volume) with each other and with
// every other append to the log.
//
// An error returned (a bad batch, a deleted log) means batch was not
// queued and cb hears nothing of it. Otherwise cb.Appended(arg, ...) is
// called once, after every volume has the batch (and has fsynced it, with
// FsyncAlways). batch must not be used by the caller until then.
func (l *Log) AppendAsync(batch []byte, o AppendOptions, cb AppendCallback, arg any) error {
	bi, err := l.t.s.validate(l.t.name, batch, o.tenant())
	if err != nil {
		return err
	}
	t, err := l.live()
	if err != nil {
		return err
	}
	r := &appendReq{cb: cb, arg: arg}
	o.request(r, batch, bi)
	t.committer.appendAsync(r)
	return nil
}

// Validate checks batch as Append under o would (its header, CRC and
// messages, a compressed one decoded in o's tenant's queue, and the
// volumes' free space) without a log: for a caller that found topic name
// missing and must tell a bad batch, which no topic would take, from one
// that only lacks its topic. Its errors name topic name as Append's do.
func (s *Store) Validate(name string, batch []byte, o AppendOptions) error {
	_, err := s.validate(name, batch, o.tenant())
	return err
}
