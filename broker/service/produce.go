package service

import (
	"errors"
	"fmt"

	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// This file: produce and import, the calls that write messages.

// AppendCallback hears the outcome of a ProduceAsync (storage's).
type AppendCallback = storage.AppendCallback

// A Produce is one batch of a ProduceMany.
type Produce struct {
	// Batch is the batch's bytes, exactly one batch (protocol.AppendBatch).
	Batch []byte
	// Expect, when 0 or more, appends the batch only if the topic's next
	// offset is then Expect (else CodeOffsetMismatch); -1: always.
	Expect int64
	// Create creates the topic first if it is missing.
	Create bool
	// AcksLeader answers a produce to a replicated topic once the leader
	// has it (acks=leader), not once every in-sync replica has (acks=all).
	AcksLeader bool
	// StrictSequence stores an idempotent producer's batch only as the
	// producer's next sequence (storage.AppendOptions.StrictSequence).
	StrictSequence bool
}

// options is p's conditions for storage, from c.
func (p Produce) options(c Caller) storage.AppendOptions {
	return storage.AppendOptions{Expect: p.Expect >= 0, Next: p.Expect, Owner: c.Owner(),
		StrictSequence: p.StrictSequence, Tenant: c.Tenant()}
}

// Produce appends p to topic (the produce right) and returns its base
// offset. With fsync on it waits for the disk.
func (s *Service) Produce(c Caller, topic string, p Produce) (int64, error) {
	bases, errs := s.ProduceMany(c, topic, []Produce{p})
	return bases[0], errs[0]
}

// ProduceMany appends ps to topic in order, committed together (one write
// and at most one fsync per volume), as one connection's pipelined
// produces: bases[i] and errs[i] are the outcome of ps[i]. Those that ask
// for it create the topic when it is missing. With fsync on it waits for
// the disk. An idempotent producer's id is bound to the token (c.Owner)
// whose batch first used it on the topic: another token's batch under it
// is refused (CodeProducerFenced). Without tokens every caller is trusted
// with every producer id.
func (s *Service) ProduceMany(c Caller, topic string, ps []Produce) (bases []int64, errs []error) {
	if err := s.Allow(c, protocol.OpProduce, topic); err != nil {
		errs = make([]error, len(ps))
		for i := range errs {
			errs[i] = err
		}
		return make([]int64, len(ps)), errs
	}
	if s.repl != nil {
		if _, err := s.repl.Producing(topic, acksAll(ps)); err != nil {
			errs = make([]error, len(ps))
			for i := range errs {
				errs[i] = err
			}
			return make([]int64, len(ps)), errs
		}
	}
	bases, errs = s.appendMany(c, topic, ps)
	var retry []int
	for i, err := range errs {
		if errors.Is(err, storage.ErrTopicNotFound) && ps[i].Create {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		s.retryCreated(c, topic, ps, retry, bases, errs)
	}
	if s.repl != nil {
		s.awaitReplicas(topic, ps, bases, errs)
	}
	return bases, errs
}

// appendMany appends ps to topic's log, committed together. A missing
// topic fails each batch that a topic would take with the lookup's error
// (ErrTopicNotFound, which a produce asking for it creates the topic on),
// and each that none would take with why not, as appending to it would.
func (s *Service) appendMany(c Caller, topic string, ps []Produce) (bases []int64, errs []error) {
	batches := make([][]byte, len(ps))
	opts := make([]storage.AppendOptions, len(ps))
	for i, p := range ps {
		batches[i], opts[i] = p.Batch, p.options(c)
	}
	l, err := s.store.Log(topic)
	if err != nil {
		errs = make([]error, len(ps))
		for i := range errs {
			if errs[i] = s.store.Validate(topic, batches[i], opts[i]); errs[i] == nil {
				errs[i] = err
			}
		}
		return make([]int64, len(ps)), errs
	}
	return l.AppendMany(batches, opts)
}

// appendAsync queues p for topic's log (storage's AppendAsync); a missing
// topic fails it with why when no topic would take the batch, else with
// the lookup's error.
func (s *Service) appendAsync(c Caller, topic string, p Produce, cb AppendCallback, arg any) error {
	o := p.options(c)
	l, err := s.store.Log(topic)
	if err != nil {
		if verr := s.store.Validate(topic, p.Batch, o); verr != nil {
			return verr
		}
		return err
	}
	return l.AppendAsync(p.Batch, o, cb, arg)
}

// acksAll reports whether a produce of ps waits for every in-sync
// replica: one of them asks it.
func acksAll(ps []Produce) bool {
	for _, p := range ps {
		if !p.AcksLeader {
			return true
		}
	}
	return false
}

// awaitReplicas waits until each stored produce of ps is committed as it
// asked (acks=all: on every in-sync replica), filing why not in errs.
func (s *Service) awaitReplicas(topic string, ps []Produce, bases []int64, errs []error) {
	done := make(chan error, 1)
	for i, p := range ps {
		if errs[i] != nil {
			continue
		}
		bt, _, err := protocol.ParseBatch(p.Batch) // valid: storage took it
		if err != nil {
			continue
		}
		s.repl.Appended(topic, bases[i]+int64(bt.Count), !p.AcksLeader, func(err error) { done <- err })
		errs[i] = <-done // in order: a later batch is committed no earlier
	}
}

// retryCreated creates topic and appends again the produces of ps at the
// indexes retry, which found it missing, filing their outcomes.
func (s *Service) retryCreated(c Caller, topic string, ps []Produce, retry []int, bases []int64, errs []error) {
	if cerr := s.create(topic); cerr != nil {
		for _, i := range retry {
			errs[i] = cerr // why the topic could not be created, not that it is missing
		}
		return
	}
	again := make([]Produce, len(retry))
	for k, i := range retry {
		again[k] = ps[i]
	}
	rb, re := s.appendMany(c, topic, again)
	for k, i := range retry {
		bases[i], errs[i] = rb[k], re[k]
	}
}

// ProduceAsync queues p for topic's next commit and returns at once (the
// produce right): cb.Appended(arg, ...) is called once every volume has
// the batch, and p.Batch must stay untouched until then. An error returned
// (no right, a bad batch, a missing topic) means nothing was queued and
// cb hears nothing. It never waits on the disk, so a missing topic is
// ErrTopicNotFound even with p.Create: off the event loop,
// ProduceAsyncCreate creates it.
func (s *Service) ProduceAsync(c Caller, topic string, p Produce, cb AppendCallback, arg any) error {
	if err := s.Allow(c, protocol.OpProduce, topic); err != nil {
		return err
	}
	if s.repl != nil {
		replicated, err := s.repl.Producing(topic, !p.AcksLeader)
		if err != nil {
			return err
		}
		if replicated {
			bt, _, err := protocol.ParseBatch(p.Batch)
			if err != nil {
				return s.appendAsync(c, topic, p, cb, arg) // storage says what is wrong
			}
			cb = &replicaAck{inner: cb, repl: s.repl, topic: topic, count: int64(bt.Count), acksAll: !p.AcksLeader}
		}
	}
	return s.appendAsync(c, topic, p, cb, arg)
}

// replicaAck holds the answer to a produce to a replicated topic until
// its replicas have the batch (acks=all), then passes it on.
type replicaAck struct {
	inner   AppendCallback
	repl    Replicas
	topic   string
	count   int64
	acksAll bool
}

func (a *replicaAck) Appended(arg any, base int64, err error) {
	if err != nil {
		a.inner.Appended(arg, base, err)
		return
	}
	a.repl.Appended(a.topic, base+a.count, a.acksAll, func(err error) {
		a.inner.Appended(arg, base, err)
		a.inner.Flush()
	})
}

func (a *replicaAck) Flush() { a.inner.Flush() }

// ProduceAsyncCreate is ProduceAsync for a produce that may wait on the
// disk: p, if it asks for it (p.Create), creates topic when it is
// missing, as ProduceMany does, and is queued then. When the topic could
// not be created the error says why, rather than that it is missing;
// without p.Create a missing topic is ErrTopicNotFound.
func (s *Service) ProduceAsyncCreate(c Caller, topic string, p Produce, cb AppendCallback, arg any) error {
	err := s.ProduceAsync(c, topic, p, cb, arg)
	if errors.Is(err, storage.ErrTopicNotFound) && p.Create {
		if err = s.create(topic); err == nil {
			err = s.ProduceAsync(c, topic, p, cb, arg)
		}
	}
	return err
}

// create creates topic for a produce or an import that asked for it: nil
// when it exists now, whoever created it. It may wait on the disk.
func (s *Service) create(topic string) error {
	if s.admin != nil {
		_, err := s.admin.Create(topic)
		return err
	}
	if err := s.store.CreateTopic(topic); err != nil && !errors.Is(err, storage.ErrTopicExists) {
		return err
	}
	return nil
}

// Import stores raw, whole batches already stamped with their offsets and
// append times, at offset of topic (the admin right: it writes at chosen
// offsets and times), creating the topic first if create and it is
// missing; it returns the topic's oldest and next offsets after. It waits
// on the disk.
func (s *Service) Import(c Caller, topic string, offset int64, raw []byte, create bool) (oldest, next int64, err error) {
	if err := s.Allow(c, protocol.OpImport, topic); err != nil {
		return 0, 0, err
	}
	if s.repl != nil {
		return 0, 0, fmt.Errorf("%w: import into a server of a cluster is not supported: produce to the topic's leader", protocol.ErrInvalidArgument)
	}
	var batches [][]byte
	for rest := raw; len(rest) > 0; {
		_, n, err := protocol.ParseBatch(rest)
		if err != nil {
			return 0, 0, err
		}
		batches = append(batches, rest[:n:n])
		rest = rest[n:]
	}
	l, err := s.store.Log(topic)
	if errors.Is(err, storage.ErrTopicNotFound) && create {
		// A topic is created only for an import it would take.
		if err = s.store.ValidateImport(topic, offset, batches); err == nil {
			if err = s.create(topic); err == nil {
				l, err = s.store.Log(topic)
			}
		}
	}
	if err != nil {
		return 0, 0, err
	}
	return l.Import(offset, batches)
}
