package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The ceilings: the plainest way to move the same bytes on this machine,
// measured in the same run as haraqa, so that a figure is judged against
// what the machine could do at that moment.
const (
	// CeilingAppend: the same payload bytes, in chunks of one request's
	// messages, over loopback TCP (one connection per producer) to a
	// receiver that appends each chunk with os.File.Write to one plain
	// file per volume (per topic) and acknowledges it with 8 bytes before
	// the sender sends the next. Never fsynced.
	CeilingAppend = "append"
	// CeilingSendfile: a plain file of the size the consumers read,
	// written first, sent with sendfile(2) (io.Copy from *os.File to
	// *net.TCPConn) over loopback, one connection per consumer each
	// sending its share, to readers that discard it.
	CeilingSendfile = "sendfile"
	// CeilingPingPong: a plain TCP ping-pong of one message, a request of
	// the message size answered with 8 bytes, one at a time, one pair of
	// goroutines per producer.
	CeilingPingPong = "ping-pong"
)

// ceilingResult is what a baseline measured.
type ceilingResult struct {
	kind    string
	bytes   int64 // payload bytes moved
	seconds float64
	hist    *hdrhistogram.Histogram // per request or round trip (nil for sendfile)
}

// loopback listens on 127.0.0.1:0 and serves n connections with handle,
// each on its own goroutine. wait returns once all handlers have returned,
// with the first error.
type loopback struct {
	l    net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

func listenLoopback(n int, handle func(i int, c *net.TCPConn) error) (*loopback, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCeiling, err)
	}
	lb := &loopback{l: l}
	lb.wg.Go(func() {
		for i := range n {
			c, err := l.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) { // closed: the dialer gave up
					lb.fail(err)
				}
				return
			}
			lb.wg.Go(func() {
				defer c.Close()
				if err := handle(i, c.(*net.TCPConn)); err != nil && !errors.Is(err, io.EOF) {
					lb.fail(err)
				}
			})
		}
	})
	return lb, nil
}

func (lb *loopback) fail(err error) {
	lb.mu.Lock()
	lb.errs = append(lb.errs, err)
	lb.mu.Unlock()
}

func (lb *loopback) addr() string { return lb.l.Addr().String() }

// wait closes the listener and waits for the handlers.
func (lb *loopback) wait() error {
	lb.l.Close()
	lb.wg.Wait()
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if err := errors.Join(lb.errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrCeiling, err)
	}
	return nil
}

// dialAll opens n connections to addr.
func dialAll(ctx context.Context, addr string, n int) ([]*net.TCPConn, error) {
	var d net.Dialer
	conns := make([]*net.TCPConn, 0, n)
	for range n {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, fmt.Errorf("%w: %w", ErrCeiling, err)
		}
		conns = append(conns, c.(*net.TCPConn))
	}
	return conns, nil
}

// appendCeiling measures CeilingAppend for total bytes from streams
// senders in chunks of chunk bytes, stream i writing the files of topic
// i mod topics on each of volumes directories under dir. A first, untimed
// pass moves warmBytes and deletes its files (as haraqa's warm-up deletes
// its topics), so both see the same page cache recycling.
func appendCeiling(ctx context.Context, dir string, volumes, topics, streams, chunk int, total, warmBytes int64, checked bool) (ceilingResult, error) {
	root, err := os.MkdirTemp(dir, "haraqa-ceiling-")
	if err != nil {
		return ceilingResult{}, fmt.Errorf("%w: %w", ErrCeiling, err)
	}
	defer os.RemoveAll(root)
	if warmBytes > 0 {
		if _, err := appendPass(ctx, filepath.Join(root, "warm"), volumes, topics, streams, chunk, warmBytes, checked); err != nil {
			return ceilingResult{}, err
		}
		if err := os.RemoveAll(filepath.Join(root, "warm")); err != nil {
			return ceilingResult{}, fmt.Errorf("%w: %w", ErrCeiling, err)
		}
	}
	return appendPass(ctx, filepath.Join(root, "timed"), volumes, topics, streams, chunk, total, checked)
}

// appendPass moves total bytes for appendCeiling. With checked, each side
// also does the least a checksummed protocol must: the sender copies the
// payload into the chunk it sends (as a producer builds a batch from its
// messages) and computes its CRC32C, the receiver computes the CRC32C of
// what it read and compares.
func appendPass(ctx context.Context, dir string, volumes, topics, streams, chunk int, total int64, checked bool) (ceilingResult, error) {
	type topicFiles struct {
		mu    sync.Mutex
		files []*os.File
	}
	tf := make([]*topicFiles, topics)
	defer func() {
		for _, t := range tf {
			if t != nil {
				for _, f := range t.files {
					f.Close()
				}
			}
		}
	}()
	for t := range tf {
		tf[t] = &topicFiles{}
		for v := range volumes {
			vdir := filepath.Join(dir, fmt.Sprintf("vol%d", v+1))
			if err := os.MkdirAll(vdir, 0o755); err != nil {
				return ceilingResult{}, fmt.Errorf("%w: %w", ErrCeiling, err)
			}
			f, err := os.OpenFile(filepath.Join(vdir, fmt.Sprintf("topic%d.log", t)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
			if err != nil {
				return ceilingResult{}, fmt.Errorf("%w: %w", ErrCeiling, err)
			}
			tf[t].files = append(tf[t].files, f)
		}
	}
	// Each chunk travels as a 4-byte length, a 4-byte CRC32C (0 unless
	// checked) and the bytes; the answer is 8 bytes.
	const hdr = 8
	lb, err := listenLoopback(streams, func(i int, c *net.TCPConn) error {
		t := tf[i%topics]
		buf := make([]byte, hdr+chunk)
		var ack [8]byte
		for {
			if _, err := io.ReadFull(c, buf[:hdr]); err != nil {
				return err
			}
			n := int(binary.LittleEndian.Uint32(buf))
			if n > chunk {
				return fmt.Errorf("chunk of %d bytes, max %d", n, chunk)
			}
			if _, err := io.ReadFull(c, buf[hdr:hdr+n]); err != nil {
				return err
			}
			if checked && crc32.Checksum(buf[hdr:hdr+n], castagnoli) != binary.LittleEndian.Uint32(buf[4:]) {
				return errors.New("chunk checksum mismatch")
			}
			t.mu.Lock()
			for _, f := range t.files {
				if _, err := f.Write(buf[hdr : hdr+n]); err != nil {
					t.mu.Unlock()
					return err
				}
			}
			t.mu.Unlock()
			if _, err := c.Write(ack[:]); err != nil {
				return err
			}
		}
	})
	if err != nil {
		return ceilingResult{}, err
	}
	conns, err := dialAll(ctx, lb.addr(), streams)
	if err != nil {
		lb.wait()
		return ceilingResult{}, err
	}
	hists := make([]*hdrhistogram.Histogram, streams)
	errs := make([]error, streams)
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range conns {
		hists[i] = newHist()
		quota := bound{messages: total}.share(i, streams)
		wg.Go(func() {
			defer c.Close()
			buf := make([]byte, hdr+chunk)
			src := poolBytes(chunk)
			copy(buf[hdr:], src)
			var ack [8]byte
			for left := quota; left > 0 && ctx.Err() == nil; {
				n := int(min(int64(chunk), left))
				binary.LittleEndian.PutUint32(buf, uint32(n))
				t0 := time.Now()
				if checked {
					copy(buf[hdr:hdr+n], src)
					binary.LittleEndian.PutUint32(buf[4:], crc32.Checksum(buf[hdr:hdr+n], castagnoli))
				}
				if _, err := c.Write(buf[:hdr+n]); err != nil {
					errs[i] = err
					return
				}
				if _, err := io.ReadFull(c, ack[:]); err != nil {
					errs[i] = err
					return
				}
				record(hists[i], time.Since(t0))
				left -= int64(n)
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if err := errors.Join(errors.Join(errs...), lb.wait()); err != nil {
		return ceilingResult{}, fmt.Errorf("%w: %w", ErrCeiling, err)
	}
	if ctx.Err() != nil {
		return ceilingResult{}, ErrInterrupted
	}
	return ceilingResult{kind: CeilingAppend, bytes: total, seconds: secs, hist: mergeHists(hists...)}, nil
}

// sendfileCeiling measures CeilingSendfile for a file of fileBytes
// written under dir, streams connections each sending its share.
func sendfileCeiling(ctx context.Context, dir string, streams int, fileBytes int64) (ceilingResult, error) {
	f, err := os.CreateTemp(dir, "haraqa-ceiling-*.log")
	if err != nil {
		return ceilingResult{}, fmt.Errorf("%w: %w", ErrCeiling, err)
	}
	path := f.Name()
	defer os.Remove(path)
	block := poolBytes(1 << 20)
	for left := fileBytes; left > 0; {
		n := min(int64(len(block)), left)
		if _, err := f.Write(block[:n]); err != nil {
			f.Close()
			return ceilingResult{}, fmt.Errorf("%w: %w", ErrCeiling, err)
		}
		left -= n
	}
	if err := f.Close(); err != nil {
		return ceilingResult{}, fmt.Errorf("%w: %w", ErrCeiling, err)
	}
	begin := make(chan struct{})
	lb, err := listenLoopback(streams, func(i int, c *net.TCPConn) error {
		from := fileBytes * int64(i) / int64(streams)
		to := fileBytes * int64(i+1) / int64(streams)
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		if _, err := src.Seek(from, io.SeekStart); err != nil {
			return err
		}
		<-begin
		// *net.TCPConn.ReadFrom of an *os.File (in an io.LimitedReader)
		// uses sendfile(2).
		if _, err := io.CopyN(c, src, to-from); err != nil {
			return err
		}
		return c.CloseWrite()
	})
	if err != nil {
		return ceilingResult{}, err
	}
	conns, err := dialAll(ctx, lb.addr(), streams)
	if err != nil {
		close(begin)
		lb.wait()
		return ceilingResult{}, err
	}
	got := make([]int64, streams)
	errs := make([]error, streams)
	bufs := make([][]byte, streams)
	for i := range bufs {
		bufs[i] = make([]byte, 1<<20)
		for j := range bufs[i] { // touch the pages before the clock starts
			bufs[i][j] = 1
		}
	}
	var wg sync.WaitGroup
	start := time.Now()
	close(begin)
	for i, c := range conns {
		wg.Go(func() {
			defer c.Close()
			for {
				n, err := c.Read(bufs[i])
				got[i] += int64(n)
				if err == io.EOF {
					return
				}
				if err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if err := errors.Join(errors.Join(errs...), lb.wait()); err != nil {
		return ceilingResult{}, fmt.Errorf("%w: %w", ErrCeiling, err)
	}
	var sum int64
	for _, n := range got {
		sum += n
	}
	if sum != fileBytes {
		return ceilingResult{}, fmt.Errorf("%w: sendfile moved %d bytes of %d", ErrCeiling, sum, fileBytes)
	}
	return ceilingResult{kind: CeilingSendfile, bytes: fileBytes, seconds: secs}, nil
}

// pingPongWarm is the number of untimed round trips each pair makes first.
const pingPongWarm = 1000

// pingPongCeiling measures CeilingPingPong: pairs pairs making count round
// trips in all of a size-byte request and an 8-byte answer.
func pingPongCeiling(ctx context.Context, pairs, size int, count int64) (ceilingResult, error) {
	lb, err := listenLoopback(pairs, func(_ int, c *net.TCPConn) error {
		buf := make([]byte, size)
		var ack [8]byte
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return err
			}
			if _, err := c.Write(ack[:]); err != nil {
				return err
			}
		}
	})
	if err != nil {
		return ceilingResult{}, err
	}
	conns, err := dialAll(ctx, lb.addr(), pairs)
	if err != nil {
		lb.wait()
		return ceilingResult{}, err
	}
	hists := make([]*hdrhistogram.Histogram, pairs)
	errs := make([]error, pairs)
	var ready, wg sync.WaitGroup
	begin := make(chan struct{})
	var start time.Time
	for i, c := range conns {
		hists[i] = newHist()
		quota := bound{messages: count}.share(i, pairs)
		ready.Add(1)
		wg.Go(func() {
			defer c.Close()
			msg := make([]byte, size)
			copy(msg, poolBytes(size))
			var ack [8]byte
			trip := func() error {
				if _, err := c.Write(msg); err != nil {
					return err
				}
				_, err := io.ReadFull(c, ack[:])
				return err
			}
			for range pingPongWarm {
				if errs[i] = trip(); errs[i] != nil {
					ready.Done()
					return
				}
			}
			ready.Done()
			<-begin
			for k := int64(0); k < quota && ctx.Err() == nil; k++ {
				t0 := time.Now()
				if errs[i] = trip(); errs[i] != nil {
					return
				}
				record(hists[i], time.Since(t0))
			}
		})
	}
	ready.Wait()
	start = time.Now()
	close(begin)
	wg.Wait()
	secs := time.Since(start).Seconds()
	if err := errors.Join(errors.Join(errs...), lb.wait()); err != nil {
		return ceilingResult{}, fmt.Errorf("%w: %w", ErrCeiling, err)
	}
	if ctx.Err() != nil {
		return ceilingResult{}, ErrInterrupted
	}
	return ceilingResult{kind: CeilingPingPong, bytes: count * int64(size), seconds: secs, hist: mergeHists(hists...)}, nil
}
