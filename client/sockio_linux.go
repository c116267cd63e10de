package client

import (
	"io"
	"os"
	"syscall"
	"unsafe"
)

// sockIO reads and writes a plain TCP connection with read(2) and write(2)
// made as raw system calls through its syscall.RawConn, which keeps the
// descriptor from being closed meanwhile and waits on the runtime's poller
// when the socket has nothing to give or no room.
//
// Why raw: the socket is non-blocking, so neither call ever waits in the
// kernel, and a raw call skips the runtime's system-call bookkeeping. That
// bookkeeping wakes the runtime's monitor thread (sysmon) with a futex on
// the first system call after every processor was idle, which is every
// round trip of a caller waiting for one answer at a time: a wake-up of a
// thread on another CPU, and a context switch there, per request.
type sockIO struct {
	raw syscall.RawConn
	// due is how many bytes the frame being read still holds (expect):
	// bytes the server has sent or will. A read that has to wait for
	// them asks the kernel, with SO_RCVLOWAT, to wake it only once
	// enough of them are in (lowat: what the socket is set to, 0 for
	// the default of one byte), so that a large response arriving in
	// pieces is read in one or two reads, not one per piece.
	due, lowat int
}

// minLowat is the smallest wait worth a low-water mark: below it the
// pieces a response arrives in are few.
const minLowat = 128 << 10

// expect says that the next reads are of a frame of which n bytes are
// still to come (0: none; the low-water mark goes back to one byte).
func (s *sockIO) expect(n int) {
	s.due = max(n, 0)
	if s.due == 0 && s.lowat != 0 {
		s.setLowat(0)
	}
}

// setLowat sets the socket's SO_RCVLOWAT to n bytes (0: one). It fails
// only on a closed socket, which the read that follows reports.
func (s *sockIO) setLowat(n int) {
	_ = s.raw.Control(func(fd uintptr) { s.setLowatFd(fd, n) })
}

// setLowatFd is setLowat on the descriptor fd, from inside a raw call.
func (s *sockIO) setLowatFd(fd uintptr, n int) {
	if syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, max(n, 1)) == nil {
		s.lowat = n
	}
}

func newSockIO(raw syscall.RawConn) *sockIO { return &sockIO{raw: raw} }

// Read reads what the socket holds, waiting for something if it holds
// nothing, until the connection's read deadline.
func (s *sockIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := s.raw.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				// The kernel wakes this wait before the low-water
				// mark when the peer closes or the receive window
				// runs out, so it never waits for bytes that cannot
				// come.
				want := min(s.due, len(p))
				if want < minLowat {
					want = 0
				}
				if want != s.lowat {
					s.setLowatFd(fd, want)
				}
				return false
			}
			n, errno = int(r), e
			return true
		}
	})
	if n > 0 {
		s.due = max(s.due-n, 0)
	}
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, os.NewSyscallError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of p, waiting for room until the connection's write
// deadline.
func (s *sockIO) Write(p []byte) (int, error) {
	return s.write(p, true)
}

// tryWrite writes what of p the socket takes now, without waiting.
func (s *sockIO) tryWrite(p []byte) (int, error) {
	return s.write(p, false)
}

func (s *sockIO) write(p []byte, wait bool) (int, error) {
	n := 0
	var errno syscall.Errno
	err := s.raw.Write(func(fd uintptr) bool {
		for n < len(p) {
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[n])), uintptr(len(p)-n))
			switch e {
			case 0:
				n += int(r)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return !wait
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return n, err
	case errno != 0:
		return n, os.NewSyscallError("write", errno)
	}
	return n, nil
}
