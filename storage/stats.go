package storage

import (
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Stats counts what recovery repaired and what the store holds. The
// broker exports them as metrics.
type Stats struct {
	// Repairs counts repair actions at open: a batch rewritten on a volume,
	// a torn tail cut, a missing directory or file recreated, an index
	// rebuilt, a bad meta or epochs file replaced.
	Repairs int64
	// RepairedBytes counts bytes copied from one volume to another.
	RepairedBytes int64
	// TruncatedBytes counts bytes cut from torn tails.
	TruncatedBytes int64
	// UnreadableRanges counts offset ranges found corrupted on every volume,
	// and groups and epochs files unreadable on every volume.
	UnreadableRanges int64
	// DroppedTails counts last segments whose unacknowledged tail (on some
	// volumes, not on the last) was cut at open because copying it to the
	// others failed for want of space; DroppedTailBytes their bytes.
	DroppedTails, DroppedTailBytes int64
	// OpenFiles is the number of read handles the file cache holds.
	OpenFiles int
	// WriteFiles is the number of write handles open: active segments'
	// logs and next segments' prepared files.
	WriteFiles int
	// MaxOpenFiles is the budget both share (Options.MaxOpenFiles).
	MaxOpenFiles int
	// DecodeWaits counts appends of compressed batches that waited for a
	// decode worker (Options.DecodeWorkers) or for Options.MaxDecodeBytes
	// before their batch was checked.
	DecodeWaits int64
	// DecodeRefused counts appends of compressed batches refused with
	// ErrDecodeQueueFull: their tenant had Options.MaxDecodeQueued bytes
	// waiting for the decode workers.
	DecodeRefused int64
}

type statsCounters struct {
	repairs, repairedBytes, truncatedBytes, unreadable atomic.Int64
	droppedTails, droppedTailBytes                     atomic.Int64
	watchIDs                                           atomic.Uint64
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{
		Repairs:          s.stats.repairs.Load(),
		RepairedBytes:    s.stats.repairedBytes.Load(),
		TruncatedBytes:   s.stats.truncatedBytes.Load(),
		UnreadableRanges: s.stats.unreadable.Load(),
		DroppedTails:     s.stats.droppedTails.Load(),
		DroppedTailBytes: s.stats.droppedTailBytes.Load(),
		OpenFiles:        s.cache.open(),
		WriteFiles:       s.files.writeFiles(),
		MaxOpenFiles:     int(s.files.max),
		DecodeWaits:      s.decode.waits.Load(),
		DecodeRefused:    s.decode.refused.Load(),
	}
}

// fsync syncs a segment file, telling Options.OnFsync how long it took.
func (s *Store) fsync(f File) error {
	if s.opts.OnFsync == nil {
		return f.Sync()
	}
	start := time.Now()
	err := f.Sync()
	s.opts.OnFsync(time.Since(start))
	return err
}

// TopicStats is one topic's size and traffic, for metrics.
type TopicStats struct {
	Name string
	TopicInfo
	// ProducedMessages and ProducedBytes count what was appended since the
	// store opened (bytes are batch bytes, headers included).
	ProducedMessages, ProducedBytes int64
	// ConsumedMessages and ConsumedBytes count what Read returned since
	// the store opened: messages from the offset asked for to the end of
	// the result, and the bytes of the whole batches holding them.
	ConsumedMessages, ConsumedBytes int64
	// ReplicatedMessages and ReplicatedBytes count what a follower copied
	// from its leader (Replicate), which the produced counters leave out;
	// ReplicaReadMessages and ReplicaReadBytes what a leader read for its
	// followers (ReadReplica), which the consumed counters leave out.
	ReplicatedMessages, ReplicatedBytes   int64
	ReplicaReadMessages, ReplicaReadBytes int64
	// ReadOnly: a failed write or fsync turned the topic read-only
	// (Log.ReadOnly) until the store is opened again.
	ReadOnly bool
}

// TopicStats returns every topic's stats, sorted by name.
func (s *Store) TopicStats() []TopicStats {
	topics := s.allTopics()
	out := make([]TopicStats, 0, len(topics))
	for _, t := range topics {
		info, err := t.info()
		if err != nil {
			continue // deleted meanwhile
		}
		out = append(out, TopicStats{
			Name:             t.name,
			TopicInfo:        info,
			ProducedMessages: t.produced.Load(),
			ProducedBytes:    t.producedBytes.Load(),
			ConsumedMessages: t.consumed.Load(),
			ConsumedBytes:    t.consumedBytes.Load(),

			ReplicatedMessages:  t.replicated.Load(),
			ReplicatedBytes:     t.replicatedBytes.Load(),
			ReplicaReadMessages: t.replicaRead.Load(),
			ReplicaReadBytes:    t.replicaReadBytes.Load(),
			ReadOnly:            t.readOnly() != nil,
		})
	}
	slices.SortFunc(out, func(a, b TopicStats) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Volumes returns the volume directories, in the order writes go to them.
func (s *Store) Volumes() []string { return slices.Clone(s.opts.Volumes) }
