//go:build unix

package client

import (
	"io"
	"syscall"
)

// canPeek: a direct connection can be probed before reuse (see dead).
const canPeek = true

// peekLocked looks, without waiting or taking anything, at what the socket
// of a direct connection that nobody reads holds: data (true), nothing
// (false), or a close by the server (err). c.mu must be held, so that
// nobody starts reading meanwhile.
func (c *conn) peekLocked() (bool, error) {
	var b [1]byte
	var n int
	var rerr error
	err := c.raw.Read(func(fd uintptr) bool {
		n, _, rerr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	})
	switch {
	case err != nil:
		return false, err
	case rerr == syscall.EAGAIN:
		return false, nil
	case rerr != nil:
		return false, rerr
	case n == 0:
		return false, io.EOF
	}
	return true, nil
}
