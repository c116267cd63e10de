//go:build !unix

package client

// canPeek is false where a socket cannot be peeked at without blocking
// through the standard library: connections there are not direct, and
// the reader goroutine reads them all the time, as it does TLS ones.
const canPeek = false

// peekLocked is never called where canPeek is false.
func (c *conn) peekLocked() (bool, error) { return false, nil }
