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
//	# sha256(token) in hex      rights                 topic patterns and group patterns
//	9f86d081884c7d65...         produce,consume        orders.* logs groups=billing.*,audit
//	60303ae22b998861...         consume                logs
//	2c26b46b68ffc68f...         metrics                *
//	e3b0c44298fc1c14...         admin                  *
//
// The first field is the SHA-256 of the token, 64 hex digits: the file
// never holds a token. The second is a comma-separated list of rights,
// produce, consume, admin and metrics; admin implies the other three. The
// rest are glob patterns on topic names, in which '*' matches any run of
// characters (none included) and every other character only itself; at
// least one is needed. Among them, a field groups=P[,P...] lists glob
// patterns on consumer group names (the same characters and '*'); it may
// appear more than once (the lists add up). A hash may appear on one line
// only.
//
// A rule with group patterns may use only the groups they match, on every
// topic it holds the consume right on; a rule without them may use every
// group, so auth files written before group patterns keep working. Give
// every token that shares a topic with another tenant its group patterns:
// without them it may commit, lease, reset and delete the other tenant's
// groups of that topic.
//
// # What each right allows
//
//	produce   append to a topic (creating it if the request asks to)
//	consume   read a topic; commit, fetch, lease, list and delete its groups
//	          that the group patterns allow
//	admin     create, delete and truncate a topic, and everything above and below
//	metrics   read /metrics (when the HTTP port asks a token for it), which
//	          shows only the topics the patterns match and their allowed groups
//	any       (any of the four) topic info, and the topic's name in a topic list
//
// A token's rights are the union of its rule's rights on every pattern
// the topic matches. Grant.AllowAll(right) asks for right on every topic
// and every group: a topic pattern of only '*'s and no group patterns (or
// one of only '*'s); the HTTP port's pprof asks it of admin.
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
