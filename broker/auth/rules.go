package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/haraqa/haraqa/protocol"
)

// Right is a set of rights a token holds on a topic.
type Right uint8

// Rights. Admin implies produce, consume and metrics: a rule giving
// admin holds all four. Replication is apart: admin does not imply it,
// and it implies nothing else.
const (
	Produce     Right = 1 << iota // append to a topic
	Consume                       // read a topic and use its groups
	Admin                         // create, delete, truncate a topic
	Metrics                       // read /metrics (the topics the patterns match)
	Replication                   // a cluster's servers: copy a topic's log, speak on the cluster port

	// Any asks for any right at all: topic info and list topics need it.
	Any = Produce | Consume | Admin | Metrics
)

func (r Right) String() string {
	var names []string
	for _, n := range [...]struct {
		r    Right
		name string
	}{{Produce, "produce"}, {Consume, "consume"}, {Admin, "admin"}, {Metrics, "metrics"}, {Replication, "replication"}} {
		if r&n.r != 0 {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// maxLineLen bounds a line of the auth file.
const maxLineLen = 64 << 10

// Grant is what one rule of the auth file gives a token: its rights on
// the topics its patterns match, and the consumer groups it may use. A
// connection keeps the Grant of its token; a Grant never changes, so it is
// safe for concurrent use. A nil Grant allows nothing.
type Grant struct {
	hash     [sha256.Size]byte
	rights   Right
	patterns []string
	groups   []string // group patterns; nil: every group
	line     int      // in the file, for logs
}

// Allow reports whether g holds right on topic. With Any it reports
// whether g holds some right on topic.
func (g *Grant) Allow(right Right, topic string) bool {
	if g == nil || g.rights&right == 0 {
		return false
	}
	for _, p := range g.patterns {
		if match(p, topic) {
			return true
		}
	}
	return false
}

// AllowGroup reports whether g may use the consumer group named group
// (on the topics it holds the consume right on; Allow checks those): a
// rule without group patterns allows every group, one with them only the
// groups they match.
func (g *Grant) AllowGroup(group string) bool {
	if g == nil {
		return false
	}
	if g.groups == nil {
		return true
	}
	for _, p := range g.groups {
		if match(p, group) {
			return true
		}
	}
	return false
}

// AllowAll reports whether g holds right on every topic and every group:
// its rule gives right on the pattern "*" (or "**"...) and has no group
// pattern or one of only stars. With Admin it is what a page that shows
// the whole server (pprof) asks.
func (g *Grant) AllowAll(right Right) bool {
	if g == nil || right == 0 || g.rights&right != right {
		return false
	}
	return (g.groups == nil || slices.ContainsFunc(g.groups, allStars)) && slices.ContainsFunc(g.patterns, allStars)
}

// allStars reports whether the pattern p matches every name.
func allStars(p string) bool { return p != "" && strings.Trim(p, "*") == "" }

// Filter keeps in names, in place, the topics g holds some right on, and
// returns them.
func (g *Grant) Filter(names []string) []string {
	kept := names[:0]
	for _, n := range names {
		if g.Allow(Any, n) {
			kept = append(kept, n)
		}
	}
	return kept
}

// Owner names the token of g for what storage keeps per token (who owns
// an idempotent producer id or a group): the hex SHA-256 of the token,
// which the auth file already holds, so it reveals nothing new. A nil
// Grant's owner is "".
func (g *Grant) Owner() string {
	if g == nil {
		return ""
	}
	return hex.EncodeToString(g.hash[:])
}

// Line is the line of the auth file the grant comes from, which names it
// in logs without naming its token.
func (g *Grant) Line() int {
	if g == nil {
		return 0
	}
	return g.line
}

// Rules are the compiled rules of an auth file.
type Rules struct {
	grants []*Grant
}

// Len is the number of rules.
func (r *Rules) Len() int { return len(r.grants) }

// Authenticate returns the grant of token, or nil if no rule holds its
// hash. Every rule is compared, in constant time each, whatever matches.
func (r *Rules) Authenticate(token string) *Grant {
	if token == "" {
		return nil
	}
	return r.lookup(protocol.TokenHash(token))
}

// lookup returns the grant of the token hash sum, comparing every rule in
// constant time.
func (r *Rules) lookup(sum [sha256.Size]byte) *Grant {
	var found *Grant
	for _, g := range r.grants {
		if subtle.ConstantTimeCompare(sum[:], g.hash[:]) == 1 {
			found = g
		}
	}
	return found
}

// Parse reads the rules of an auth file (see the package doc). name is
// the file's name for error messages. An error wraps ErrParse and names the
// line; it never quotes a hash.
func Parse(rd io.Reader, name string) (*Rules, error) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 0, 4096), maxLineLen)
	rules := &Rules{}
	seen := make(map[[sha256.Size]byte]int)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if i := bytes.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(string(line))
		if len(fields) == 0 {
			continue
		}
		g, err := parseRule(fields)
		if err != nil {
			return nil, fmt.Errorf("%w: %s:%d: %s", ErrParse, name, n, err)
		}
		if prev, ok := seen[g.hash]; ok {
			return nil, fmt.Errorf("%w: %s:%d: the same hash as line %d", ErrParse, name, n, prev)
		}
		seen[g.hash] = n
		g.line = n
		rules.grants = append(rules.grants, g)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrParse, name, err)
	}
	return rules, nil
}

func parseRule(fields []string) (*Grant, error) {
	if len(fields) < 3 {
		return nil, fmt.Errorf("want a sha256 hash, rights and at least one topic pattern; got %d field(s)", len(fields))
	}
	g := &Grant{}
	if len(fields[0]) != 2*sha256.Size {
		return nil, fmt.Errorf("the hash has %d characters, want %d hex digits (sha256 of the token)", len(fields[0]), 2*sha256.Size)
	}
	if _, err := hex.Decode(g.hash[:], []byte(fields[0])); err != nil {
		return nil, fmt.Errorf("the hash is not hex: want the sha256 of the token in %d hex digits", 2*sha256.Size)
	}
	for _, r := range strings.Split(fields[1], ",") {
		switch r {
		case "produce":
			g.rights |= Produce
		case "consume":
			g.rights |= Consume
		case "metrics":
			g.rights |= Metrics
		case "admin":
			g.rights |= Any
		case "replication":
			g.rights |= Replication
		default:
			return nil, fmt.Errorf("unknown right %q: want produce, consume, admin, metrics or replication, comma-separated", r)
		}
	}
	for _, f := range fields[2:] {
		if list, ok := strings.CutPrefix(f, groupsField); ok {
			if err := g.addGroups(list); err != nil {
				return nil, err
			}
			continue
		}
		if err := validPattern("topic", f); err != nil {
			return nil, err
		}
		g.patterns = append(g.patterns, f)
	}
	if len(g.patterns) == 0 {
		return nil, errors.New("no topic pattern: want at least one beside " + groupsField + "...")
	}
	return g, nil
}

// groupsField starts the field of a rule that lists its group patterns.
const groupsField = "groups="

// addGroups adds the comma-separated group patterns of list to g.
func (g *Grant) addGroups(list string) error {
	for _, p := range strings.Split(list, ",") {
		if p == "" {
			return fmt.Errorf("empty group pattern in %s%s: want patterns separated by single commas", groupsField, list)
		}
		if err := validPattern("group", p); err != nil {
			return err
		}
		g.groups = append(g.groups, p)
	}
	return nil
}

// validPattern checks that p is a topic (or group) name with '*'s: 1 to
// 255 bytes of [A-Za-z0-9._-*]. kind names it in the error.
func validPattern(kind, p string) error {
	if len(p) > 255 {
		return fmt.Errorf("%s pattern of %d bytes: at most 255", kind, len(p))
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

// match reports whether name matches the glob pattern p, in which '*'
// matches any run of bytes. Linear in len(p)+len(name) per star (the
// classic backtrack to the last star), never exponential.
func match(p, name string) bool {
	pi, ni := 0, 0
	star, mark := -1, 0
	for ni < len(name) {
		switch {
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, ni
			pi++
		case pi < len(p) && p[pi] == name[ni]:
			pi++
			ni++
		case star >= 0:
			pi = star + 1
			mark++
			ni = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// Has reports whether g holds right on at least one pattern: with
// Metrics, whether the token may read /metrics (and there see the topics
// its patterns match), as the HTTP port's -auth-metrics asks.
func (g *Grant) Has(right Right) bool {
	return g != nil && g.rights&right == right && len(g.patterns) > 0
}
