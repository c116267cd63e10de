// Package client is the Go client of haraqa.
//
//	c, err := client.Dial(ctx, "127.0.0.1:14353")
//	if err != nil { ... }
//	defer c.Close()
//
//	base, err := c.Produce(ctx, "events", []byte("a"), []byte("b")) // one batch, one round trip
//	msgs, err := c.Consume(ctx, "events", base, 2)                  // exactly offsets base, base+1
//	for m, err := range c.Messages(ctx, "events", -1) { ... }      // follow from the last message
//
//	r, err := c.NewReader("events", 0) // read fast: prefetches, reuses its buffers
//	defer r.Close()
//	msgs, err := r.Next(ctx)           // valid until the next Next
//
//	p := c.NewProducer("events")   // batches single messages: size, linger, in flight
//	f, err := p.Send(ctx, []byte("c"))
//	offset, err := f.Wait(ctx)
//	p.Close()
//
// # Consumer groups: at-least-once
//
// A group reads a topic from where it committed last, whoever reads it:
// per (group, topic) the server keeps a committed offset on every volume,
// and one member at a time holds a lease on the pair (10 s, renewed while
// the GroupReader is open). Another member waits for the lease (or, with
// WithoutLeaseWait, fails at once with ErrGroupBusy); when the holder
// closes, or crashes and its lease expires, the next member reads from the
// last commit. Delivery is therefore at-least-once: the messages a member
// processed after its last commit are read again by the next. Process,
// then commit:
//
//	g, err := c.NewGroupReader("billing", "orders", client.WithAutoCommit(time.Second))
//	defer g.Close() // commits what was processed, releases the lease
//	for {
//		msgs, err := g.Next(ctx) // the messages before these are processed
//		if err != nil { ... }
//		for _, m := range msgs {
//			charge(m.Value) // make it idempotent: it may run twice
//		}
//		if err := g.Commit(ctx); err != nil { ... } // or leave it to the interval
//	}
//
// A commit says "everything before this offset is processed". Committing
// before processing would make it at-most-once; a handler that has
// effects elsewhere should tolerate a message twice (dedupe by offset, or
// make the effect idempotent). Commits are conditional on the offset the
// reader last committed, so a member that lost its lease cannot move the
// group back. CommitOffset, CommitOffsetIf, FetchOffset, ListGroups and
// DeleteGroup manage groups directly (hrqa groups uses them); every group
// request needs the consume right on its topic and a group the token's
// group patterns allow (ErrForbidden otherwise).
//
// # TLS
//
// A server started with -tls-cert and -tls-key speaks TLS only, on both
// ports. WithTLS dials with a *tls.Config (the handshake within the dial
// timeout); TLSConfigFromFiles makes one from PEM files, as hrqa's -tls-ca,
// -tls-cert and -tls-key do:
//
//	tc, err := client.TLSConfigFromFiles("ca.pem", "", "", "", false)
//	c, err := client.Dial(ctx, "mq.example:14353", client.WithTLS(tc))
//
// A server that does not trust the certificate, or wants one that was not
// sent (-tls-client-ca), fails Dial with ErrConnection; so does a
// plaintext client on a TLS port, with the server's message saying so.
//
// A Client holds one TCP connection and pipelines the requests of every
// goroutine on it; it is safe for concurrent use. Requests sent together
// share one write. Produce calls to one topic from many goroutines combine
// under load, as a Kafka producer's records do: while four of the topic's
// produce requests are unanswered, the calls made meanwhile gather into
// one batch, sent when one of those is answered (a call over 64 KiB, a
// ProduceExpect and ProduceMessages with headers always go alone; with
// compression on, the combined batch is compressed whole). Each call's messages stay together at consecutive offsets
// from the one it returns; the combined batch is stored or refused as
// one. A call whose context ends while its messages wait returns at once
// with the context's error, and its messages are sent with the others. Messages loops and Readers each hold a connection of
// their own, so their long polls and large responses hold back no other
// request.
//
// # Reading fast
//
// Consume and ConsumeInto return messages that stay valid for good, so
// every response is read into new memory. A Reader trades that for speed:
// while the caller handles one response's messages, the request for the
// next is in flight, and responses are read into two buffers it reuses, so
// the messages Next returns are valid only until the following Next. Every consumed batch's
// CRC32C is checked, and batches compressed with S2 or zstd
// (WithCompression) are decompressed.
//
// # Errors
//
// A server's error arrives as an *Error (operation, protocol code, message)
// that matches the package's sentinels with errors.Is: ErrTopicNotFound,
// ErrTopicExists, ErrInvalidTopic, ErrOffsetOutOfRange, ErrFrameTooLarge,
// ErrBadBatch, ErrUnreadable, ErrReadOnly, ErrShuttingDown,
// ErrInvalidArgument, ErrLimitReached, ErrOutOfOrderSequence,
// ErrProducerFenced, ErrUnknownProducer, ErrNotLeader,
// ErrNotEnoughReplicas, ErrOutcomeUnknown; its Code is one of the package's
// Code constants (CodeTopicNotFound, ...), so ordinary use needs no import
// of the wire package, protocol (nor does compression: CompressionS2,
// CompressionZstd). ErrConnection wraps network failures, ErrClosed
// follows Close, ErrCorrupt marks a received batch that failed its CRC or
// decoding. A server over its connection limit answers a new connection
// with a limit-reached error before closing it: requests on it fail with
// ErrConnection wrapping that *Error, whose message names the limit.
//
// ErrResponseTooLarge fails a request whose response is larger than
// WithMaxResponseBytes allows (by default what the client may produce, so
// that it can always read back its own batches); the response is skipped
// and the connection stays usable. Its message gives both sizes. Consume
// requests ask for no more batch bytes than fit in that limit, so only a
// single batch too large for it (produced by a client with a larger
// WithMaxBatchBytes) draws the error. The same limit bounds what one
// consumed compressed batch may declare it decodes to: decoding allocates
// exactly that declared size (and a body that expands past it fails), so a
// batch declaring more than the limit fails its request with
// ErrResponseTooLarge, naming the size, the limit and the option, before
// anything is decoded.
//
// # Reconnects and retries
//
// When the connection breaks (a server restart, say) the next request dials
// again. A request that failed on a broken connection is sent again on a
// new one, up to WithRetries times with a doubling backoff, when repeating
// it is harmless: ping, create, delete, list, info, truncate, consume and,
// with idempotence (the default), produce. A Reader's requests are retried
// the same way, up to WithRetries times in a row, and a Producer's batches
// until the request timeout (see Idempotent produce). A retry whose
// backoff the context cuts short, or a connection error that comes as the
// context ends, fails with the connection's error wrapping the context's
// (errors.Is matches both); Close cuts it short with ErrClosed.
// A Messages loop that yielded an error waits the WithRetries backoff
// before its next request.
//
// # Idempotent produce
//
// A Client picks a random 64-bit producer id when it is dialed, and each
// Producer one of its own; every batch they send carries that id and a
// sequence number per topic (protocol batch version 2). A server that
// stored a batch answers the same id and sequence on the same topic with
// the offset it gave the first time and stores nothing. So:
//
//   - Produce and ProduceMessages that fail on a broken connection, before
//     or after the batch reached the server, are sent again (WithRetries)
//     and the message is stored once. Only when the retries or the request
//     timeout run out does the call fail with ErrConnection: then the
//     batch may or may not have been stored, and calling Produce again is
//     a new batch, with a new sequence, which a server stores again.
//   - A Producer's batches whose connection broke are sent again, in
//     order, until the request timeout: every message is stored once, and
//     offsets follow Send order.
//   - A Producer's batches ask the server for strict sequence order
//     (protocol produce flag bit 3): it stores a batch only as the next of
//     its producer, and refuses a later one that arrives first with
//     ErrOutOfOrderSequence. So when a replicated topic's leader refuses
//     a batch (ErrNotLeader) while a later one reaches the new leader, the
//     later one is refused there, and the Producer sends both again, in
//     sequence order, from the first one refused: after ErrNotLeader,
//     ErrShuttingDown, a broken connection, ErrOutcomeUnknown (written but
//     not committed before the lead changed), or ErrOutOfOrderSequence
//     while a batch before it is still to be stored. A batch that fails
//     for good leaves a gap in its producer's sequences, so the batches
//     after it go out under a fresh producer id. A Client's own Produce
//     calls race each other and may give up a sequence before sending it,
//     so they do not ask for strict order.
//
// What a retry can still duplicate: a batch produced again by the caller
// after an error (a new sequence); the same messages sent by another
// Client or Producer, or by a new process (a new producer id); a resend
// that reaches a server which forgot the producer, because it had been
// idle longer than the server's -producer-idle (1h), or its original
// batch was truncated away before a restart. A resend cannot fall below
// the 64 latest sequences the server keeps for the producer on a topic:
// goroutines producing to one topic on one Client take sequences at most
// 64 above the lowest still unanswered, and wait, if need be, for that one
// (a retry after a broken connection, say) to be answered first. With tokens, a producer id is bound on each topic to the
// token whose batch first used it: a batch under another token's id is
// refused with ErrProducerFenced. A server that forgot the producer to
// make room for others (not for being idle) refuses its batches other
// than its first with ErrUnknownProducer. On either, a Produce sent for
// the first time is sent again under a fresh producer id, and one that
// may have been stored before fails (the Client takes a fresh id for the
// next); a Producer's batch fails with them, and its later batches go out
// under a fresh producer id.
// HTTP produces are never idempotent. WithIdempotence(false)
// turns all of this off: batches are then version 1, and a produce that
// may have reached the server is never sent again: a Producer's batch
// answered with ErrOutcomeUnknown, or abandoned on a leader that did not
// answer within the attempt timeout, fails, and one refused as not leader
// (nothing stored) is sent again, but without sequences a later batch
// may then be stored before it.
//
// # Expected offset
//
// ProduceExpect(ctx, topic, next, msgs...) appends only if the topic's
// next offset is next when the server commits the batch, and else fails
// with ErrOffsetMismatch, storing nothing: of writers racing for the same
// offset exactly one wins (optimistic concurrency, as NATS's
// Expected-Last-Sequence). Read the end with TopicInfo, produce expecting
// it, and read again on a mismatch.
//
// # Message headers
//
// Message.Headers are key/value pairs carried with a message (trace
// context, content types), at most 64 per message, keys of 1 to 255
// bytes, values of at most 64 KiB. ProduceMessages and
// Producer.SendMessage send them; Consume, Messages and a Reader return
// them. A batch whose messages have no headers costs nothing for them.
//
// # Idle connections
//
// A server closes a connection that held nothing and received nothing for
// its -idle-timeout (10 minutes by default), sending first an idle timeout
// frame (ErrIdleTimeout, code 17) which says that every request it read
// was answered and nothing sent after those answers was read. So that a
// request does not race that close, the client drops a connection on which
// nothing was sent for WithIdleTimeout (9 minutes by default, under the
// server's) and none is waiting, and dials a new one for the next request;
// nothing runs meanwhile, the check is made when the next request is sent.
// If a server closes an idle connection anyway (its timeout set below the
// client's), every request that was waiting on it, a produce included, is
// sent again once on a new connection, whatever WithRetries says, since
// the frame proves the server never read it. Exactly these are resent: the
// requests waiting on a connection when its idle timeout frame arrives, and
// those queued on it after. A connection that closes without that frame
// leaves its produces' fate unknown: with idempotence they are sent again
// (see Idempotent produce), without it they fail with ErrConnection. A
// Producer batch in flight when the frame arrives is sent again in order
// with idempotence; without it, it fails with ErrIdleTimeout (wrapped in
// ErrConnection) rather than being resent behind later batches, which
// would break the Producer's offset order; it was not stored.
//
// # Several servers
//
// Dial takes a comma-separated list of addresses,
// client.Dial(ctx, "a:14353,b:14353,c:14353"), and returns the same
// *Client, which spreads topics over the servers; one address is one
// server, as always. A topic lives on exactly one server:
//
//   - An existing topic is found where it lives: the first request for a
//     topic the client has not seen asks every server for it (TopicInfo, in
//     parallel, each within WithLocateTimeout), and the answer is cached.
//   - A new topic (Produce with auto-create, CreateTopic, a Producer) goes
//     to the server that Place picks: rendezvous hashing of its name over
//     the addresses, so every client with the same list agrees, whatever
//     its order. Give every client the same spelling of each address.
//   - A server that says it does not have a topic found in the cache
//     (deleted, moved) makes the client look for it again, once, before the
//     request fails.
//   - Every operation works as on one server. ListTopics merges every
//     server's list, sorted, without repeats; Ping and Stats cover them all.
//   - A server that is down fails only its own topics, fast, with an error
//     that names it (a *ServerError carries the address, from the Client's
//     calls, a Reader's Next and a Producer's futures alike; a topic that is
//     on none of the servers that answered fails with ErrUnavailable naming
//     those that did not). Dial succeeds once one server answers. A new
//     topic whose place is a server that is down fails likewise rather than
//     land elsewhere; one placed on a live server is created there even
//     while another is down (should it live on the down one, from before the
//     list changed, it then exists twice: see docs/scaling.md).
//   - Adding a server to the list moves no topic: old topics are found
//     where they are, new ones spread over the larger set.
//
// Readers, Producers and Messages loops run on the topic's server; a
// Messages loop follows its topic to another server. A Reader of a
// replicated topic (docs/replication.md) reads on at its offset on
// another in-sync replica when its server goes down, shuts down or stops
// serving the topic, and waits, until its context ends, while none serves
// it. A Producer follows a replicated topic's leader (with idempotence,
// across a broken connection too).
//
// A Produce to a replicated topic follows its leader: a server that
// refuses it as not the leader (ErrNotLeader) stored nothing, and it is
// sent where that server says, or, during an election, to whichever
// server answers next. A leader that wrote the batch but lost the lead
// before it was committed answers ErrOutcomeUnknown (code 30): the new
// leader may hold the batch or not. A leader that does not answer within
// WithAttemptTimeout (1 s; a frozen process, a paused VM) is watched: the
// other servers are asked who leads, and once they name another server
// the produce is abandoned there. With idempotence either is sent to the
// new leader under the same producer id and sequence, which it answers
// with the batch's offset if it holds it: stored once. Without, the
// produce fails with ErrOutcomeUnknown: sending it again (at least once)
// may store it twice, not sending it (at most once) may lose it. A
// leader that is only slow (acks=all waiting for its replicas) is still
// named by the others, and its produce waits for its answer. A
// Producer's batches are bounded the same way: once the oldest in flight
// has had no answer within the attempt timeout and the others name
// another leader, every batch in flight on the silent server is
// abandoned, and the Producer moves to the new leader. With idempotence
// they are sent there in sequence order, under the same producer ids and
// sequences: stored once, offsets in Send order. Without, their Futures
// fail with ErrOutcomeUnknown.
//
// Of a topic on one server alone, a
// Reader or Producer fails with that server's error. An operation added
// to the package that this routing does not know fails with
// ErrSeveralServers.
//
// # Tokens
//
// A server started with -auth-file needs a token for every request but
// Ping. WithToken gives one: the client sends it in a hello (protocol op
// 9) as the first request of every connection it opens, reconnections and
// the connections of Messages loops included, so a token is presented once
// per connection, not per request. A token the server does not hold fails
// Dial with ErrUnauthenticated; a request the token does not allow (its
// right on its topic) fails with ErrForbidden and the connection stays
// usable. Neither is retried. Without WithToken, such a server answers
// every request but Ping with ErrUnauthenticated. Too many failed tokens
// from one address are refused for a while with ErrLimitReached. A server
// without an auth file accepts any token, so a client may always set one.
//
//	c, err := client.Dial(ctx, addr, client.WithToken(os.Getenv("HARAQA_TOKEN")))
//
// # Cluster administration
//
// A cluster of servers (-cluster, docs/replication.md) is administered with
// package client/admin over a Client: admin.New(c).ClusterStatus(ctx)
// returns the cluster's status as typed values; AddMember, RemoveMember
// and SetReplicas change it. What the servers of a cluster ask each other
// (replica fetches, epoch ends, log ends) is not in this package: it is
// the server's own.
//
// # Platforms
//
// The client builds for Linux, macOS and Windows (the server is Linux
// only). On Unix systems a caller waiting alone on a plain TCP connection
// reads its own response; on Linux the connection reads and writes with
// raw system calls, which keep the Go runtime from waking its monitor
// thread on every round trip, and waits for the rest of a large response
// under a socket low-water mark (SO_RCVLOWAT), so that it wakes once for
// it rather than once per piece that arrives. On Windows, as over TLS, a goroutine per
// connection reads the responses.
package client
