package auth

import (
	"fmt"
	"os"
	"sync/atomic"

	"github.com/haraqa/haraqa/protocol"
)

// Authorizer holds the rules in force, read from a file and swapped whole
// on Reload: a request sees the old rules or the new, never a mix. Safe for
// concurrent use. A nil *Authorizer means authorization is off.
type Authorizer struct {
	path    string
	rules   atomic.Pointer[Rules]
	limiter *Limiter
}

// Load reads the auth file at path.
func Load(path string) (*Authorizer, error) {
	a := &Authorizer{path: path, limiter: NewLimiter(DefaultLimits())}
	if err := a.Reload(); err != nil {
		return nil, err
	}
	return a, nil
}

// New returns an Authorizer with rules and no file (Reload keeps them).
func New(rules *Rules) *Authorizer {
	a := &Authorizer{limiter: NewLimiter(DefaultLimits())}
	a.rules.Store(rules)
	return a
}

// Reload reads the file again. On an error the rules in force stay.
func (a *Authorizer) Reload() error {
	if a.path == "" {
		return nil
	}
	f, err := os.Open(a.path)
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	defer f.Close()
	r, err := Parse(f, a.path)
	if err != nil {
		return err
	}
	a.rules.Store(r)
	return nil
}

// Rules returns the rules in force.
func (a *Authorizer) Rules() *Rules { return a.rules.Load() }

// Path is the auth file's path.
func (a *Authorizer) Path() string { return a.path }

// Authenticate checks token for the client at remote (an address with or
// without a port; see Limiter). It returns the token's grant, or
// ErrUnauthenticated (no token, or one the rules do not hold), or
// ErrTooManyFailures (a token the rules do not hold, from a host over the
// Limiter's limits). The token is checked first, whatever the failures
// from remote, so a valid token is never refused; only a token that
// failed counts against remote, and a missing token counts nothing.
func (a *Authorizer) Authenticate(remote, token string) (*Grant, error) {
	if token == "" {
		return nil, ErrUnauthenticated
	}
	sum := protocol.TokenHash(token)
	if g := a.rules.Load().lookup(sum); g != nil {
		return g, nil
	}
	if !a.limiter.Fail(remote, sum) {
		return nil, ErrTooManyFailures
	}
	return nil, ErrUnauthenticated
}
