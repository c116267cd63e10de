package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/haraqa/haraqa/protocol"
)

// Store is a set of topics kept on one or more volumes. It is safe for
// concurrent use.
type Store struct {
	opts  Options
	fs    FS
	cache *fileCache
	files *fileBudget // descriptors for segment files, read and write
	locks []File

	mu     sync.RWMutex
	topics map[string]*topic
	busy   map[string]chan struct{} // names being created or deleted; closed when done
	closed bool
	// cleanStart: the last stop of these volumes was a clean Close
	// (cleanName on every volume at Open), so everything appended before
	// it was on disk.
	cleanStart bool
	// closing is set once Close begins: held Logs fail with ErrClosed from
	// then on, as lookups do.
	closing atomic.Bool

	stats statsCounters
	// Deleted topic directories being removed in the background: removing
	// is closed when pendingRemovals drops to zero (WaitDeleted, Close).
	// Guarded by mu.
	pendingRemovals int
	removing        chan struct{}
	deleted         atomic.Uint64 // names deleted topic directories uniquely
	stop            chan struct{}
	wg              sync.WaitGroup

	groupCount atomic.Int64 // groups of all topics, within MaxGroups

	groupOwners groupQuota // groups per token, within MaxGroupsPerToken (groupsquota.go)

	decode      *decodeBudget // validations of compressed batches at once, and the bytes they decode into (decode.go)
	decoders    *lowThreads   // the threads they run on (decodethreads.go)
	space       space         // free space against Options.MinFreeBytes
	resourceLog everyFew      // appends refused for space or descriptors
}

// TopicInfo describes a topic.
type TopicInfo struct {
	Oldest   int64 // oldest readable offset
	Next     int64 // offset the next message will get
	Bytes    int64 // bytes of readable segment data on each volume: batches a truncation hid are not counted
	Segments int   // segment files on each volume
	// DiskBytes is what the segment files take on each volume, the hidden
	// batches of a truncated first segment included (they go when the
	// whole file does).
	DiskBytes int64
}

// Open locks the volumes, recovers every topic on them (repairing volumes
// from one another, see doc.go) and returns the store.
func Open(opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	vols := make([]string, len(opts.Volumes))
	for i, v := range opts.Volumes {
		vols[i] = filepath.Clean(v)
		for _, w := range vols[:i] {
			if w == vols[i] {
				return nil, fmt.Errorf("%w: volume %q given twice", ErrInvalidOptions, v)
			}
		}
	}
	opts.Volumes = vols
	s := &Store{
		opts:   opts,
		fs:     opts.FS,
		topics: make(map[string]*topic),
		busy:   make(map[string]chan struct{}),
		stop:   make(chan struct{}),
	}
	s.files = newFileBudget(opts.MaxOpenFiles)
	s.decode = newDecodeBudget(opts.MaxDecodeBytes, opts.DecodeWorkers, opts.MaxDecodeQueued)
	s.decoders = newLowThreads(opts.DecodeWorkers)
	s.cache = newFileCache(s.fs, opts.Cache, opts.MaxOpenFiles, s.files)
	if err := s.lockVolumes(); err != nil {
		s.unlockVolumes()
		return nil, err
	}
	if err := s.takeCleanMarks(); err != nil {
		s.unlockVolumes()
		return nil, err
	}
	if err := s.recoverAll(); err != nil {
		s.closeTopics()
		s.unlockVolumes()
		return nil, err
	}
	s.initSpace()
	s.wg.Add(1)
	go s.every(spaceCheck, s.measureSpace)
	if opts.Fsync == FsyncInterval {
		s.wg.Add(1)
		// A failed fsync turns its topic read-only and is logged there.
		go s.every(opts.FsyncInterval, func() { _ = s.Sync() })
	}
	if opts.RetentionAge > 0 || opts.RetentionBytes > 0 {
		s.wg.Add(1)
		go s.every(opts.RetentionCheck, s.applyRetention)
	}
	return s, nil
}

func (s *Store) lockVolumes() error {
	for _, v := range s.opts.Volumes {
		if _, err := s.fs.Stat(v); errors.Is(err, fs.ErrNotExist) {
			// Not an error: a first start makes its volumes. But a
			// mistyped path would otherwise start empty in silence.
			s.opts.Logger.Warn("storage: a volume directory did not exist; creating it empty (if data was expected there, check the volume paths, -volumes, for a typo)",
				"volume", v)
		}
		if err := s.fs.MkdirAll(filepath.Join(v, topicsDir), 0o755); err != nil {
			return fmt.Errorf("storage: volume %s: %w", v, err)
		}
		f, err := s.fs.OpenFile(filepath.Join(v, lockName), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("storage: volume %s: %w", v, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return fmt.Errorf("%w: %s", ErrVolumeLocked, v)
			}
			return fmt.Errorf("storage: volume %s: lock: %w", v, err)
		}
		s.locks = append(s.locks, f)
	}
	return nil
}

func (s *Store) unlockVolumes() {
	for _, f := range s.locks {
		f.Close() // closing the descriptor releases the flock
	}
	s.locks = nil
}

// Close stops the background work, writes the index of every active
// segment, fsyncs and closes every file and releases the volume locks.
// Appends after Close fail with ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.closed = true
	s.closing.Store(true)
	s.mu.Unlock()
	close(s.stop)
	s.wg.Wait()
	s.decoders.stop()
	_ = s.WaitDeleted(context.Background()) // no context to end
	err := s.closeTopics()
	s.cache.closeAll()
	// The active segments were fsynced above; sealed segments under
	// FsyncNever were left to the kernel: one syncfs(2) per volume flushes
	// them and every directory change.
	for v, f := range s.locks {
		if serr := unix.Syncfs(int(f.Fd())); serr != nil {
			err = errors.Join(err, fmt.Errorf("storage: syncfs volume %s: %w", s.opts.Volumes[v], serr))
		}
	}
	if err == nil && !s.anyReadOnly() {
		err = s.markClean()
	}
	s.unlockVolumes()
	return err
}

// allTopics returns a snapshot of the open topics.
func (s *Store) allTopics() []*topic {
	s.mu.RLock()
	defer s.mu.RUnlock()
	topics := make([]*topic, 0, len(s.topics))
	for _, t := range s.topics {
		topics = append(topics, t)
	}
	return topics
}

func (s *Store) closeTopics() error {
	topics := s.allTopics()
	var errs []error
	for _, t := range topics {
		errs = append(errs, t.close())
	}
	return errors.Join(errs...)
}

// topicDir is the directory of topic name in volume v.
func (s *Store) topicDir(v int, name string) string {
	return filepath.Join(s.opts.Volumes[v], topicsDir, name)
}

func (s *Store) lookup(name string) (*topic, error) {
	s.mu.RLock()
	t, ok := s.topics[name]
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if !ok {
		if err := validTopic(name); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %q", ErrTopicNotFound, name)
	}
	return t, nil
}

// CreateTopic creates an empty topic on every volume.
func (s *Store) CreateTopic(name string) error {
	if err := validTopic(name); err != nil {
		return err
	}
	// The directories are made and synced outside s.mu, so lookups of
	// other topics go on; busy keeps the name to this call meanwhile.
	if err := s.claim(name); err != nil {
		return err
	}
	if _, ok := s.topics[name]; ok {
		s.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrTopicExists, name)
	}
	done := make(chan struct{})
	s.busy[name] = done
	s.mu.Unlock()
	var err error
	for v := range s.opts.Volumes {
		dir := s.topicDir(v, name)
		if err = s.fs.MkdirAll(dir, 0o755); err == nil {
			err = s.fs.SyncDir(filepath.Dir(dir))
		}
		if err != nil {
			err = fmt.Errorf("storage: create topic %q: %w", name, err)
			break
		}
	}
	s.mu.Lock()
	delete(s.busy, name)
	close(done)
	if err == nil {
		s.topics[name] = newTopic(s, name)
	}
	s.mu.Unlock()
	return err
}

// claim locks s.mu once no creation or deletion of name is in progress,
// waiting for one that is. It returns with s.mu held, or with an error and
// s.mu not held.
func (s *Store) claim(name string) error {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return ErrClosed
		}
		done, ok := s.busy[name]
		if !ok {
			return nil
		}
		s.mu.Unlock()
		<-done
	}
}

// ListTopics returns the names of the topics that start with prefix, sorted.
func (s *Store) ListTopics(prefix string) []string {
	s.mu.RLock()
	names := make([]string, 0, len(s.topics))
	for name := range s.topics {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	s.mu.RUnlock()
	slices.Sort(names)
	return names
}

// HasTopic reports whether the store holds topic name: one map lookup
// under a read lock, for callers that only route on it.
func (s *Store) HasTopic(name string) bool {
	s.mu.RLock()
	_, ok := s.topics[name]
	s.mu.RUnlock()
	return ok
}

// Info describes a topic.
func (l *Log) Info() (TopicInfo, error) {
	t, err := l.live()
	if err != nil {
		return TopicInfo{}, err
	}
	return t.info()
}

// FsyncPolicy is the policy the store was opened with: with FsyncAlways,
// Append and AppendMany wait for the disk, which a caller serving many
// clients keeps off its event loops.
func (s *Store) FsyncPolicy() FsyncPolicy { return s.opts.Fsync }

// batchInfo is what validate learns of a batch that commit needs.
type batchInfo struct {
	count    int
	pid, seq uint64 // protocol.FlagProducer: the producer's id and sequence
}

// validate checks that batch is exactly one valid batch and returns its
// message count and producer. For a compressed batch it decodes the body
// (validateBody), which may wait for a decode worker in tenant's queue:
// event loops hand compressed batches to a goroutine rather than call it.
func (s *Store) validate(name string, batch []byte, tenant string) (batchInfo, error) {
	if err := s.spaceErr(); err != nil {
		return batchInfo{}, fmt.Errorf("topic %q: %w", name, err)
	}
	bt, n, err := parseBatch(batch, s.opts.MaxBatchBytes)
	if err != nil {
		return batchInfo{}, fmt.Errorf("%w: topic %q: %w", ErrInvalidBatch, name, err)
	}
	if n != len(batch) {
		return batchInfo{}, fmt.Errorf("%w: topic %q: %d bytes after the batch", ErrInvalidBatch, name, len(batch)-n)
	}
	if bt.Codec == protocol.CodecNone {
		err = bt.Validate()
	} else {
		err = s.validateBody(&bt, tenant)
	}
	if errors.Is(err, ErrDecodeQueueFull) {
		return batchInfo{}, fmt.Errorf("topic %q: %w", name, err)
	}
	if err != nil {
		return batchInfo{}, fmt.Errorf("%w: topic %q: %w", ErrInvalidBatch, name, err)
	}
	return batchInfo{count: bt.Count, pid: bt.ProducerID, seq: bt.Sequence}, nil
}

// validateBody checks the compressed batch bt: its CRC, then the decoded
// size it declares, at most MaxBatchBytes (what an uncompressed batch may
// hold) and MaxDecodeBytes (what every decode in flight takes together),
// both before anything is decoded; then it decodes the body once and
// counts its messages, so that a body that does not hold what its header
// claims is refused here rather than failing every consumer. The decode
// waits for one of DecodeWorkers and for the bytes its batch declares
// (decode.go), in tenant's queue.
func (s *Store) validateBody(bt *protocol.Batch, tenant string) error {
	if err := bt.Verify(); err != nil {
		return err
	}
	if limit := min(int64(s.opts.MaxBatchBytes), s.decode.max); int64(bt.RawSize) > limit {
		return fmt.Errorf("%w: body declares %d bytes decoded, over the limit of %d (the largest batch and the decode budget)", protocol.ErrBadBody, bt.RawSize, limit)
	}
	held, err := s.decode.acquire(tenant, int64(bt.RawSize))
	if err != nil {
		return err
	}
	defer s.decode.release(held)
	s.decoders.run(func() {
		p := decodeScratch.Get().(*[]byte)
		var raw []byte
		raw, err = bt.DecodeBodyInto(*p)
		if err == nil {
			err = bt.ValidateMessages(raw)
			*p = raw[:0]
		}
		if cap(*p) > maxKeptScratch {
			*p = nil
		}
		decodeScratch.Put(p)
	})
	return err
}

// decodeScratch holds buffers that validate decodes compressed batches
// into; buffers over maxKeptScratch are not kept.
var decodeScratch = sync.Pool{New: func() any { return new([]byte) }}

const maxKeptScratch = 4 << 20

// Truncate makes offsets before `before` unreadable and deletes the segments
// that hold only such offsets. The newest segment is always kept, so the
// next offset survives. Truncating past the end truncates to the end.
func (l *Log) Truncate(before int64) error {
	t, err := l.live()
	if err != nil {
		return err
	}
	return t.truncate(before)
}

// TruncateTime truncates before the first message appended at or after
// before.
func (l *Log) TruncateTime(before time.Time) error {
	t, err := l.live()
	if err != nil {
		return err
	}
	if before.Before(time.Unix(0, math.MinInt64)) {
		return nil // nothing was appended before it
	}
	off, err := t.offsetAtTime(protocol.UnixNano(before))
	if err != nil {
		return err
	}
	return t.truncate(off)
}

// OffsetAt returns the first offset of the topic whose batch was appended
// at or after at: the oldest offset for a time at or before the oldest
// message, the next offset for a time after the newest. The answer is a
// batch's first offset (append times are per batch), never before the
// oldest.
func (l *Log) OffsetAt(at time.Time) (int64, error) {
	t, err := l.live()
	if err != nil {
		return 0, err
	}
	off, err := t.offsetAtTime(protocol.UnixNano(at))
	if err != nil {
		return 0, err
	}
	t.mu.RLock()
	oldest := t.start
	t.mu.RUnlock()
	return max(off, oldest), nil
}

// Sync fsyncs the active segment of every topic on every volume.
func (s *Store) Sync() error {
	topics := s.allTopics()
	var errs []error
	for _, t := range topics {
		errs = append(errs, t.sync(), t.syncGroups())
	}
	return errors.Join(errs...)
}

// every runs fn every interval until the store closes.
func (s *Store) every(interval time.Duration, fn func()) {
	defer s.wg.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			fn()
		}
	}
}

// writeFile replaces the contents of path with data, without fsync: for
// derived files (indexes) that recovery checks and rebuilds.
func (s *Store) writeFile(path string, data []byte) error {
	// A temporary file renamed into place: a write that fails (a full
	// disk) leaves the old file or none, never a short one.
	tmp := path + tmpSuffix
	f, err := s.fs.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.fs.Rename(tmp, path)
	}
	if err != nil {
		_ = s.fs.Remove(tmp) // best effort; open removes leftovers too
	}
	return err
}

// writeFileDurable writes data to path: a temporary file, fsync, rename over
// path, fsync of the directory.
func (s *Store) writeFileDurable(path string, data []byte) error {
	tmp := path + tmpSuffix
	f, err := s.fs.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.fs.Rename(tmp, path)
	}
	if err == nil {
		err = s.fs.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		_ = s.fs.Remove(tmp) // best effort; recovery removes leftovers too
		return err
	}
	return nil
}
