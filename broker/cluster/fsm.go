package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"
)

// fsm is the Raft state machine: the State, changed only by the Commands
// the Raft log carries, in log order, on every member alike.
type fsm struct {
	mu       sync.RWMutex
	st       *State
	onChange func(index uint64, c Command) // after each applied command; Op "restore" after a snapshot
}

var _ raft.FSM = (*fsm)(nil)

// Apply implements raft.FSM. It returns the error refusing the command,
// or for a group command the group as it is after it (groupAnswer), else
// nil: to the proposer, through the ApplyFuture's Response. A batch
// entry (batch.go) answers each of its commands so, in a batchAnswer.
func (f *fsm) Apply(l *raft.Log) any {
	if bytes.Equal(l.Extensions, batchMark) {
		return f.applyBatch(l.Index, l.Data)
	}
	var c Command
	if err := json.Unmarshal(l.Data, &c); err != nil {
		return fmt.Errorf("%w: %w", ErrBadCommand, err)
	}
	return f.applyOne(l.Index, c)
}

// applyOne applies command c of the entry at index.
func (f *fsm) applyOne(index uint64, c Command) any {
	f.mu.Lock()
	err := f.st.apply(c)
	var res []byte
	if err == nil && isGroupOp(c.Op) {
		res = groupAnswer(f.st, c)
	}
	f.mu.Unlock()
	if err != nil {
		return err
	}
	if f.onChange != nil {
		f.onChange(index, c)
	}
	if res != nil {
		return res
	}
	return nil
}

// Snapshot implements raft.FSM.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	b, err := json.Marshal(f.st)
	f.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	return snapshot(b), nil
}

// Restore implements raft.FSM.
func (f *fsm) Restore(r io.ReadCloser) error {
	defer r.Close()
	st := newState()
	if err := json.NewDecoder(r).Decode(st); err != nil {
		return fmt.Errorf("cluster: restoring a snapshot: %w", err)
	}
	if st.Members == nil {
		st.Members = map[string]Member{}
	}
	if st.Topics == nil {
		st.Topics = map[string]*Topic{}
	}
	if st.Groups == nil {
		st.Groups = map[string]map[string]*Group{}
	}
	f.mu.Lock()
	f.st = st
	f.mu.Unlock()
	if f.onChange != nil {
		f.onChange(0, Command{Op: "restore"})
	}
	return nil
}

// read calls fn with the State under the read lock; fn must not keep it.
func (f *fsm) read(fn func(*State)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.st)
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s snapshot) Release() {}
