package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"flag"
	"fmt"
	"strings"

	"github.com/haraqa/haraqa/broker/auth"
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

// newToken returns a fresh token and its auth-file line, checked by the
// server's own parser.
func newToken(rights, topics string) (token, line string, err error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", "", err
	}
	token = base64.RawURLEncoding.EncodeToString(b)
	sum := protocol.TokenHash(token)
	line = hex.EncodeToString(sum[:]) + "  " + rights + "  " + strings.Join(strings.Fields(topics), " ")
	if _, err := auth.Parse(strings.NewReader(line), "-rights/-topics"); err != nil {
		_, detail, _ := strings.Cut(err.Error(), ":1: ")
		return "", "", fmt.Errorf("%s", detail)
	}
	return token, line, nil
}
