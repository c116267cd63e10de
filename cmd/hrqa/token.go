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
	opts:    "[-rights RIGHTS] [-topics PATTERNS]",
	summary: "print a fresh token and its auth-file line",
	help: `Prints a fresh random token (32 bytes from the system's secure random source,
base64url without padding) on the first line, and on the second the line for
the server's -auth-file: the token's SHA-256 in hex, its rights and its topic
patterns. The server stores only the hash; give the token to the client
(-token, $HARAQA_TOKEN, client.WithToken) and keep it nowhere else. Nothing
is sent to a server.

Rights are produce, consume and admin (which implies the other two),
comma-separated; topic patterns are globs in which * matches any run of
characters, space-separated.

Examples:
  hrqa token new
  hrqa token new -rights consume -topics 'orders.* logs'
  hrqa token new -rights admin -topics '*' | sed -n 2p >> /etc/haraqa/auth
  kill -HUP $(pidof haraqa)     # the server rereads its auth file`,
	setup: func(fs *flag.FlagSet) action {
		rights := fs.String("rights", "produce,consume", "rights of the token: produce, consume, admin, comma-separated")
		topics := fs.String("topics", "*", "topic patterns the rights hold on, space-separated; * matches any run of characters")
		return func(_ context.Context, e *env, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected arguments: %s", strings.Join(args, " "))
			}
			tok, line, err := newToken(*rights, *topics)
			if err != nil {
				return usagef("%v", err)
			}
			_, err = fmt.Fprintf(e.stdout, "%s\n%s\n", tok, line)
			return err
		}
	},
}

// newToken returns a fresh token and its auth-file line, once checkRule
// has checked the rights and topic patterns.
func newToken(rights, topics string) (token, line string, err error) {
	patterns := strings.Fields(topics)
	if err := checkRule(rights, patterns); err != nil {
		return "", "", err
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
		case "produce", "consume", "admin":
		default:
			return fmt.Errorf("unknown right %q: want produce, consume or admin, comma-separated", r)
		}
	}
	if len(patterns) == 0 {
		return errors.New("no topic pattern: want at least one")
	}
	for _, p := range patterns {
		if len(p) > maxPatternLen {
			return fmt.Errorf("topic pattern of %d bytes: at most %d", len(p), maxPatternLen)
		}
		for i := 0; i < len(p); i++ {
			c := p[i]
			if c != '*' && c != '.' && c != '_' && c != '-' &&
				(c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
				return fmt.Errorf("topic pattern %q: %q is neither a topic name character nor '*'", p, c)
			}
		}
	}
	return nil
}
