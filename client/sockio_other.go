//go:build !linux

package client

import (
	"errors"
	"syscall"
)

// sockIO is Linux only (sockio_linux.go); elsewhere newSockIO returns nil
// and direct connections read and write through the net.Conn.
type sockIO struct{}

var errNoSockIO = errors.New("client: raw socket I/O is not available on this system")

func newSockIO(syscall.RawConn) *sockIO { return nil }

func (*sockIO) Read([]byte) (int, error)     { return 0, errNoSockIO }
func (*sockIO) Write([]byte) (int, error)    { return 0, errNoSockIO }
func (*sockIO) tryWrite([]byte) (int, error) { return 0, errNoSockIO }
func (*sockIO) expect(int)                   {}
