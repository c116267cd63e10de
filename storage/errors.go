package storage

import "errors"

// Errors returned by storage, wrapped with context (topic, volume, offset).
// Test with errors.Is.
var (
	// ErrTopicNotFound: the topic does not exist.
	ErrTopicNotFound = errors.New("storage: topic not found")
	// ErrTopicExists: CreateTopic on a topic that exists.
	ErrTopicExists = errors.New("storage: topic already exists")
	// ErrInvalidTopic: the name is not 1-255 bytes of [A-Za-z0-9._-], or is "." or "..".
	ErrInvalidTopic = errors.New("storage: invalid topic name")
	// ErrInvalidBatch: an appended batch failed validation (CRC, count, header).
	ErrInvalidBatch = errors.New("storage: invalid batch")
	// ErrDecodeQueueFull: a tenant's compressed batches waiting for the
	// decode workers already declare Options.MaxDecodeQueued decoded bytes
	// with this one; nothing is appended. Retry once some are checked.
	ErrDecodeQueueFull = errors.New("storage: too many decodes waiting for this tenant (MaxDecodeQueued)")
	// ErrOffsetOutOfRange: the offset is before the oldest retained message.
	ErrOffsetOutOfRange = errors.New("storage: offset out of range")
	// ErrUnreadable: the range was corrupted on every volume; it is never served.
	ErrUnreadable = errors.New("storage: data unreadable: corrupted on every volume")
	// ErrReadOnly: an earlier write or fsync failed; the topic accepts no
	// more appends until the server is restarted. The original error is
	// wrapped alongside.
	ErrReadOnly = errors.New("storage: topic is read-only after an I/O error")
	// ErrNoSpace: a volume has less free space than Options.MinFreeBytes,
	// or a write failed for space (ENOSPC, EDQUOT) and was cut back;
	// appends are refused until it has more. Nothing is acknowledged that
	// was not written, and the topic stays writable.
	ErrNoSpace = errors.New("storage: volume is full")
	// ErrTooManyFiles: opening a segment's files would take the store
	// over Options.MaxOpenFiles and no idle file could be closed to make
	// room. Nothing is written; the topic stays writable.
	ErrTooManyFiles = errors.New("storage: too many open files")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("storage: store is closed")
	// ErrVolumeLocked: another process holds the volume's lock.
	ErrVolumeLocked = errors.New("storage: volume is locked by another process")
	// ErrCorruptLayout: a topic directory holds files that contradict each
	// other (overlapping segments) and cannot be opened safely.
	ErrCorruptLayout = errors.New("storage: corrupt topic layout")
	// ErrInvalidGroup: a group name breaks the topic naming rules, or a
	// member id is empty or longer than 255 bytes.
	ErrInvalidGroup = errors.New("storage: invalid group name")
	// ErrGroupBusy: another member holds a live lease on the (group, topic).
	ErrGroupBusy = errors.New("storage: group busy")
	// ErrCommitConflict: a compare-and-set commit found another committed offset.
	ErrCommitConflict = errors.New("storage: commit conflict")
	// ErrTooManyGroups: a new group would pass MaxGroupsPerTopic or
	// MaxGroups; the message names the limit.
	ErrTooManyGroups = errors.New("storage: too many groups")
	// ErrOutOfOrderSequence: an idempotent producer's batch carries a
	// sequence below every one the topic remembers for it, so whether it
	// was stored cannot be told; or a remembered sequence came back with
	// another message count; or a batch asking for strict order
	// (AppendOptions.StrictSequence) does not follow the highest stored.
	// Nothing is written.
	ErrOutOfOrderSequence = errors.New("storage: idempotent producer's sequence is out of order")
	// ErrProducerFenced: an idempotent producer's batch sent by another
	// owner (token) than the one its producer id is bound to. Nothing is
	// written.
	ErrProducerFenced = errors.New("storage: idempotent producer belongs to another owner")
	// ErrUnknownProducer: a batch of an idempotent producer the topic
	// forgot to make room for others, which is not a new producer's first
	// (its sequence is not 0): it may be the retry of a batch stored
	// before, so it is refused rather than maybe stored twice. Nothing is
	// written.
	ErrUnknownProducer = errors.New("storage: idempotent producer was forgotten")
	// ErrOffsetLimit: the messages of an append or an import would pass
	// MaxOffset. Nothing is written.
	ErrOffsetLimit = errors.New("storage: offset limit reached")
	// ErrOffsetMismatch: an append conditional on the topic's next offset
	// (AppendOptions.Expect) found another next offset. Nothing is written.
	ErrOffsetMismatch = errors.New("storage: topic's next offset is not the expected one")
	// ErrImportRefused: Import into a topic that holds messages appended
	// the ordinary way: only a topic without segments, or one that has
	// received nothing but imports, is imported into. Nothing is written.
	ErrImportRefused = errors.New("storage: topic is not empty and not being imported")
	// ErrInvalidImport: imported batches that do not follow each other or
	// the topic (offsets with gaps, append times that go back, a first
	// batch that does not hold the import's offset). Nothing is written.
	ErrInvalidImport = errors.New("storage: imported batches are out of order")
	// ErrInvalidEpoch: SetEpoch with an epoch below the last recorded
	// one, a start before the last entry's start or outside [0,
	// MaxOffset], or a negative epoch. Nothing is recorded.
	ErrInvalidEpoch = errors.New("storage: invalid leader epoch")
	// ErrInvalidOptions: Options.Validate failed.
	ErrInvalidOptions = errors.New("storage: invalid options")
)
