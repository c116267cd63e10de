package storage

import "sync/atomic"

// Stats counts what recovery repaired and what the store holds. The
// broker exports them as metrics.
type Stats struct {
	// Repairs counts repair actions at open: a batch rewritten on a volume,
	// a torn tail cut, a missing directory or file recreated, an index
	// rebuilt, a bad meta file replaced.
	Repairs int64
	// RepairedBytes counts bytes copied from one volume to another.
	RepairedBytes int64
	// TruncatedBytes counts bytes cut from torn tails.
	TruncatedBytes int64
	// UnreadableRanges counts offset ranges found corrupted on every volume.
	UnreadableRanges int64
	// OpenFiles is the number of read handles the file cache holds.
	OpenFiles int
}

type statsCounters struct {
	repairs, repairedBytes, truncatedBytes, unreadable atomic.Int64
	watchIDs                                           atomic.Uint64
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{
		Repairs:          s.stats.repairs.Load(),
		RepairedBytes:    s.stats.repairedBytes.Load(),
		TruncatedBytes:   s.stats.truncatedBytes.Load(),
		UnreadableRanges: s.stats.unreadable.Load(),
		OpenFiles:        s.cache.open(),
	}
}
