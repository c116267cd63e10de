package storage

import (
	"runtime"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/haraqa/haraqa/protocol"
)

// This file: the threads compressed batches are decoded on.
//
// A decode is the one piece of an append that costs CPU in proportion to
// what a client claims rather than to what it sends: a 7 KB zstd batch may
// decode to 64 MiB, 40 ms of a core. Run on an ordinary goroutine, it
// competes with the event loops on equal terms, and on a machine of two
// cores a client pipelining such batches adds milliseconds to every other
// client's round trip. So decodes run on threads of their own, each locked
// to its goroutine and set to the lowest scheduling priority (nice 19):
// the kernel then runs an event loop the moment it wakes and gives the
// decode the rest. They take no more than the CPU the loops leave, which
// on an idle server is all of it.

// decodeNice is the nice value of the decode threads: the lowest priority.
const decodeNice = 19

// lowThreads runs functions on a fixed number of goroutines, each locked to
// an OS thread of the lowest priority. It starts them at first use; stop
// ends them.
type lowThreads struct {
	n     int
	once  sync.Once
	jobs  chan func()
	stopc chan struct{}
	wg    sync.WaitGroup
}

func newLowThreads(n int) *lowThreads {
	return &lowThreads{n: max(n, 1), jobs: make(chan func()), stopc: make(chan struct{})}
}

// run runs f on one of the threads and returns when it has returned. After
// stop it runs f on the caller's goroutine.
func (l *lowThreads) run(f func()) {
	l.once.Do(l.start)
	done := make(chan struct{})
	select {
	case l.jobs <- func() { defer close(done); f() }:
		<-done
	case <-l.stopc:
		f()
	}
}

func (l *lowThreads) start() {
	for range l.n {
		l.wg.Add(1)
		go l.serve()
	}
}

// serve is one thread: it never unlocks, so the thread, whose priority an
// unprivileged process cannot raise again, ends with the goroutine.
func (l *lowThreads) serve() {
	defer l.wg.Done()
	runtime.LockOSThread()
	// A failure leaves the thread at the process's priority: decodes still
	// run, only without yielding to the loops.
	_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), decodeNice)
	for {
		select {
		case f := <-l.jobs:
			f()
		case <-l.stopc:
			return
		}
	}
}

// stop ends the threads once the functions running on them return.
func (l *lowThreads) stop() {
	close(l.stopc)
	l.wg.Wait()
}

// DecodeBody decodes bt's body into dst's memory when it is large enough,
// as bt.DecodeBodyInto does, on the decode threads when bt is compressed:
// for a port that hands consumers their messages one by one (HTTP), so
// that its decodes yield to the event loops as appends' do, and wait in
// tenant's queue among appends' (decode.go). The caller bounds bt.RawSize
// first.
func (s *Store) DecodeBody(tenant string, bt *protocol.Batch, dst []byte) ([]byte, error) {
	if bt.Codec == protocol.CodecNone {
		return bt.DecodeBodyInto(dst)
	}
	held, err := s.decode.acquire(tenant, int64(bt.RawSize))
	if err != nil {
		return nil, err
	}
	defer s.decode.release(held)
	var raw []byte
	s.decoders.run(func() { raw, err = bt.DecodeBodyInto(dst) })
	return raw, err
}
