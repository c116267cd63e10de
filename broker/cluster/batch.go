package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// This file: group commit on the Raft leader. The commands it applies,
// its own and those forwarded to it, go through one queue: while one
// Raft entry is in flight the commands that arrive wait, and the next
// entry carries all of them (up to maxBatch) as one batch command, which
// every member's state machine applies one by one, in order, each with
// its own answer. A stream of group commits from many consumers costs a
// Raft entry (and a log write on every member) per round trip rather
// than per commit: a tenant's 40,960 commits in 16 s grew raft.db from
// 32 KiB to 26 MiB before, and another tenant's commits queued behind
// them.

// batchMark marks a batch entry: it is the entry's Extensions, which a
// forwarded command (its Data only) cannot set, so that no member can
// forward a batch past the checks made on each command.
var batchMark = []byte("batch")

const (
	// opBatch is the op of a batch entry (batchEntry); never one of its
	// own commands.
	opBatch = "batch"
	// maxBatch and maxBatchBytes bound one entry: a group commit is about
	// 200 bytes of JSON, so a full batch is some 50 KiB, well under
	// maxForward.
	maxBatch      = 256
	maxBatchBytes = 256 << 10
)

// batchEntry is a batch command as the Raft log carries it: its
// commands, each a Command as JSON.
type batchEntry struct {
	Op    string            `json:"op"`
	Batch []json.RawMessage `json:"batch"`
}

// batchAnswer is the state machine's answer to a batch entry: for each
// command, what Apply answers for one alone (nil, an error, or a
// group command's []byte).
type batchAnswer []any

// appendBatch appends the batch entry of cmds to dst.
func appendBatch(dst []byte, cmds []*pendingApply) []byte {
	dst = append(dst, `{"op":"`+opBatch+`","batch":[`...)
	for i, p := range cmds {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, p.cmd...)
	}
	return append(dst, "]}"...)
}

// pendingApply is a command waiting in the queue.
type pendingApply struct {
	cmd  []byte           // the Command as JSON
	done chan applyResult // buffered: the applier never waits for its reader
}

type applyResult struct {
	index uint64
	res   []byte
	err   error
}

// batcher is the Raft leader's queue of commands to apply. Safe for
// concurrent use; run applies them.
type batcher struct {
	n       *Node
	wake    chan struct{} // buffered 1: the queue has commands
	stopped chan struct{} // closed when run returns

	mu    sync.Mutex
	queue []*pendingApply // mu must be held

	entries, commands atomic.Int64 // Raft entries applied through the queue, and the commands they held
}

func newBatcher(n *Node) *batcher {
	return &batcher{n: n, wake: make(chan struct{}, 1), stopped: make(chan struct{})}
}

// apply queues cmd and returns its log index and answer once the entry
// holding it is applied on this member (the Raft leader), or ErrClosed.
func (b *batcher) apply(cmd []byte) (uint64, []byte, error) {
	p := &pendingApply{cmd: cmd, done: make(chan applyResult, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, p)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	select {
	case r := <-p.done:
		return r.index, r.res, r.err
	case <-b.stopped:
		select {
		case r := <-p.done:
			return r.index, r.res, r.err
		default:
			return 0, nil, ErrClosed
		}
	}
}

// run applies the queued commands, an entry at a time, until the node
// closes (after Raft's shutdown ended the entry in flight, if any).
func (b *batcher) run() {
	defer close(b.stopped)
	for {
		select {
		case <-b.n.done:
			return
		case <-b.wake:
		}
		for {
			batch := b.take()
			if len(batch) == 0 {
				break
			}
			b.applyEntry(batch)
		}
	}
}

// take removes from the queue the commands of the next entry: as many
// as are there, up to maxBatch and maxBatchBytes (at least one).
func (b *batcher) take() []*pendingApply {
	b.mu.Lock()
	defer b.mu.Unlock()
	k, size := 0, 0
	for k < len(b.queue) && k < maxBatch && (k == 0 || size+len(b.queue[k].cmd) <= maxBatchBytes) {
		size += len(b.queue[k].cmd)
		k++
	}
	batch := b.queue[:k:k]
	if k == len(b.queue) {
		b.queue = nil
	} else {
		b.queue = b.queue[k:]
	}
	return batch
}

// applyEntry applies batch as one Raft entry, a command alone as itself,
// and answers each of its commands.
func (b *batcher) applyEntry(batch []*pendingApply) {
	data := batch[0].cmd
	if len(batch) > 1 {
		data = appendBatch(nil, batch)
	}
	b.entries.Add(1)
	b.commands.Add(int64(len(batch)))
	l := raft.Log{Data: data}
	if len(batch) > 1 {
		l.Extensions = batchMark
	}
	f := b.n.raft.ApplyLog(l, applyTimeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrLeadershipTransferInProgress) || errors.Is(err, raft.ErrRaftShutdown) {
			err = fmt.Errorf("%w: %w", ErrNotLeader, err)
		} else {
			err = fmt.Errorf("cluster: %w", err)
		}
		for _, p := range batch {
			p.done <- applyResult{err: err}
		}
		return
	}
	if len(batch) == 1 {
		batch[0].done <- answerOf(f.Index(), f.Response())
		return
	}
	ans, ok := f.Response().(batchAnswer)
	for i, p := range batch {
		switch {
		case ok && i < len(ans):
			p.done <- answerOf(f.Index(), ans[i])
		case !ok:
			p.done <- answerOf(f.Index(), f.Response()) // the entry was refused whole
		default:
			p.done <- applyResult{err: fmt.Errorf("%w: a batch of %d answered %d", ErrBadCommand, len(batch), len(ans))}
		}
	}
}

// answerOf is a command's result from the state machine's answer r.
func answerOf(index uint64, r any) applyResult {
	switch r := r.(type) {
	case error:
		return applyResult{err: r}
	case []byte:
		return applyResult{index: index, res: r}
	}
	return applyResult{index: index}
}

// applyBatch applies a batch entry's commands to f, in order: each as
// an entry of its own would be, at the entry's index.
func (f *fsm) applyBatch(index uint64, data []byte) batchAnswer {
	var e batchEntry
	if err := json.Unmarshal(data, &e); err != nil || e.Op != opBatch {
		return batchAnswer{fmt.Errorf("%w: a batch entry: %w", ErrBadCommand, err)}
	}
	out := make(batchAnswer, len(e.Batch))
	for i, raw := range e.Batch {
		var c Command
		if err := json.Unmarshal(raw, &c); err != nil {
			out[i] = fmt.Errorf("%w: %w", ErrBadCommand, err)
			continue
		}
		if c.Op == opBatch {
			out[i] = fmt.Errorf("%w: a batch within a batch", ErrBadCommand)
			continue
		}
		out[i] = f.applyOne(index, c)
	}
	return out
}

// BatchStats returns how many Raft entries this member applied through
// its queue as the Raft leader, and how many commands they held.
func (n *Node) BatchStats() (entries, commands int64) {
	return n.batch.entries.Load(), n.batch.commands.Load()
}
