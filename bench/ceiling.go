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

// drive runs each of conns on its own goroutine, closing it after: warm
// (if not nil) untimed, then, once every connection is warm, run, timed.
// started (if not nil) is called as the clock starts. It returns the
// seconds the timed part took, or the first error of any connection or of
// the listener's handlers (wait), or ErrInterrupted if ctx ended.
func (lb *loopback) drive(ctx context.Context, conns []*net.TCPConn, warm, run func(i int, c *net.TCPConn) error, started func()) (float64, error) {
	errs := make([]error, len(conns))
	var ready, wg sync.WaitGroup
	begin := make(chan struct{})
	for i, c := range conns {
		ready.Add(1)
		wg.Go(func() {
			defer c.Close()
			if warm != nil {
				if errs[i] = warm(i, c); errs[i] != nil {
					ready.Done()
					return
				}
			}
			ready.Done()
			<-begin
			errs[i] = run(i, c)
		})
	}
	ready.Wait()
	start := time.Now()
	if started != nil {
		started()
	}
	close(begin)
	wg.Wait()
	secs := time.Since(start).Seconds()
	if err := errors.Join(errors.Join(errs...), lb.wait()); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrCeiling, err)
	}
	if ctx.Err() != nil {
		return 0, ErrInterrupted
	}
	return secs, nil
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
	tf, err := openTopicFiles(dir, volumes, topics)
	defer tf.close()
	if err != nil {
		return ceilingResult{}, err
	}
	lb, err := listenLoopback(streams, func(i int, c *net.TCPConn) error {
		return receiveChunks(c, tf[i%topics], chunk, checked)
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
	for i := range hists {
		hists[i] = newHist()
	}
	secs, err := lb.drive(ctx, conns, nil, func(i int, c *net.TCPConn) error {
		return sendChunks(ctx, c, chunk, bound{messages: total}.share(i, streams), checked, hists[i])
	}, nil)
	if err != nil {
		return ceilingResult{}, err
	}
	return ceilingResult{kind: CeilingAppend, bytes: total, seconds: secs, hist: mergeHists(hists...)}, nil
}

// chunkHeader is what precedes each chunk the append ceiling sends: a
// 4-byte length and a 4-byte CRC32C (0 unless checked). The answer is 8
// bytes.
const chunkHeader = 8

// topicFiles are the plain files of one topic, one per volume, that the
// append ceiling's receivers write.
type topicFiles struct {
	mu    sync.Mutex
	files []*os.File
}

type allTopicFiles []*topicFiles

// openTopicFiles creates, under dir, the files of topics topics on each of
// volumes directories. The files opened are in the result even on error,
// to be closed.
func openTopicFiles(dir string, volumes, topics int) (allTopicFiles, error) {
	tf := make(allTopicFiles, topics)
	for t := range tf {
		tf[t] = &topicFiles{}
		for v := range volumes {
			vdir := filepath.Join(dir, fmt.Sprintf("vol%d", v+1))
			if err := os.MkdirAll(vdir, 0o755); err != nil {
				return tf, fmt.Errorf("%w: %w", ErrCeiling, err)
			}
			f, err := os.OpenFile(filepath.Join(vdir, fmt.Sprintf("topic%d.log", t)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
			if err != nil {
				return tf, fmt.Errorf("%w: %w", ErrCeiling, err)
			}
			tf[t].files = append(tf[t].files, f)
		}
	}
	return tf, nil
}

func (tf allTopicFiles) close() {
	for _, t := range tf {
		if t != nil {
			for _, f := range t.files {
				f.Close()
			}
		}
	}
}

// receiveChunks reads chunks of at most chunk bytes from c until it fails
// (EOF included), writes each to every file of t and acknowledges it.
func receiveChunks(c *net.TCPConn, t *topicFiles, chunk int, checked bool) error {
	buf := make([]byte, chunkHeader+chunk)
	var ack [8]byte
	for {
		if _, err := io.ReadFull(c, buf[:chunkHeader]); err != nil {
			return err
		}
		n := int(binary.LittleEndian.Uint32(buf))
		if n > chunk {
			return fmt.Errorf("chunk of %d bytes, max %d", n, chunk)
		}
		body := buf[chunkHeader : chunkHeader+n]
		if _, err := io.ReadFull(c, body); err != nil {
			return err
		}
		if checked && crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(buf[4:]) {
			return errors.New("chunk checksum mismatch")
		}
		t.mu.Lock()
		for _, f := range t.files {
			if _, err := f.Write(body); err != nil {
				t.mu.Unlock()
				return err
			}
		}
		t.mu.Unlock()
		if _, err := c.Write(ack[:]); err != nil {
			return err
		}
	}
}

// sendChunks sends quota bytes on c in chunks of at most chunk bytes, each
// waiting for its acknowledgement, and records each round trip in hist.
func sendChunks(ctx context.Context, c *net.TCPConn, chunk int, quota int64, checked bool, hist *hdrhistogram.Histogram) error {
	buf := make([]byte, chunkHeader+chunk)
	src := poolBytes(chunk)
	copy(buf[chunkHeader:], src)
	var ack [8]byte
	for left := quota; left > 0 && ctx.Err() == nil; {
		n := int(min(int64(chunk), left))
		binary.LittleEndian.PutUint32(buf, uint32(n))
		t0 := time.Now()
		if checked {
			copy(buf[chunkHeader:chunkHeader+n], src)
			binary.LittleEndian.PutUint32(buf[4:], crc32.Checksum(buf[chunkHeader:chunkHeader+n], castagnoli))
		}
		if _, err := c.Write(buf[:chunkHeader+n]); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, ack[:]); err != nil {
			return err
		}
		record(hist, time.Since(t0))
		left -= int64(n)
	}
	return nil
}

// writeCeilingFile writes a file of fileBytes under dir for the sendfile
// ceiling to send, and returns its path.
func writeCeilingFile(dir string, fileBytes int64) (string, error) {
	f, err := os.CreateTemp(dir, "haraqa-ceiling-*.log")
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrCeiling, err)
	}
	block := poolBytes(1 << 20)
	for left := fileBytes; left > 0; {
		n := min(int64(len(block)), left)
		if _, err := f.Write(block[:n]); err != nil {
			f.Close()
			os.Remove(f.Name())
			return "", fmt.Errorf("%w: %w", ErrCeiling, err)
		}
		left -= n
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("%w: %w", ErrCeiling, err)
	}
	return f.Name(), nil
}

// sendfileCeiling measures CeilingSendfile for a file of fileBytes
// written under dir, streams connections each sending its share.
func sendfileCeiling(ctx context.Context, dir string, streams int, fileBytes int64) (ceilingResult, error) {
	path, err := writeCeilingFile(dir, fileBytes)
	if err != nil {
		return ceilingResult{}, err
	}
	defer os.Remove(path)
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
	bufs := make([][]byte, streams)
	for i := range bufs {
		bufs[i] = make([]byte, 1<<20)
		for j := range bufs[i] { // touch the pages before the clock starts
			bufs[i][j] = 1
		}
	}
	secs, err := lb.drive(ctx, conns, nil, func(i int, c *net.TCPConn) error {
		for {
			n, err := c.Read(bufs[i])
			got[i] += int64(n)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
		}
	}, func() { close(begin) })
	if err != nil {
		return ceilingResult{}, err
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
	msgs := make([][]byte, pairs)
	for i := range hists {
		hists[i] = newHist()
		msgs[i] = make([]byte, size)
		copy(msgs[i], poolBytes(size))
	}
	acks := make([][8]byte, pairs)
	trip := func(i int, c *net.TCPConn) error {
		if _, err := c.Write(msgs[i]); err != nil {
			return err
		}
		_, err := io.ReadFull(c, acks[i][:])
		return err
	}
	secs, err := lb.drive(ctx, conns, func(i int, c *net.TCPConn) error {
		for range pingPongWarm {
			if err := trip(i, c); err != nil {
				return err
			}
		}
		return nil
	}, func(i int, c *net.TCPConn) error {
		quota := bound{messages: count}.share(i, pairs)
		for k := int64(0); k < quota && ctx.Err() == nil; k++ {
			t0 := time.Now()
			if err := trip(i, c); err != nil {
				return err
			}
			record(hists[i], time.Since(t0))
		}
		return nil
	}, nil)
	if err != nil {
		return ceilingResult{}, err
	}
	return ceilingResult{kind: CeilingPingPong, bytes: count * int64(size), seconds: secs, hist: mergeHists(hists...)}, nil
}
