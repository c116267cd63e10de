package storage

import (
	"fmt"
	"log/slog"
	"time"
)

// FsyncPolicy says when appended data is fsynced.
type FsyncPolicy int

// Fsync policies. Whatever the policy, an append is acknowledged only after
// it is written to every volume, so a crash of the process (kill -9) never
// loses an acknowledged append: it sits in the page cache. The policy decides
// what a power loss or kernel crash can take.
const (
	// FsyncNever leaves flushing to the kernel (and to Close).
	FsyncNever FsyncPolicy = iota
	// FsyncInterval fsyncs every written file every FsyncInterval.
	FsyncInterval
	// FsyncAlways fsyncs every volume before acknowledging an append.
	// Concurrent appends to a topic share one fsync per volume (group commit).
	FsyncAlways
)

func (p FsyncPolicy) String() string {
	switch p {
	case FsyncNever:
		return "never"
	case FsyncInterval:
		return "interval"
	case FsyncAlways:
		return "always"
	}
	return fmt.Sprintf("FsyncPolicy(%d)", int(p))
}

// ParseFsyncPolicy parses "always", "interval" or "never".
func ParseFsyncPolicy(s string) (FsyncPolicy, error) {
	switch s {
	case "always":
		return FsyncAlways, nil
	case "interval":
		return FsyncInterval, nil
	case "never":
		return FsyncNever, nil
	}
	return 0, fmt.Errorf("%w: fsync policy %q: want always, interval or never", ErrInvalidOptions, s)
}

// MarshalText returns the policy's name, as ParseFsyncPolicy reads it.
func (p FsyncPolicy) MarshalText() ([]byte, error) {
	if p < FsyncNever || p > FsyncAlways {
		return nil, fmt.Errorf("%w: fsync policy %d", ErrInvalidOptions, int(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText sets the policy from its name, as ParseFsyncPolicy does,
// so that a policy works with flag.TextVar.
func (p *FsyncPolicy) UnmarshalText(text []byte) error {
	v, err := ParseFsyncPolicy(string(text))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// Options configures a Store. Start from DefaultOptions.
type Options struct {
	// Volumes are the directories every message is written to, in this
	// order; reads come from the last. At least one. Created if missing.
	Volumes []string
	// Entries is the number of messages after which a new segment starts
	// (default 5000). A batch is never split, so a segment may hold up to
	// Entries + (batch size - 1) messages.
	Entries int
	// SegmentBytes also starts a new segment once a segment holds this many
	// bytes (default 1 GiB, at most 4 GiB - 1 so positions fit the index).
	SegmentBytes int64
	// MaxBatchBytes is the largest batch accepted, header included
	// (default 64 MiB).
	MaxBatchBytes int
	// MaxDecodeBytes bounds the memory that checking compressed batches
	// decodes into at once, over every append in flight (default 0:
	// MaxBatchBytes, so one batch of the largest declared size, or many
	// smaller ones, at a time). An append of a compressed batch waits
	// until the decoded size its batch declares fits; one declaring more
	// than the whole bound (or than MaxBatchBytes) is refused before
	// anything is decoded. It does not count uncompressed batches, which
	// are checked in place.
	MaxDecodeBytes int64
	// MaxDecodeQueued bounds the decoded bytes that one tenant's
	// compressed batches waiting for a decode worker may declare together
	// (AppendOptions.Tenant; default 0: four times MaxDecodeBytes). A
	// tenant's first waiting batch always fits; past the bound an append
	// is refused with ErrDecodeQueueFull. Waiting decodes are shared among
	// tenants fairly (decode.go), so the bound is on what one tenant holds
	// queued, not on what it makes others wait.
	MaxDecodeQueued int64
	// DecodeWorkers bounds the compressed batches decoded at once to be
	// checked, over every append in flight (default DefaultDecodeWorkers():
	// GOMAXPROCS less one, at least 1; 0 means that default too), so that
	// a core stays for the event loops. Further appends of compressed
	// batches wait for one, in one queue per tenant served fairly
	// (AppendOptions.Tenant): an event loop must not append one itself.
	DecodeWorkers int
	// Cache keeps segment files open for reads between requests (default
	// true). Without it every read opens and closes its files.
	Cache bool
	// MaxOpenFiles bounds the descriptors held for segment files: read
	// handles kept by the cache and the topics' write handles together
	// (default DefaultMaxOpenFiles(): half the descriptor limit less 64;
	// at least 4 per volume). Over it, idle read handles are closed first,
	// then the files of the least recently written topics (reopened by
	// their next append); an append that still finds no room fails with
	// ErrTooManyFiles and the topic stays writable. Files in use by a read
	// stay open past the bound until released.
	MaxOpenFiles int
	// Fsync is the durability policy (default FsyncNever).
	Fsync FsyncPolicy
	// FsyncInterval is the period of FsyncInterval (default 1s).
	FsyncInterval time.Duration
	// RetentionAge deletes whole segments whose newest message is older
	// than this (default 0: keep forever).
	RetentionAge time.Duration
	// RetentionBytes deletes a topic's oldest whole segments while the
	// topic holds more than this many bytes (default 0: no limit).
	RetentionBytes int64
	// RetentionCheck is how often the retention sweeper runs (default 1m).
	RetentionCheck time.Duration
	// MinFreeBytes is the free space under which a volume refuses appends
	// with ErrNoSpace, checked every second and after a write fails for
	// space (default -1: 2% of the volume, at most 64 MiB; 0: no floor).
	// Appends resume by themselves once space returns.
	MinFreeBytes int64
	// Logger receives repair, retention and I/O error logs (default
	// slog.Default()).
	Logger *slog.Logger
	// FS is the file system (default OSFS{}).
	FS FS
	// Now returns the append time stamped into batches (default time.Now).
	Now func() time.Time
	// ProducerIdle is how long a topic remembers an idempotent producer
	// after its last batch (default 1h, DefaultProducerIdle): a batch sent
	// again later than that is stored again.
	ProducerIdle time.Duration
	// MaxProducers bounds the idempotent producers a topic remembers
	// (default 1000, DefaultMaxProducers), and an owner (token) at most a
	// quarter of them; past them the idle ones are forgotten first, then
	// the one idle longest of the owner itself or of the owner holding the
	// most (see Idempotent producers).
	MaxProducers int
	// MaxGroupsPerToken bounds the consumer groups, over all topics, that
	// one token (Commit.Owner, LeaseFor's owner) creates and holds
	// (default 1024, DefaultMaxGroupsPerToken); past it a new group is
	// refused with ErrTooManyGroups. Groups without an owner count
	// against MaxGroups only.
	MaxGroupsPerToken int
	// OnFsync, when set, is told the duration of every fsync of a segment
	// file (for metrics). It is called from appending goroutines and must
	// be quick.
	OnFsync func(time.Duration)
}

// DefaultOptions returns the defaults for the given volumes.
func DefaultOptions(volumes ...string) Options {
	return Options{
		Volumes:        volumes,
		Entries:        5000,
		SegmentBytes:   1 << 30,
		MaxBatchBytes:  64 << 20,
		Cache:          true,
		MaxOpenFiles:   DefaultMaxOpenFiles(),
		Fsync:          FsyncNever,
		FsyncInterval:  time.Second,
		RetentionCheck: time.Minute,
		MinFreeBytes:   -1,
		ProducerIdle:   DefaultProducerIdle,
		MaxProducers:   DefaultMaxProducers,
		DecodeWorkers:  DefaultDecodeWorkers(),

		MaxGroupsPerToken: DefaultMaxGroupsPerToken,
	}
}

// maxSegmentBytes keeps batch positions within the index's uint32.
const maxSegmentBytes = 1<<32 - 1

// Validate checks the options and fills in the defaults left zero (Logger,
// FS, Now, ProducerIdle, MaxProducers, MaxDecodeBytes, DecodeWorkers,
// MaxGroupsPerToken).
func (o *Options) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...)
	}
	switch {
	case len(o.Volumes) == 0:
		return bad("at least one volume is required")
	case o.Entries < 1:
		return bad("entries must be at least 1, got %d", o.Entries)
	case o.SegmentBytes < 1 || o.SegmentBytes > maxSegmentBytes:
		return bad("segment bytes must be in [1, %d], got %d", int64(maxSegmentBytes), o.SegmentBytes)
	case o.MaxBatchBytes < 64 || o.MaxBatchBytes > 1<<30:
		return bad("max batch bytes must be in [64, 1 GiB], got %d", o.MaxBatchBytes)
	case o.MaxOpenFiles < 4*len(o.Volumes):
		return bad("max open files must be at least 4 per volume (%d), got %d", 4*len(o.Volumes), o.MaxOpenFiles)
	case o.Fsync < FsyncNever || o.Fsync > FsyncAlways:
		return bad("unknown fsync policy %d", int(o.Fsync))
	case o.Fsync == FsyncInterval && o.FsyncInterval <= 0:
		return bad("fsync interval must be positive, got %s", o.FsyncInterval)
	case o.MaxDecodeBytes < 0:
		return bad("max decode bytes must be 0 (MaxBatchBytes) or more, got %d", o.MaxDecodeBytes)
	case o.MaxDecodeQueued < 0:
		return bad("max decode queued must be 0 (four times MaxDecodeBytes) or more, got %d", o.MaxDecodeQueued)
	case o.DecodeWorkers < 0:
		return bad("decode workers must be 0 (the default) or more, got %d", o.DecodeWorkers)
	case o.MinFreeBytes < -1:
		return bad("min free bytes must be -1 (automatic), 0 (none) or more, got %d", o.MinFreeBytes)
	case o.RetentionAge < 0 || o.RetentionBytes < 0:
		return bad("retention limits must not be negative")
	case (o.RetentionAge > 0 || o.RetentionBytes > 0) && o.RetentionCheck <= 0:
		return bad("retention check interval must be positive, got %s", o.RetentionCheck)
	case o.ProducerIdle < 0 || o.MaxProducers < 0:
		return bad("producer idle time and max producers must not be negative")
	case o.MaxGroupsPerToken < 0:
		return bad("max groups per token must not be negative, got %d", o.MaxGroupsPerToken)
	}
	if o.MaxGroupsPerToken == 0 {
		o.MaxGroupsPerToken = DefaultMaxGroupsPerToken
	}
	if o.ProducerIdle == 0 {
		o.ProducerIdle = DefaultProducerIdle
	}
	if o.MaxProducers == 0 {
		o.MaxProducers = DefaultMaxProducers
	}
	seen := make(map[string]bool, len(o.Volumes))
	for _, v := range o.Volumes {
		if v == "" {
			return bad("empty volume path")
		}
		if seen[v] {
			return bad("volume %q given twice", v)
		}
		seen[v] = true
	}
	if o.MaxDecodeBytes == 0 {
		o.MaxDecodeBytes = int64(o.MaxBatchBytes)
	}
	if o.MaxDecodeQueued == 0 {
		o.MaxDecodeQueued = 4 * o.MaxDecodeBytes
	}
	if o.DecodeWorkers == 0 {
		o.DecodeWorkers = DefaultDecodeWorkers()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.FS == nil {
		o.FS = OSFS{}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}
