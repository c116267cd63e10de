package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/haraqa/haraqa/protocol"
)

// tokenBytes is the size of a token's randomness: 256 bits.
const tokenBytes = 32

var tokenNewCmd = &command{
	name:    "token new",
	opts:    "[-rights RIGHTS] [-topics PATTERNS] [-groups PATTERNS]",
	summary: "print a fresh token and its auth-file line",
	help: `Prints a fresh random token (32 bytes from the system's secure random source,
base64url without padding) on the first line, and on the second the line for
the server's -auth-file: the token's SHA-256 in hex, its rights and its topic
patterns. The server stores only the hash; give the token to the client
(-token, $HARAQA_TOKEN, client.WithToken) and keep it nowhere else. Nothing
is sent to a server.

Rights are produce, consume, admin (which implies the other three) and
metrics (read /metrics), comma-separated; topic patterns are globs in which
* matches any run of characters, space-separated. -groups limits the
consumer groups the token may use to those its patterns (globs,
comma-separated) match; without it the token may use every group of the
topics it consumes, so give it to every token that shares a topic.

Examples:
  hrqa token new
  hrqa token new -rights consume -topics 'orders.* logs'
  hrqa token new -rights consume -topics 'shared.*' -groups 'team-a.*'
  hrqa token new -rights admin -topics '*' | sed -n 2p >> /etc/haraqa/auth
  kill -HUP $(pidof haraqa)     # the server rereads its auth file`,
	setup: func(fs *flag.FlagSet) action {
		rights := fs.String("rights", "produce,consume", "rights of the token: produce, consume, admin, metrics, comma-separated")
		topics := fs.String("topics", "*", "topic patterns the rights hold on, space-separated; * matches any run of characters")
		groups := fs.String("groups", "", "consumer group patterns the token may use, comma-separated (default: every group)")
		return func(_ context.Context, e *env, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected arguments: %s", strings.Join(args, " "))
			}
			tok, line, err := newToken(*rights, *topics, *groups)
			if err != nil {
				return usagef("%v", err)
			}
			_, err = fmt.Fprintf(e.stdout, "%s\n%s\n", tok, line)
			return err
		}
	},
}

// newToken returns a fresh token and its auth-file line, once checkRule
// has checked the rights and patterns. groups, when not empty, are the
// comma-separated group patterns.
func newToken(rights, topics, groups string) (token, line string, err error) {
	patterns := strings.Fields(topics)
	if err := checkRule(rights, patterns); err != nil {
		return "", "", err
	}
	if groups != "" {
		if err := checkGroups(groups); err != nil {
			return "", "", err
		}
		patterns = append(patterns, "groups="+groups)
	}
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", "", err
	}
	token = base64.RawURLEncoding.EncodeToString(b)
	sum := protocol.TokenHash(token)
	line = hex.EncodeToString(sum[:]) + "  " + rights + "  " + strings.Join(patterns, " ")
	return token, line, nil
}

// maxPatternLen bounds a topic pattern, as a topic name.
const maxPatternLen = 255

// checkRule checks the rights and topic patterns of an auth-file line as
// the server's parser does (package broker/auth, which hrqa does not
// import; TestCheckRuleAsServer holds the two together), with the same
// messages. It is stricter only where the parser would read the line
// otherwise than meant: rights that are empty or hold spaces (patterns
// would be read as rights, or rights as patterns), and a '#' in a pattern
// (the rest of the line would be a comment).
func checkRule(rights string, patterns []string) error {
	for _, r := range strings.Split(rights, ",") {
		switch r {
		case "produce", "consume", "admin", "metrics", "replication":
		default:
			return fmt.Errorf("unknown right %q: want produce, consume, admin, metrics or replication, comma-separated", r)
		}
	}
	if len(patterns) == 0 {
		return errors.New("no topic pattern: want at least one")
	}
	for _, p := range patterns {
		if err := checkPattern("topic", p); err != nil {
			return err
		}
	}
	return nil
}

// checkGroups checks a -groups list as the server's parser checks a
// groups= field, with the same messages.
func checkGroups(list string) error {
	for _, p := range strings.Split(list, ",") {
		if p == "" {
			return fmt.Errorf("empty group pattern in groups=%s: want patterns separated by single commas", list)
		}
		if err := checkPattern("group", p); err != nil {
			return err
		}
	}
	return nil
}

// checkPattern checks a topic or group pattern (kind names it).
func checkPattern(kind, p string) error {
	if len(p) > maxPatternLen {
		return fmt.Errorf("%s pattern of %d bytes: at most %d", kind, len(p), maxPatternLen)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c != '*' && c != '.' && c != '_' && c != '-' &&
			(c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return fmt.Errorf("%s pattern %q: %q is neither a %s name character nor '*'", kind, p, c, kind)
		}
	}
	return nil
}
