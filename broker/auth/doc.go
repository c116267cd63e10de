// Package auth holds haraqa's token authorization: the rules of an
// -auth-file, the check of a presented token against them, and the rights
// check both ports call. It is the one place where a request is allowed or
// refused; the binary port (package broker) and the HTTP port (package
// broker/httpapi) only map their operations to a Right and a topic.
//
// # The auth file
//
// Plain text, one rule a line; '#' starts a comment that runs to the end of
// the line; blank lines are skipped. A rule is three or more fields
// separated by spaces or tabs:
//
//	# sha256(token) in hex      rights                 topic patterns
//	9f86d081884c7d65...         produce,consume        orders.* logs
//	60303ae22b998861...         consume                logs
//	e3b0c44298fc1c14...         admin                  *
//
// The first field is the SHA-256 of the token, 64 hex digits: the file
// never holds a token. The second is a comma-separated list of rights,
// produce, consume and admin; admin implies the other two. The rest are
// glob patterns on topic names, in which '*' matches any run of characters
// (none included) and every other character only itself. A hash may appear
// on one line only.
//
// # What each right allows
//
//	produce   append to a topic (creating it if the request asks to)
//	consume   read a topic
//	admin     create, delete and truncate a topic, and everything above
//	any       topic info, and the topic's name in a topic list
//
// A token's rights are the union of its rule's rights on every pattern
// the topic matches.
//
// # Checking a token
//
// Authenticate hashes the presented token with SHA-256 and compares the
// hash with every rule's in constant time (crypto/subtle), never stopping
// at a match, so the time taken says nothing about which bytes matched.
// The rules are compiled once, when the file is read; a Grant is what a
// connection caches of its token, and Grant.Allow costs a few comparisons.
//
// Failed authentications are limited by a Limiter, which is consulted only
// after the token failed: a valid token is never refused, and a missing
// token is refused (ErrUnauthenticated) without counting as a failure. A
// token that keeps failing from one host (the address without its port)
// has Burst failures, then one more every Every (5, then two a second);
// past that it gets ErrTooManyFailures, and so do the distinct failing
// tokens of a host past the same rate (a flood of random tokens), without
// touching any other token from that host. Every token is still checked:
// the limit bounds what failures cost and tell (the binary port logs no
// failure over it), not the guesses, which a 256-bit token makes hopeless
// at any rate. Memory stays bounded: at most MaxAddrs hosts and MaxAddrs
// (host, token) pairs (65536 each: 17 MiB when both are full).
package auth
