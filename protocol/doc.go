// Package protocol holds haraqa's byte formats: the batch, which is the unit
// that producers send, storage keeps on disk and consumers receive, byte for
// byte the same everywhere, and the frames of the binary protocol that carry
// requests and responses between clients and the server. It is pure []byte
// in and out and imports nothing else of the module.
//
// # Conventions
//
// All integers are little-endian. Encoders append to a caller's buffer
// (AppendX(dst, ...) []byte). Decoders borrow from their input (ParseX(b)
// returns views into b, valid as long as b is) and check every length before
// using it: a bad length is an error, never a panic or an allocation.
//
// # Batch
//
// A batch holds one or more messages. Two versions exist, told apart by
// the magic byte; both are read everywhere, and an encoder writes version 1
// for a batch that uses nothing of version 2 (no producer, no headers), so
// such a batch is byte for byte what it always was. Version 1's 36-byte
// header:
//
//	offset size field        meaning
//	0      4    length       uint32, bytes after this field: 32 + len(body)
//	4      8    base offset  int64, offset of the first message (set by the server)
//	12     8    append time  int64, Unix nanoseconds (set by the server)
//	20     4    crc          uint32, CRC32C (Castagnoli) of bytes [24, 4+length)
//	24     1    magic        uint8, format version, 1
//	25     1    codec        uint8, 0 none, 1 s2, 2 zstd
//	26     2    flags        uint16, 0 in version 1
//	28     4    count        uint32, number of messages, 1 to 1,048,576 (MaxBatchMessages)
//	32     4    raw size     uint32, body size once decompressed
//	36     -    body         length-32 bytes
//
// Version 2 (magic 2) has a 52-byte header: the same first 36 bytes, and
//
//	offset size field        meaning
//	24     1    magic        uint8, 2
//	26     2    flags        uint16, bit 0 (FlagProducer): an idempotent
//	                         producer's batch; bit 1 (FlagHeaders): every
//	                         message has a header section; other bits 0
//	36     8    producer id  uint64, not 0 with bit 0, 0 without
//	44     8    sequence     uint64, the producer's number for this batch
//	                         on this topic; 0 without bit 0
//	52     -    body         length-48 bytes
//
// The CRC covers everything after itself (magic, codec, flags, count, raw
// size, in version 2 the producer id and sequence, and the body) but not
// the length, base offset or append time: the server stamps the last two
// into the batch as it stores it without recomputing the CRC, and the
// length is checked by the framing around it. A producer sends zeros in the
// stamped fields; the server overwrites them.
//
// The body of an uncompressed batch (codec 0) is count messages, each a
// uvarint length (encoding/binary's Uvarint: 7 bits per byte, low bits
// first, high bit set on all but the last byte) followed by that many bytes.
// The body must end exactly after the last message, and raw size equals the
// body length. With codec 1 the body is that same byte sequence compressed
// with S2 in block format; with codec 2, one zstd frame. Raw size lets a
// consumer bound its decompression buffer. The binary protocol's server
// never decompresses; the HTTP API does, to serve plain messages
// (Batch.DecodeBody; AppendBatchCodec builds compressed batches).
//
// With FlagHeaders, each message's bytes (after its length) start with a
// header section, then its value:
//
//	uvarint  count          0 to 64 (MaxHeaders)
//	count times:
//	  uvarint  key length   1 to 255 (MaxHeaderKeyLen)
//	  bytes    key
//	  uvarint  value length 0 to 65,536 (MaxHeaderValueLen)
//	  bytes    value
//	bytes    the message value, to the end of the message
//
// each uvarint in its shortest form. A message without headers in such a
// batch has the section 0x00. The message lengths frame the same bytes
// as without headers, so walking a body is the same either way.
//
// Message offsets in a batch are base offset, base offset + 1, ... base
// offset + count - 1; every message of a batch shares its append time.
//
// A batch is valid when its length is at least its header's size less 4
// and within the reader's limit, magic is 1 or 2, codec is known, flags
// are 0 (version 1) or known bits with the producer fields as they say
// (version 2), count is 1 to MaxBatchMessages, raw size is at least count
// (every message takes one length byte or more; two with headers), raw
// size equals the body length for codec 0, the CRC matches, and for codec
// 0 the body parses into exactly count messages, each with a well-formed
// header section under FlagHeaders. A server checks a compressed body the
// same way after decoding it.
//
// An idempotent producer picks a random non-zero producer id and numbers
// its batches to each topic 0, 1, 2, ...; a server that stored a batch
// answers a batch of the same producer id and sequence on that topic with
// the offset it gave the first, and stores nothing (see package storage
// for what it remembers, and for how long).
//
// # Frames
//
// A connection carries frames in both directions: the client sends
// requests, the server sends responses. Every frame starts with a 12-byte
// header; the request and response headers differ only in bytes 6-7.
//
//	offset size field     meaning
//	0      4    length    uint32, bytes after this field: 8 + len(payload)
//	4      1    version   uint8, protocol version, 1
//	5      1    op        uint8, operation (a response echoes the request's)
//	6      2    reserved  uint16, request: 0
//	6      2    code      uint16, response: status code, 0 = ok
//	8      4    corr id   uint32, chosen by the client, echoed in the response
//	12     -    payload   length-8 bytes, laid out per op and direction
//
// The length, version, op and correlation id keep their places in every
// protocol version, and so does the error payload below, so a server can
// always answer a request it cannot parse. A length below 8 is malformed. A
// length above the receiver's max frame size (default DefaultMaxFrameSize,
// 64 MiB) is refused from the length field alone, before the frame is
// buffered (PeekFrame). Every payload must end exactly where its last field
// does; bytes left over are malformed.
//
// Payload field types: int32, uint32, int64 as in the header (little-endian);
// a string is a uint16 byte count followed by that many bytes (no
// terminator). A topic name is 1-255 bytes of [A-Za-z0-9._:@-] and neither
// "." nor ".." (ValidTopic). Names are case-sensitive.
//
// # Versions, correlation, errors
//
// A client sends version 1. A server that does not speak a request's version
// answers with code 2 (unsupported version) and writes in the version byte
// of that response the highest version it speaks. A client may pipeline:
// send many requests without waiting, each with its own correlation id, and
// match each response to its request by that id. The server answers the
// requests of one connection in the order it received them.
//
// A response whose code is not 0 has this payload, whatever the op:
//
//	offset size field
//	0      2    msg length  uint16, at most MaxErrorMessageLen (1024)
//	2      -    message     UTF-8 text for people; match on the code
//
// When the server could not read a request's header it echoes op 0 and
// correlation id 0. After code 4 (malformed request) or 5 (frame too large)
// the server closes the connection, whose framing it cannot trust; after any
// other code the connection stays usable.
//
//	code name                 meaning
//	0    ok                   success, the payload is the op's response
//	1    unknown error        an internal or unexpected server error
//	2    unsupported version  the request's version is not spoken
//	3    unknown op           the op is not known in this version
//	4    malformed request    the frame or payload breaks this format
//	5    frame too large      the length field is over the server's limit
//	6    topic not found      no topic of that name
//	7    topic exists         create topic: the topic already exists
//	8    invalid topic        the topic name breaks the naming rules
//	9    offset out of range  consume/truncate offset outside the topic
//	10   invalid batch        a produced batch failed its checks or CRC
//	11   unreadable range     stored data is corrupt on every volume
//	12   topic read-only      a storage I/O error made the topic read-only
//	13   shutting down        the server is stopping; retry elsewhere/later
//	14   invalid argument     a well-formed field is out of range (bad regex)
//	15   limit reached        a server limit is reached; the message names it
//	                          (connections: sent with op 0 and correlation
//	                          id 0 before the server closes a connection it
//	                          will not serve)
//	16   no space             produce: a volume is under its free-space floor
//	                          (-min-free-bytes); nothing was written, retry
//	                          once space is freed
//	17   idle timeout         sent with op 0 and correlation id 0 before the
//	                          server closes a connection that held nothing
//	                          (or only part of a frame that stopped coming)
//	                          and received nothing for its idle timeout
//	                          (-idle-timeout): every request it had read was
//	                          answered before this frame, and nothing sent
//	                          after those answers was read, so a client may
//	                          send it again on a new connection, produces
//	                          included
//	20   group busy           a group op: another member holds the lease on
//	                          the (group, topic); the message says for how
//	                          long; retry after it
//	21   commit conflict      commit offset with the compare flag: the
//	                          committed offset is not the one expected
//	22   out of order         produce: an idempotent producer's batch (batch
//	     sequence             flag bit 0) whose sequence is below the 32 the
//	                          server remembers for that producer and topic,
//	                          so it cannot tell whether it was stored, or
//	                          more than 2^32 above the highest stored, or a
//	                          remembered sequence with another count, or,
//	                          with produce flag bit 3, not the highest
//	                          stored plus one; nothing was written
//	23   offset mismatch      produce with flag bit 1, or import: the
//	                          topic's next offset is not the expected one;
//	                          nothing was written
//	24   import refused       import: the topic holds messages produced
//	                          the ordinary way (it is neither empty nor
//	                          being imported); nothing was written
//	25   producer fenced      produce: with tokens (-auth-file), an
//	                          idempotent batch whose producer id is bound to
//	                          another token on that topic (the token whose
//	                          batch first used it); nothing was written
//	26   unknown producer     produce: an idempotent batch of a producer the
//	                          server forgot to make room for others, whose
//	                          sequence is not 0: it may be the retry of a
//	                          batch stored before, so it is refused rather
//	                          than maybe stored twice; nothing was written.
//	                          A batch never sent before may be sent again
//	                          under a new producer id
//	27   not leader           a write (produce, import, truncate, a group
//	                          change) to a replicated topic on a server that
//	                          does not lead it, or a read on one that is not
//	                          in its in-sync set; the message is exactly the
//	                          leader's binary address (host:port), or empty
//	                          when no leader is known (an election is under
//	                          way): ask again there, or after a moment
//	28   not enough           produce with acks=all: the topic's in-sync set
//	     replicas             is smaller than -min-insync (nothing was
//	                          written), or its replicas did not confirm the
//	                          batch within the server's -ack-timeout (it was
//	                          written on the leader and may be read later):
//	                          an idempotent producer sends it again
//	29   fenced epoch         replica fetch: the follower's leader epoch is
//	                          not the leader's (either side is stale)
//	30   outcome unknown      produce to a replicated topic: the batch was
//	                          written on the leader, but the lead changed
//	                          before the in-sync replicas confirmed it, so
//	                          the new leader may hold it or not; the message
//	                          is, as for 27, the new leader's address or
//	                          empty. Only an idempotent producer may send it
//	                          again (the new leader answers a batch it holds
//	                          with its first offset); any other resend may
//	                          store it twice
//
// # Operations
//
// Offsets below are within the payload, which starts at frame offset 12. An
// empty payload means the frame is only its header (length 8).
//
//	op 1, ping          request: empty           response: empty
//	op 2, create topic  request: topic string    response: empty
//	op 3, delete topic  request: topic string    response: empty
//	op 5, topic info    request: topic string    response: below
//	op 9, hello         request: below           response: below
//
// List topics (op 4) returns the names that start with prefix and, when
// regex is not empty, match it (RE2 syntax, unanchored, at most
// MaxRegexLen = 4096 bytes and MaxRegexInsts = 5000 instructions with its
// repetitions counted out), in ascending byte order:
//
//	request             response
//	0  2  prefix len    0  4  count    uint32, number of names
//	2  -  prefix        4  -  names    count strings, each a uint16 length and bytes
//	-  2  regex len
//	-  -  regex
//
// Topic info (op 5) response, 28 bytes:
//
//	0   8  oldest offset  int64, oldest message kept; = next offset when empty
//	8   8  next offset    int64, offset the next message will get
//	16  8  bytes          int64, bytes on disk (read volume)
//	24  4  segments       uint32, number of segment files
//
// Produce (op 6) appends one batch (the Batch section) to a topic. The batch
// is the rest of the frame, so a server can keep it as a sub-slice of the
// frame without copying; it must be exactly one whole batch. The server
// checks it (CRC included; code 10 if bad), stamps its base offset and
// append time, and stores it as it is.
//
//	request                                   response, 12 bytes
//	0  2  flags      uint16, bit 0: create    0  8  base offset  int64
//	                 the topic if missing;    8  4  count        uint32
//	                 bit 1: expect offset;
//	                 bit 2: acks=leader;
//	                 bit 3: strict sequence;
//	                 other bits 0
//	2  8  expect     int64, only with bit 1:
//	                 the topic's next offset
//	                 required, >= 0
//	-  2  topic len
//	-  n  topic
//	-  -  batch      the rest of the frame
//
// On a replicated topic (see Replication) the answer waits until every
// in-sync replica has the batch (acks=all), unless bit 2 asks for an
// answer once the leader has it (acks=leader). Elsewhere bit 2 changes
// nothing.
//
// With bit 1 the batch is appended only if the topic's next offset is
// expect when the server commits it; else code 23 (offset mismatch) and
// nothing is written. The check comes after the idempotent producers'
// (see Batch): a batch sent again after it was stored is answered with
// its offset, not a mismatch.
//
// With bit 3 an idempotent producer's batch is stored only if its
// sequence is the highest the server stored for that producer on the
// topic plus one; else code 22 (out of order sequence), whose message
// names the sequence expected, and nothing is written. A batch stored
// before is answered with its first offset as without the bit, and a
// producer the server does not remember takes any sequence. A client that
// pipelines several batches of one producer sets it on each of them, so
// that a later batch cannot be stored before an earlier one that a server
// refused (it no longer leads the topic) and that is sent again. Without
// producer fields in the batch the bit changes nothing.
//
// Consume (op 7) reads messages from offset on:
//
//	request
//	0   8  offset      int64, first message wanted; < 0 counts back from
//	                   the next offset (-1: the last message)
//	8   4  limit       int32, messages wanted; <= 0: no limit
//	12  4  max bytes   int32, bound on batch bytes; <= 0: server default
//	16  4  max wait    int32, milliseconds to wait at the end of the topic
//	20  2  topic len
//	22  n  topic
//
// A negative offset resolves to next offset + offset, raised to the oldest
// offset. An offset (once resolved) below the oldest or above the next
// offset is code 9. At the next offset with max wait > 0 the server holds
// the request until a message arrives or the wait ends, then answers with
// what it has (maybe nothing). The response:
//
//	0   8  start offset  int64, the offset asked for, resolved
//	8   8  next offset   int64, the topic's next offset
//	16  4  size          uint32, bytes of batches that follow: length-28
//	20  -  batches       zero or more whole batches, concatenated
//
// The batches are whole stored batches: the first is the one holding the
// start offset (it may begin before it) and the last may run past the
// limit, so the consumer skips messages outside [start, start+limit). The
// server sends at least one batch when there is one, even if it is larger
// than max bytes, so a consumer always makes progress. The response header
// is the fixed ConsumeResponseHeaderSize (32) bytes before the batches, so
// a server writes it (AppendConsumeResponseHeader) and then sends the batch
// bytes straight from a file.
//
// Truncate (op 8) drops old messages:
//
//	request                                    response, 8 bytes
//	0  8  before     int64                     0  8  oldest offset  int64,
//	8  1  by         uint8, 0: before is an          after truncating
//	                 offset, 1: a time in
//	                 Unix nanoseconds
//	9  2  topic len
//	11 n  topic
//
// Messages with an offset (or append time) below before are dropped. A
// server may keep some of them (it may remove whole segment files only);
// the response tells the new oldest offset. An offset bound above the next
// offset is code 9. On a replicated topic only its leader truncates (else
// code 27, not leader), on every replica, and the next offset is its
// high-water mark.
//
// Offset at (op 10) finds where to read from a time:
//
//	request                                    response, 8 bytes
//	0  8  time       int64, Unix nanoseconds   0  8  offset  int64
//	8  2  topic len
//	10 n  topic
//
// The offset is the first of the first batch appended at or after time
// (append times are the server's, one per batch): the oldest offset for a
// time at or before the oldest message, the next offset for one after the
// newest. It is never below the oldest offset. A consume from it returns
// what was appended since time.
//
// Import (op 16) appends batches that another server stored, keeping the
// base offset and append time stamped in each batch's header: it is how
// a topic moves between servers (hrqa topics move) with its offsets and
// its offset-at answers. It needs the admin right.
//
//	request                                    response, 16 bytes
//	0   2  flags     uint16, bit 0: create     0  8  oldest  int64, the topic's
//	                 the topic if missing;                   oldest offset after
//	                 other bits 0                            the import
//	2   8  offset    int64, >= 0, where the    8  8  next    int64, its next
//	                 import goes on from                     offset after it
//	10  4  size      uint32, bytes of batches
//	                 that follow: the rest
//	                 of the frame
//	14  2  topic len
//	16  n  topic
//	-   -  batches   zero or more whole
//	                 batches, concatenated,
//	                 as stored (stamped)
//
// The first batch holds offset (its base at or below it, its end above
// it); each next one starts where the one before ends, with an append
// time no earlier (else code 14). A topic that holds nothing yet (created
// and never written: no segment) takes any offset: it becomes its oldest
// offset, so the copy of a truncated topic starts where the original
// does, and an import without batches only sets the oldest and next
// offsets (the copy of a topic truncated to its end). The topic is then
// being imported, across restarts, and takes further imports whose
// offset is its next offset (else code 23) and whose first append time
// is no earlier than its newest batch's (else code 14). The first
// produce to a topic being imported ends the import: from then on, as
// for any topic that holds produced messages, an import is code 24
// (import refused). Each batch is checked as a produced one is (code 10),
// and nothing is written when any check fails. Committed offsets of
// consumer groups are not part of an import: a mover copies them with
// list groups and commit offset.
//
// # Replication
//
// A server of a cluster (-cluster, docs/replication.md) holds replicated
// topics: one leader takes the writes, followers copy its log batch for
// batch. Followers read the leader with replica fetch (op 17) and, after a
// leader change, ask where the leader's log of their last leader epoch
// ends with epoch end (op 18), and for the owners of the idempotent
// producers their copy holds bound to none with producer owners (op 20);
// the three need the replication right, as do replica wait (op 24), with
// which a follower waits on all the topics it follows from one leader
// over one connection, log ends (op 23), which the cluster's controller
// asks before it elects a topic's leader, and cluster member (op 21).
// With -auth-file that is a token of the rules holding it on every
// topic; without, the members' secret (-cluster-token-file), presented
// as the hello's token: no other caller holds it (code 19, forbidden).
// Cluster status (op 19, any valid
// token) tells who leads what.
//
// Replica fetch (op 17) is a consume that names its follower and epoch:
//
//	request                                    response
//	0   8  offset     int64, >= 0: the         0   8  start offset  int64, the offset asked
//	                  follower's next offset   8   8  next offset   int64, the leader's
//	8   4  max bytes  int32, <= 0: default     16  8  high water    int64, offsets below are
//	12  4  max wait   int32, milliseconds                           on every in-sync replica
//	16  8  epoch      int64, >= 1: the         24  8  epoch         int64, the leader's epoch
//	                  epoch it follows under   32  8  batch epoch   int64, the epoch the batches
//	24  2  topic len                                                were written under; 0: none
//	26  n  topic                               40  4  size          uint32, bytes of batches
//	-   2  follower len                        44  -  batches       whole stored batches
//	-   n  follower   its member ID
//
// The offset tells the leader that the follower holds everything before
// it. The batches are those a consume from offset would return, never
// past the start of the next leader epoch, so that all were written
// under batch epoch. At the leader's next offset with max wait > 0 the
// leader holds the request until a batch comes or the wait ends. An
// epoch other than the leader's is code 29; a server that does not lead
// the topic answers code 27. A request that arrives on the connection
// behind a parked replica fetch ends its wait: it is answered at once,
// with no batch (a follower's ping, when it has another topic to add).
//
// Epoch end (op 18), KIP-279's offset for leader epoch:
//
//	request                                    response, 16 bytes
//	0  8  epoch      int64, the follower's     0  8  epoch  int64, the largest epoch at
//	                 last leader epoch                      most the one asked that the
//	8  2  topic len                                         leader holds; -1: none
//	10 n  topic                                8  8  end    int64, where its log of that
//	                                                        epoch ends (the next epoch's
//	                                                        start, or its next offset)
//
// Cluster status (op 19) has an empty request; its response is JSON: the
// server's view of the members, the Raft leader, and each replicated
// topic's replicas, leader, epoch and in-sync set (docs/replication.md).
//
// Producer owners (op 20): which owners (token hashes) the leader binds
// producer ids to. A follower asks it after storing batches of producers
// new to it, before its next fetch, so that an in-sync replica knows who
// owns every producer whose batches it holds (a failover then fences
// another token's batches under those ids, code 25, as the old leader
// did):
//
//	request                                    response
//	0  2  topic len                            0  4  count    uint32, <= 1024
//	2  n  topic                                then count times:
//	-  4  count      uint32, <= 1024              8  id      uint64
//	                 (MaxOwnerQuery)               2  len     owner length, <= 255
//	-  8  ids        count uint64s                 n  owner
//
// A producer the leader binds to none is left out of the answer; more
// than 1024 ids is code 14 (invalid argument). A server that does not
// lead the topic answers code 27.
//
// Cluster member (op 21) adds a server to the cluster (action 1, the entry
// its -peers form host:port/http/cluster) or removes a member (action 2,
// the entry its binary address), with the replication right:
//
//	request                                    response: empty
//	0  1  action     uint8, 1 or 2
//	1  2  entry len  1 to 1024 (MaxMemberEntry)
//	3  n  entry
//
// Topic replicas (op 22) creates a topic on n replicas of a cluster, or
// changes an existing topic's replication factor to n (its new replicas
// copy its log, then the members it leaves delete theirs), with the admin
// right; the answer comes once the change is recorded:
//
//	request                                    response: empty
//	0  1  n          uint8, 1 to 255 (0: code 14)
//	1  2  topic len
//	3  n  topic
//
// n below -min-insync, above the members, or for a topic still moving is
// code 14; without a cluster only n = 1 is taken (a create that leaves an
// existing topic as it is).
//
// Log ends (op 23): where the server's logs of topics end. The cluster's
// controller asks it of the live in-sync replicas of topics whose leader
// died, and elects the one whose log ends furthest (by last epoch, then
// next offset), so that an acks=leader tail only one follower copied is
// kept. Any replica answers, from its own log, with the replication right
// on every topic named:
//
//	request                                    response
//	0  4  count      uint32, 1 to 1024         0  4  count   uint32, as asked
//	                 (MaxLogEndsQuery)         then count times, in the order asked:
//	then count times:                             8  epoch  int64, the last leader epoch
//	   2  topic len                                         the log holds batches of
//	   n  topic                                             (0: none recorded)
//	                                              8  next   int64, the next offset
//
// A topic the server does not hold is answered epoch -1, next -1. More
// than 1024 topics, or none, is code 14 (invalid argument).
//
// Replica wait (op 24): a follower's wait on every topic it follows from
// one leader, on the one connection it fetches them all on (Kafka's
// follower fetch covers many partitions the same way). The leader holds
// it until any topic listed is ready, or max wait ends, and answers which
// are; the follower then fetches those that hold batches for it with
// replica fetch, max wait 0, on the same connection. It needs the
// replication right on every topic listed:
//
//	request                                    response
//	0  4  max wait   int32, ms, >= 0           0  4  count   uint32, ready topics
//	4  2  follower len                         then count times, by ascending index:
//	6  n  follower   its member ID, not empty     4  index  uint32, the topic's place
//	-  4  count      uint32, 1 to 4096                      in the request (from 0)
//	                 (MaxReplicaWaitTopics)       1  flags  uint8, bit 0: fetch it
//	then count times:                                       (ReplicaWaitFetch)
//	   8  epoch      int64, >= 1                  8  high   int64, the leader's high-water
//	   8  offset     int64, >= 0: the                water  mark; -1 (with fetch): a
//	                 follower's next offset                 fetch would fail
//	   8  high water int64, >= 0: the leader's
//	                 mark as the follower knows it
//	   1  flags      uint8, bit 0: leave
//	                 (ReplicaWaitLeave); other bits 0
//	   2  topic len
//	   n  topic
//
// Each topic listed counts as a replica fetch of it at offset: the leader
// records that the follower holds everything before offset (in-sync set
// and high-water mark), and the connection as one the follower fetches
// the topic on, so that its closing drops the follower from the topic's
// in-sync set at once. A topic is ready when the leader's log holds
// offset (or starts past it) or a replica fetch of it would fail (not
// leader, another epoch: the fetch tells the follower why), both
// answered with the fetch flag, or when its high-water mark passed high
// water, which the follower then takes without a fetch. A topic with the
// leave flag is not waited on: the follower fetches it no more on this
// connection and leaves its in-sync set at once, as if the connection
// had closed. A request that arrives on the connection behind a parked
// replica wait ends the wait: the leader answers the wait at once, with
// the topics ready then (maybe none), then the request; a follower sends
// a ping so when it has topics to add or to leave. More than 4096
// topics, none, or a field out of its range is code 14.
//
// Golden bytes (TestReplicaWaitGolden), correlation id 42: follower "f1",
// max wait 500 ms, "orders" at epoch 3, offset 5, high water 4, and "t"
// left; then an answer to a wait on two topics: fetch the first (high
// water 9), and the second's mark moved to 7:
//
//	51000000 01 18 0000 2a000000 f4010000 0200 6631 02000000
//	  0300000000000000 0500000000000000 0400000000000000 00 0600 6f7264657273
//	  0100000000000000 0000000000000000 0000000000000000 01 0100 74
//	26000000 01 18 0000 2a000000 02000000
//	  00000000 01 0900000000000000 01000000 00 0700000000000000
//
// # Hello and tokens
//
// Hello (op 9) presents the client: the highest protocol version it
// speaks, its name (for the server's logs, at most MaxClientNameLen = 255
// bytes) and its token (at most MaxTokenLen = 1024 bytes; empty: none):
//
//	request                                  response, 2 bytes
//	0  1  version   uint8, highest spoken    0  1  version  uint8, the highest
//	1  2  name len                                          the server speaks
//	3  n  name                               1  1  auth     uint8, 1: the server
//	-  2  token len                                         checks tokens and
//	-  -  token                                             accepted this one;
//	                                                        0: it checks none
//
// A server without an auth file answers every hello with code 0 and auth
// 0, whatever the token. A server with one answers code 18
// (unauthenticated) when the token is empty or not in its rules, and code
// 15 (limit reached) instead when that token, not in its rules, failed too
// often from the client's host (a token bucket per host and token: a few
// failures a second), or is one of too many distinct failing tokens from
// it. A valid token is always accepted; an empty one counts as no
// failure. Until a hello succeeds on a connection, every request but ping
// and hello is answered with code 18; after it, a request its token does
// not allow is answered with code 19 (forbidden). Either way the connection stays
// usable: a failed hello can be followed by another. A connection keeps
// the rights of its last successful hello; a failed one drops them. Ping
// stays open, so load balancers and liveness checks need no token.
//
// The right each request needs on its topic:
//
//	produce       produce (creating the topic with the create flag too)
//	consume       consume, offset at; every group op (below), on the
//	              groups the token's group patterns allow (code 19 naming
//	              the group otherwise; list groups returns only those)
//	admin         create topic, delete topic, truncate, import
//	any right     topic info; list topics returns only the topics on
//	              which the token holds some right
//
// A client sends hello first on every new connection when it has a token,
// and may pipeline requests behind it: the server handles a connection's
// requests in order.
//
// A server keeps no token, only its TokenHash: the SHA-256 of the token's
// bytes, which an auth file holds in hex (hrqa token new prints it).
//
// # Consumer groups
//
// A group is a name (the topic rules: ValidGroup); per (group, topic) the
// server keeps a committed offset, the offset the group reads from next,
// as durably as the topic's messages, and at most one member at a time
// holds a lease on the pair. A member id is 1-255 bytes the client picks
// (MaxMemberLen), random per reader. Every group op needs the consume
// right on its topic and a group the token may use; a topic that does not exist is code 6; a bad group
// name or member id is code 14. A new group past the server's limits
// (1024 per topic, 65536 in all) is code 15, naming the limit.
//
//	op 11, commit offset  request: below      response: empty
//	op 12, fetch offset   request: below      response: group offset
//	op 13, group lease    request: below      response: group offset
//	op 14, list groups    request: topic string  response: below
//	op 15, delete group   request: below      response: empty
//
// Commit offset (op 11):
//
//	0   8  offset   int64, the offset the group reads next, 0 to the
//	                topic's next offset (else code 9; negative: code 14)
//	8   8  expect   int64, with the compare flag: the committed offset
//	                required, -1 (NoOffset) for a group without one
//	16  2  flags    uint16, bit 0: compare (CommitCompare); other bits 0
//	18  2  topic len
//	20  n  topic
//	-   2  group len
//	-   -  group
//	-   2  member len
//	-   -  member   the committing lease holder; empty: none
//
// With the compare flag the commit is applied only if the committed
// offset is expect, else code 21 (commit conflict) and nothing changes, so
// two members cannot silently overwrite each other. While a member other
// than the one named holds a live lease, the commit is code 20 (group
// busy), with or without a member. The response is sent once every volume
// holds the commit under the server's fsync policy.
//
// Fetch offset (op 12) and delete group (op 15) requests:
//
//	0  2  topic len
//	2  n  topic
//	-  2  group len
//	-  -  group
//
// Delete group forgets the group's offset on the topic; a group that does
// not exist is not an error; one whose lease a member holds is code 20.
// Resetting a group to an offset is a commit.
//
// Group lease (op 13) takes the lease on (group, topic) for member, renews
// it when member holds it, or releases it:
//
//	0  1  action   uint8, 0: take or renew; 1: release
//	1  4  ttl      uint32, ms; 0: DefaultLeaseMs (10000); at most MaxLeaseMs
//	               (300000; more: code 14); the server grants at least 100
//	5  2  topic len
//	7  n  topic
//	-  2  group len
//	-  -  group
//	-  2  member len, 1-255
//	-  -  member
//
// A take while another member holds a live lease is answered at once with
// code 20 (group busy), never held: the server parks no request for a
// lease, whose holder may renew it for hours, and the client chooses how
// long to wait and whether to give up. A lease that is not renewed within
// its ttl ends, and the next take, by any member, succeeds: it starts from
// the last commit. Leases are held in memory only; a restart frees them.
// A release by a member not holding the lease changes nothing.
//
// The group offset response of fetch offset and group lease, 28 bytes:
//
//	0   4  lease ms   uint32, lease: the lease now held (0 after a
//	                  release); fetch: ms left on anyone's lease, 0: none
//	4   8  committed  int64, the committed offset, -1: none
//	12  8  start      int64, where the group reads from: committed, raised
//	                  to the topic's oldest offset when a truncation went
//	                  past it; the oldest offset when there is no commit
//	20  8  next       int64, the topic's next offset
//
// List groups (op 14) request is a topic string; the response, groups by
// ascending name, those with a commit or a live lease:
//
//	0   8  oldest   int64, the topic's oldest offset
//	8   8  next     int64, the topic's next offset
//	16  4  count    uint32
//	20  -  groups   count entries: a group string, committed int64 (-1:
//	                none, a lease only), lease ms uint32 (0: none)
package protocol
