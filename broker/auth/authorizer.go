package auth

import (
	"fmt"
	"os"
	"sync/atomic"
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
// ErrTooManyFailures (remote failed too often: token not checked), or
// ErrUnauthenticated (the failure is counted against remote).
func (a *Authorizer) Authenticate(remote, token string) (*Grant, error) {
	if !a.limiter.Allowed(remote) {
		return nil, ErrTooManyFailures
	}
	g := a.rules.Load().Authenticate(token)
	if g == nil {
		a.limiter.Fail(remote)
		return nil, ErrUnauthenticated
	}
	return g, nil
}
