// Package storage keeps topics as append-only logs of batches on one or
// more volumes, and repairs the volumes from one another when it opens them.
//
// A batch (see package protocol) is stored exactly as it arrived, with the
// base offset and append time stamped into its header; the CRC is not
// recomputed because it does not cover those fields. The bytes on disk are
// the bytes a consumer receives, so reads are returned as spans of files
// (file, position, length) that the broker can send with sendfile(2).
//
// # Volumes and files
//
// Every volume is a directory, meant for its own disk:
//
//	<volume>/LOCK                      flock(2)ed while a Store has the volume open
//	<volume>/CLEAN                     empty mark of a clean Close: written once every file is on
//	                                   disk, removed (durably) by Open; CleanStart reports it
//	<volume>/topics/<topic>/           one directory per topic
//	<volume>/topics/<topic>/NNNN.log   segment log, NNNN = base offset, 20 digits zero-padded
//	<volume>/topics/<topic>/NNNN.idx   segment index
//	<volume>/topics/<topic>/meta       start offset, present after a truncation inside a segment
//	<volume>/topics/<topic>/groups     consumer groups' committed offsets, present after a first commit
//	<volume>/topics/<topic>/importing  empty marker: the topic is being imported (Import)
//	<volume>/topics/<topic>/epochs     leader epochs and the offsets they began at, present after a first SetEpoch
//	<volume>/topics/<topic>/truncating new next offset of a cut in progress (TruncateAfter)
//	<volume>/topics/~deleted.<topic>.N a deleted topic being removed
//
// Topic names are 1-255 bytes of [A-Za-z0-9._-] and neither "." nor "..",
// so a topic is always one directory inside topics/ and nothing can escape
// the volume. "~" is not a topic character, so deleted directories and files
// ending in ".tmp" (a durable write in progress) never clash with a topic.
// Unknown entries in topics/ are ignored and logged.
//
// Every volume holds byte-identical files: each append writes the same
// stamped bytes at the same position of the same segment on every volume,
// in the order the volumes were given. Reads come from the last volume.
//
// # Segment log (NNNN.log)
//
// Batches back to back, nothing else: no file header, no padding. The first
// batch has base offset NNNN, each next batch's base offset is the previous
// one's plus its message count. A new segment starts when the current one
// holds at least Options.Entries messages or Options.SegmentBytes bytes
// (a batch is never split, so a segment can exceed Entries by up to one
// batch). Segment files are never rewritten once written, only cut (a torn
// tail, at open) or deleted whole (truncation, retention). The files of the
// next segment are created ahead of time in the background as "next.tmp" on
// every volume and renamed into place when the segment starts, with
// renameat2(RENAME_NOREPLACE): creating a file costs far more than renaming
// one (docs/benchmarks.md). While the topic is busy they stay open, so a
// start is one rename per volume; once it has gone 200 ms without starting
// a segment they are closed (and stay on disk), so an idle topic holds one
// descriptor per volume, its active segment's. A creation that failed in
// the background is tried again when the segment starts. A leftover
// next.tmp, like any *.tmp, is removed at open.
//
// # Open files
//
// Options.MaxOpenFiles (default half the descriptor limit less 64) bounds
// the descriptors held for segment files: the read cache's handles and the
// topics' write handles (active segments, prepared next ones) together.
// Open holds one segment's files at a time and leaves every topic's files
// closed, so any number of topics opens within the budget; a topic's first
// append opens its active segment. When a topic needs write handles over
// the budget, idle read handles are closed first, then the files of the
// least recently written topics are parked: closed (fsynced first under
// FsyncInterval) and reopened by their next append; a topic committing, or
// with a group being fsynced, is never parked. While write handles hold half the budget, full segments are
// sealed at once and next segments' files are not created ahead, so no
// handle waits on background work. An append that still finds no room
// waits up to 20 ms for background work to close handles, then fails with
// ErrTooManyFiles. Handles in use by a read are never closed, so reads can
// take the store over the budget while they last, and never fail for it.
//
// # Segment index (NNNN.idx)
//
// One 8-byte entry per batch of the log, in order, nothing else:
//
//	offset size field
//	0      4    uint32 little-endian: batch base offset - NNNN
//	4      4    uint32 little-endian: batch position in NNNN.log
//
// The index is derived data, written without fsync to NNNN.idx.tmp and
// renamed into place, so a failed write (a full disk) leaves the old file
// or none, never a short one; a failure is logged and fails neither a
// Close nor an Open, which serve from the log and write the index on a
// later open. A sealed
// segment's index is written once its topic has gone 200 ms without
// starting a segment, so a burst of appends that rolls segments every few
// hundred microseconds does not also create an index file per segment
// while it lasts; the active segment's, and any still queued, at Close. At
// open every index is checked against its log: a missing one is written
// (after a crash that is expected, and not counted as a repair), one that
// differs is rebuilt and counted. While
// a store is open the index lives in memory (24 bytes per batch: offset,
// position, size, count) and offset lookups binary-search it, never the log.
//
// # Meta file (meta)
//
//	offset size field
//	0      4    "HRQM"
//	4      8    int64 little-endian: start offset, the oldest readable offset
//	12     4    uint32 little-endian: CRC32C (Castagnoli) of bytes [0, 12)
//
// Written durably on every volume when a truncation moves the start inside
// a segment that is kept, when a cut (TruncateAfter) leaves the topic
// without segments, and when the first Replicate or Import goes into a
// topic without segments. Without it, the start is the first segment's
// base.
//
// The cut marker (truncating) has the same layout with "HRQT" for magic
// and the topic's new next offset in place of the start; see Replication.
//
// # Epochs file (epochs)
//
// The leader epochs of a replicated topic (KIP-101, KIP-279), each with
// the offset it began at:
//
//	offset  size field
//	0       4    "HRQE"
//	4       4    uint32 little-endian: format version, 1
//	8       4    uint32 little-endian: entry count n, 0-65536
//	12      16n  entries, each:
//	               8  int64 little-endian: leader epoch, >= 0
//	               8  int64 little-endian: start offset, >= 0
//	12+16n  4    uint32 little-endian: CRC32C (Castagnoli) of bytes [0, 12+16n)
//
// Epochs and starts both strictly ascend; a file that breaks that, or
// whose magic, version, count, length or CRC is wrong, is damaged (one
// cut short is told apart as torn in the log). SetEpoch(epoch, start)
// appends an entry: a start below the last entry's and an epoch below
// the last one fail with ErrInvalidEpoch; the last epoch again is a
// no-op; a new epoch starting where the last one started replaces it,
// that epoch holding no offsets. Past 65536 entries the oldest is
// forgotten. The whole file is written durably on every volume in volume
// order (a temporary file, fsync, rename, fsync of the directory), so a
// torn write leaves the old file, and the list changes in memory once
// every volume has it. EpochEnd(e)
// answers KIP-279's OffsetForLeaderEpoch: the largest epoch recorded at
// or below e and its end, the next entry's start or, for the last entry,
// the topic's next offset; with none, -1 and the topic's oldest offset.
//
// At open a missing file on every volume is an empty list. Otherwise the
// reference copy is the one of the last volume, in reverse volume order,
// whose file is valid: a write reaches the last volume last, so it never
// holds an epoch the others lack. Every volume whose copy is missing,
// damaged or different gets the reference, written durably, and the
// repair is logged and counted in Stats.Repairs. When no volume holds a
// valid copy, the topic opens without epochs, logged as an error and
// counted in Stats.UnreadableRanges: never guessed, and never a reason to
// fail Open (a repair that cannot be written is logged, and the next
// SetEpoch rewrites every copy).
//
// # Groups file (groups)
//
// The committed offsets of the topic's consumer groups, as a log of
// records that a commit or a group deletion appends to:
//
//	offset size field
//	0      4    "HRQL"
//	4      4    uint32 little-endian: format version, 1
//	8      -    records, each:
//	              4  uint32 little-endian: payload length n, 3-521
//	              n  payload: kind (1 byte), then
//	                   1  name length, 1-255
//	                   -  group name, the topic name rules
//	                 kind 1, a commit, then also:
//	                   8  int64 little-endian: committed offset, >= 0
//	                   1  owner length, 0-255
//	                   -  owner: the hash of the token that created the group ("" without auth)
//	                 kind 2, a deletion: nothing more
//	              4  uint32 little-endian: CRC32C (Castagnoli) of the length and the payload
//
// Replaying the records in order gives the table: a commit sets its
// group's offset (the first one creates it, at most MaxGroupsPerTopic),
// a deletion forgets it. A commit (CommitOffset) or a deletion appends one
// record (at most 529 bytes) to the file on every volume in volume order,
// at the same position, and returns once the last has it; with
// FsyncAlways each volume's file is fsynced before the commit is
// acknowledged; with FsyncInterval the file and the directory are fsynced
// by the next interval's sync; with FsyncNever the kernel decides (and
// Close's syncfs). A write is in the page cache when it returns, so kill
// -9 loses no acknowledged commit; a power loss or crash that tears a
// record leaves a record whose CRC fails, which was never acknowledged.
//
// Once the file would grow past twice its live size (one commit record
// per group) plus 64 KiB, it is compacted: written whole, one commit
// record per group by name (so equal tables give equal bytes on every
// volume), as a temporary file (groups.tmp) renamed over the old one,
// with FsyncAlways fsynced before the rename and the directory after it.
// So is the first write of a topic, the first write after a failed one
// (some volumes may hold part of its record), and the first write after
// an open that found the format before the log (below). A commit writes
// its record, under 2 records a volume on average with compactions,
// whatever the number of groups: with 1024 groups of 255-byte names and 3 volumes, 1.4 KB a
// commit (the whole table, 795 KiB, before the log). The file is at most
// 1.1 MiB.
//
// The format before the log, still read (its groups have no owner): "HRQG", a uint32 count, count
// entries by ascending name (uint16 name length, name, int64 offset), and
// one CRC32C of everything before it. Its first write after an open
// rewrites it as a log.
//
// Every group holds one of MaxGroups (65536) over all topics and, when it
// was created by a token, one of that token's Options.MaxGroupsPerToken
// (-max-groups-per-token, default 1024); a new group past MaxGroupsPerTopic,
// MaxGroups or its token's quota is refused with ErrTooManyGroups naming
// the limit. The owner is kept in the commit record, so a restart does not
// reset a token's quota. A group that holds only a lease, never
// committed, is forgotten once its lease expires and frees its slots: at
// once when its topic is listed, and over all topics by a sweep that a
// group refused for a full MaxGroups or quota runs before it is refused
// (one walk of every group; at most one per 10 ms, and only once some
// such lease may have expired). Group names never become paths.
//
// At open, as for a batch, the reference copy is the one of the last
// volume, in reverse volume order, whose file is wholly valid (header,
// every record's length, CRC, name and offset): a change reaches the last
// volume last, so that volume never holds a commit the others lack. Every
// volume whose copy is missing, damaged or different gets the reference,
// written durably, and the repair is logged and counted. When no copy is
// wholly valid (a record torn on every volume), the last one whose header
// is valid is replayed up to its first bad record, compacted and written
// to every volume. When no volume holds a file with a valid header, the
// topic opens without groups: logged as an error and counted as
// unreadable, never guessed.
//
// A committed offset is not moved by a truncation: a group whose offset
// the oldest offset passed reads from the oldest (GroupOffset.Start).
// Deleting a topic deletes its groups with its directories; a topic
// created again under the name starts without any.
//
// Leases (Lease, ReleaseLease) live in memory only: at most one member
// holds one on a (group, topic) at a time, until it releases it or its
// duration (default 10 s, 100 ms to 5 min) passes without a renewal. A
// commit or deletion while another member holds a live lease fails with
// ErrGroupBusy. A restart frees every lease; the committed offsets stay.
//
// # Logs
//
// A Store holds what is store-wide: the volumes, their locks and free
// space, the topics (create, delete, list), the descriptor and decode
// budgets, statistics and the fsync policy. Everything done to one
// topic's log is done through a Log, the handle Store.Log returns after
// one lookup of the name: appends (one Append, AppendMany and AppendAsync,
// each under AppendOptions), reads (Read, Peek, ReadReplica), offsets
// (Info, OffsetAt, FirstUnreadable), watches, idempotent producers'
// owners, consumer groups, truncation (Truncate, TruncateTime,
// TruncateAfter), replication and imports (Replicate, Import, epochs)
// and ReadOnly. A topic has one log today; the handle's methods name no
// topic, so that a topic of several partitions can hand out a Log per
// partition. A handle held across the deletion of its topic fails with
// ErrTopicNotFound, as a lookup would, and never writes into the topic
// created since under the same name; once the store closes it fails with
// ErrClosed.
//
// # Appends and durability
//
// Append validates the batch (header, CRC, and the message count: for a
// compressed body after decoding it, into at most MaxBatchBytes), then
// queues it. A compressed batch that declares more decoded bytes than
// MaxBatchBytes or MaxDecodeBytes is refused before anything is decoded.
// The validations of all appends in flight decode at most DecodeWorkers
// batches at once (default GOMAXPROCS less one, at least 1) into at most
// MaxDecodeBytes together (default MaxBatchBytes): a compressed append
// waits, in its tenant's queue (AppendOptions.Tenant; the queues are
// served fairly by declared decoded bytes, and each holds at most
// MaxDecodeQueued, else ErrDecodeQueueFull), until a worker is free and the decoded
// size its batch declares fits (Stats.DecodeWaits counts those that
// waited), so the CPU and memory many producers' compressed batches take
// to check do not grow with their number. Such an append may wait: a
// caller serving many clients on an event loop hands compressed batches
// to a goroutine (the broker does). One appender at a time leads: it commits
// everything queued (one pwritev(2) per volume in volume order), makes the
// batches visible to readers, wakes the appenders whose batches it
// committed and hands the lead to the first appender queued meanwhile, so
// nobody waits for a commit that does not hold its batch. With FsyncAlways
// the commit is pipelined: the leader hands the lead on as soon as its
// group is written, then fsyncs it (one fsync per volume, the volumes in
// parallel) while the next leader writes the next group. Groups become
// visible and are acknowledged in the order written, each once an fsync
// that began after its write has ended (one fsync covers every group
// written before it began; fsyncs run one at a time). Appenders are
// gathered so that one fsync serves about as many as the last one did:
// those just acknowledged are on their way back, and one fsync for all of
// them costs what one for half does. The leader waits for them before
// writing, up to half the last commit's duration, counting those written
// since the last fsync began; the fsync of a group written while another
// was being fsynced waits too, up to half the last fsync's duration (both
// waits at most 20 ms, so that a stalled disk is not waited on again).
// Readers never see a batch before it is fsynced; a segment that fills
// while groups are in flight is sealed once they are settled and its part
// of the group being written is fsynced and published. A failed fsync fails its group and every group
// written behind it, and so does a failed fsync after a cut back (below).
// An AppendCallback must not delete, truncate, import or replicate into,
// set an epoch of or close its topic: with FsyncAlways those wait for the
// commit telling it.
// AppendAsync queues a batch without waiting for its commit (a compressed
// batch may still wait for a decode worker to be checked): a goroutine leads its commit
// and an AppendCallback hears the outcome, so one caller (a connection
// pipelining produces) can have many batches in one commit. Appends to
// different topics run in parallel. A batch is acknowledged only once
// every volume has it, so killing the process never loses an acknowledged
// append: it is in the page cache. With FsyncAlways it is on disk too (and
// a new segment's directory entry is fsynced before anything in it is
// acknowledged); with FsyncInterval every written topic's active segment,
// and its directory after a new segment, is fsynced each interval (appends
// go on meanwhile) and a segment is fsynced when sealed; with FsyncNever the
// kernel decides. Close fsyncs the active segments and then calls syncfs(2)
// on every volume, so after a clean stop everything is on disk.
//
// Free space is measured every second (and at once after a write fails for
// space): while any volume has less than Options.MinFreeBytes (default 2%
// of it, at most 64 MiB), appends are refused with ErrNoSpace before
// anything is written, and the topics stay writable, so appends resume by
// themselves once space is freed. VolumeFree reports what was measured.
//
// A write that fails for space (ENOSPC, EDQUOT) is cut back on every
// volume to the end of the last batch written before it, acknowledged or
// in flight (ftruncate, and fsync under FsyncAlways) and fails with
// ErrNoSpace; the topic stays writable. A
// segment that cannot be created or reopened for want of descriptors, the
// budget, space or memory fails the append with ErrTooManyFiles or
// ErrNoSpace and nothing is written; the next append tries again. Any other
// failed write or fsync, and a cut back that fails, is sticky: the topic
// turns read-only, every later append fails with ErrReadOnly wrapping the
// cause (Log.ReadOnly returns it), reads go on. Nothing is acknowledged
// that was not written. A restart reopens the topic through recovery.
//
// # Idempotent producers
//
// A batch with protocol.FlagProducer names its producer (a random non-zero
// 64-bit id) and its sequence on this topic. Per topic, the committer keeps
// a table: for each producer, the 64 highest sequences it stored (each with
// its base offset and message count), the append time of its last batch,
// and its owner. Before a batch is written the table is consulted, under
// the same lock that orders the commit:
//
//   - its producer is bound to another owner: it fails with
//     ErrProducerFenced and nothing is written (below);
//   - its sequence is remembered: a duplicate, answered with the base
//     offset the batch got the first time, and not written (the same count
//     is required, else ErrOutOfOrderSequence);
//   - all 64 slots are taken and its sequence is below them, or it is more
//     than MaxSequenceStep (2^32) above the highest stored: it fails with
//     ErrOutOfOrderSequence and nothing is written;
//   - its producer is not remembered but left a tombstone (below) and its
//     sequence is not 0: it fails with ErrUnknownProducer, since it may be
//     the retry of a batch stored before, and nothing is written;
//   - it asks for strict order (AppendOptions.StrictSequence) and its
//     producer is remembered, but its sequence is not the highest stored
//     plus one: it fails with ErrOutOfOrderSequence, whose message names
//     the sequence expected, and nothing is written;
//   - anything else is new: written, and remembered once the write is
//     done (a write that fails forgets what it recorded).
//
// Sequences may arrive out of order (a client's goroutines race to send),
// and may skip (a batch refused before it was stored). A duplicate within
// one commit of its original gets the original's outcome. Strict order is
// for a producer that keeps several batches in flight and must see them
// stored in sequence order (client.Producer): when an earlier batch is
// refused (its server no longer leads the topic) and a later one reaches
// the new leader first, the later one is refused too, and both are sent
// again in order. It is asked per batch, not per producer, so one
// producer id may mix the two rules. A follower records the producers of
// the batches it replicates as an append does, so once it leads it knows
// each producer's highest sequence and the rule holds there too.
//
// Owners. AppendOptions.Owner names who sends a batch (the broker passes
// the hash of the connection's token): a new producer is bound to the
// owner of its first batch, and another owner's batch under its id is
// refused (ErrProducerFenced), so a client that reads a producer id from
// the batches it consumes cannot send under it. Owner "" (a server
// without tokens) is trusted with every producer and binds none; a
// producer bound to none (stored without an owner) is bound to the first
// owner that sends under it. A binding lasts as long as its producer is
// remembered (or has a tombstone).
//
// Bounds. A producer is forgotten Options.ProducerIdle (default 1h) after
// its last batch; a topic remembers at most Options.MaxProducers (default
// 1000), and one owner at most a quarter of them (ownerQuota: 250 by
// default; owner "" has no quota). A new producer past its owner's quota
// makes the owner's own producer idle longest be forgotten; one arriving
// when the table is full makes every idle producer be forgotten, then
// while still full the producer idle longest of the owner holding the
// most. So one owner can push out only its own producers. A producer
// forgotten to make room (not for being idle) leaves a tombstone with its
// owner, at most MaxProducers of them (the oldest go first): its batches
// other than a sequence 0 fail with ErrUnknownProducer rather than being
// maybe stored twice, and a sequence 0 starts the producer afresh. At
// most 64 x 24 bytes per producer, so a topic's table stays under 2 MiB
// with the default MaxProducers.
//
// The table is not stored: it is derived from the log. Recovery reads
// every batch of every segment anyway, and records each producer batch it
// keeps, in log order, then forgets the producers idle past ProducerIdle
// by the clock. So after a restart or a kill -9 a batch sent again is still
// answered with its first offset, as long as its original is still in a
// segment (truncation and retention remove what they remove: a duplicate
// of a batch whose segment is gone may still be answered from the table
// while the store is open, never after a restart). Tombstones are not
// kept across a restart: a producer pushed out is rebuilt from the log.
//
// The bindings are not in the batches, so each topic keeps them in its
// producers file, the same on every volume: one record per binding (the
// id, the owner, a CRC-32C), appended on every volume, and fsynced with
// FsyncAlways, before the first batch of the producer it binds is
// written. Recovery reads the records up to the first torn one on every
// volume, takes the volume holding the most, binds the producers rebuilt
// from the log and writes the file back compacted; at run time it is
// rewritten compacted when it holds more than twice the records the table
// and its tombstones need, plus 64. Without FsyncAlways a power loss may
// lose the file's tail, and a producer whose binding was lost is bound to
// none (kill -9 loses nothing: the page cache keeps both).
//
// # Imports
//
// Import appends batches another store kept, keeping the base offset and
// append time stamped in each (the CRC does not cover them): it is how a
// topic moves between servers with its offsets and its OffsetAt answers.
// The first import into a topic without segments (created and never
// appended to) may start at any offset N >= 0: N is written durably to
// the meta file of every volume as the start offset, and so is the
// importing marker, before anything else; the first segment is named by
// the first batch's base offset, which may be below N when the original
// was truncated inside a batch. Later imports must go on at the topic's
// next offset (ErrOffsetMismatch). Offsets are bounded by MaxOffset
// (2^62): an import at an offset past it, or of a batch whose messages
// pass it, fails with ErrInvalidImport, and an append whose messages would
// pass it fails with ErrOffsetLimit, writing nothing, so that no offset
// computed from another overflows. The batches of an import follow each
// other, with append times that never go back, from no earlier than the
// topic's newest (ErrInvalidImport), so OffsetAt's binary search stays
// valid. They are validated as appends are and committed like one group
// commit, under the same lock, so appends that arrive meanwhile wait.
//
// A topic with segments and no marker is not imported into
// (ErrImportRefused). The first ordinary append to a topic being imported
// removes the marker from every volume (and fsyncs the directories)
// before it is written: from then on the topic is an ordinary one and
// refuses imports. At open, a marker on any volume makes the topic one
// being imported, so an import cut short by a restart goes on. Appends
// stamp the destination's clock: if it is behind the source's, the first
// appends after a move may be stamped before the last imported batch.
//
// # Replication
//
// A follower copies its leader's log with Replicate: the leader's batches
// as it stored them, base offsets and append times kept, so every byte of
// the follower's segments is the leader's (where segments begin follows
// the follower's own Entries, SegmentBytes and cuts). Each batch is
// validated as an append is, the batches must follow each other, and the
// first must be at the topic's next offset (ErrOffsetMismatch); into a
// topic without segments it may start anywhere in [0, MaxOffset], and
// its base becomes the topic's start (the meta file is written first).
// Append times are kept even where they go back: the copy may not refuse
// what its leader stored. Replicate needs no marker and goes into any
// topic, appended to or not; it is committed like Import, under the same
// lock as appends, and records idempotent producers' batches in the
// producers' table as appends do (bound to no owner: bindings are not in
// the batches), so a follower that becomes leader answers a retried
// batch with its first offset. What Replicate appends is counted in
// TopicStats.ReplicatedMessages and ReplicatedBytes, not as produced.
//
// TruncateAfter cuts the tail: the topic's next offset becomes the base
// of the batch holding the offset given (the offset itself at a batch
// boundary; the end of the last readable batch before it when it is
// unreadable on every volume); every batch from there on goes from every
// volume; an offset below the start, or in the batch holding the start,
// leaves the topic without segments at its start offset. An offset at or
// past the next offset cuts no batch, but the leader epochs recorded
// from it on are forgotten (one begun by a leader that took nothing
// would otherwise count the next batches copied under a lower epoch as
// its own). In order, under the lock that orders commits, after the
// commits in flight have settled:
//
//  1. The cut marker (truncating) holding the new next offset N is
//     written durably on every volume; if that fails, the markers written
//     are removed and nothing else changed.
//  2. Leaving no segment, the meta file holding N is written durably.
//  3. Readers see the cut: the segment list, next offset, unreadable
//     ranges and the cut segment's in-memory index end at N.
//  4. The segments past N are deleted, newest first, on every volume
//     (their files closed first, the read cache's handles dropped); the
//     segment holding N loses its index file, its log is cut at the end
//     of its last batch before N and fsynced on every volume, and it is
//     sealed (its files closed, its index queued as a full segment's):
//     the next append starts a new segment at N, so no byte is ever
//     written where a read begun before the cut may still look. A
//     prepared next.tmp is left as it is: it is empty.
//  5. The directories are fsynced; the epochs starting at or after N are
//     dropped (the epochs file rewritten durably); the idempotent
//     producers' table is rebuilt from the batches kept (below).
//  6. The markers are removed, and the directories fsynced.
//
// The cut is durable before TruncateAfter returns, whatever the fsync
// policy. A failure after step 1 turns the topic read-only, the marker
// staying. Crash safety: once a marker is on any volume, Open finishes
// the cut: recovery first recovers the topic as it finds it, repairing
// the volumes from each other as usual (a segment deleted on some
// volumes only is copied back, a log cut on some only is refilled,
// offsets whose segments are gone everywhere become unreadable ranges,
// an index missing is written), then cuts it again to the smallest
// valid marker's offset, from step 2, and logs it. So after a kill -9
// or power loss at any point the topic opens either as it was before
// the cut (no marker yet) or as the cut leaves it: never with a hole
// below the new next offset or an index that disagrees with its log.
// Segments past N that a crash left on some volumes are copied back
// before being deleted again, and those copies are counted in Stats as
// repairs. A marker whose CRC fails on every volume is removed and the
// log kept as found (logged as an error).
//
// The producers' table is rebuilt as recovery builds it: every kept
// batch's header is read (from the last volume, the first 52 bytes of
// each batch) and its producer's sequence replayed in log order at its
// append time, then the producers idle past ProducerIdle are forgotten;
// owners stay bound and tombstones stay. So a batch that was cut, sent
// again by its producer, is stored anew rather than answered as a
// duplicate. It takes time in proportion to the batches kept.
//
// The producers file of a follower: Replicate records a producer new to
// the follower bound to none (the batches do not name owners).
// UnboundProducers lists those of a copy's batches, the leader answers
// their owners (ProducerOwners, protocol op 20), and BindProducers binds
// them, the producers file of every volume written first as an append
// writes it; a producer already bound, or not held, is left alone.
//
// What a cut leaves alone: committed group offsets past N stay (a group
// reading from there reads nothing until the topic grows past it again);
// watchers registered at or past N keep waiting; the producers file keeps
// its bindings. A read that found its spans before the cut holds the
// files it opened: a deleted segment's bytes stay readable through them,
// and a cut segment's bytes past the cut are gone, so its sendfile(2)
// sends fewer bytes than the span says and ReadResult.WriteTo and AppendTo
// fail with io.ErrUnexpectedEOF; the caller ends that response, never the
// server. Such a read never finds bytes written after the cut.
//
// The leader epochs (Epochs file) are the follower's side of KIP-101: a
// follower asks its leader EpochEnd of its last epoch and cuts what it
// holds past the answer with TruncateAfter.
//
// # Recovery and repair
//
// Open takes the union of topics and segments over all volumes; a missing
// volume, topic directory or segment file is recreated. Then, per segment,
// position by position from 0: the reference copy of the batch at that
// position is the one on the last volume, in reverse volume order, that holds
// a valid batch there (length within the file and the limit, header valid,
// CRC matches, uncompressed messages well formed, base offset the expected
// one). Every other volume whose bytes differ is overwritten with it. So an
// intact last volume is copied to the others, and when it is empty or
// damaged the next one back serves ("if /vol3 is empty, /vol2 is replicated
// to /vol1 and /vol3"), batch by batch, so a truncated or corrupted copy
// anywhere is refilled from a good one.
//
// When no volume has a valid batch at a position, recovery looks for the
// next valid batch (first where the damaged batch's length field points on
// any volume, then byte by byte): the offsets in between are marked
// unreadable, and reading them returns ErrUnreadable, never bad bytes. When
// nothing valid follows, the rest is a torn tail: in the last segment it is
// cut from every volume; in a sealed segment it is left in place and logged,
// and its offsets are unreadable. Every repair is logged with topic, volume
// and bytes, and counted in Stats.
//
// Recovery writes only what some volume lacks, but on a full disk even
// that may not fit. When copying a batch of the last segment fails for
// space (ENOSPC, EDQUOT) and the last volume does not hold that batch
// (it ends before the batch would), the batch is one a crash caught
// between the volumes' writes: volumes are written in order and a batch
// is acknowledged only once the last has it, so it was never
// acknowledged. Open then cuts every volume back to the longest prefix
// they all hold, dropping that batch and anything after it, logs it at
// error level ("unacknowledged tail dropped") and counts it in
// Stats.DroppedTails and DroppedTailBytes: starting makes the disk no
// fuller. A copy that fails for space while the last volume holds the
// batch is restoring an acknowledged batch another volume lost, and Open
// fails with the error, keeping every copy, until space is freed. (A last
// volume that lost its own acknowledged tail to damage while the disk is
// full looks like the crash and loses that tail; the log line names it.)
//
// Recovery reads every byte of every volume, so opening takes time in
// proportion to the data held. It rebuilds the idempotent producers' table
// from the batches it reads (see Idempotent producers).
//
// # Reads
//
// Read returns the spans of the last volume's segment files holding the
// whole batches that cover [offset, offset+limit), bounded by max bytes but
// at least one batch. File handles are cached (Options.Cache) within
// Options.MaxOpenFiles (see Open files); a handle in use by a read is
// released with ReadResult.Release and never closed under a reader. Only batches whose
// append has completed (and, with FsyncAlways, been fsynced) are visible.
// What Read returns is counted in TopicStats as consumed; ReadReplica, a
// leader's read for a follower's fetch, is counted as a replica read;
// Peek, the server's own look at a range, is counted nowhere.
//
// # Retention
//
// DeleteTopic renames the topic's directories to "~deleted.*" names at once
// (a topic of the same name can be created right after) and removes them in
// the background; recovery finishes a removal cut short by a crash.
//
// Truncate moves the start offset forward and deletes segments holding only
// older offsets; the newest segment always stays so the next offset
// survives. With RetentionAge or RetentionBytes, a sweeper does the same
// every RetentionCheck for segments past the age or beyond the size.
package storage
