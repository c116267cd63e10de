package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

const (
	// maxMessageBytes is the largest message produce reads: just under the
	// server's default frame limit of 64 MiB, with room for the headers.
	maxMessageBytes = 64<<20 - 64<<10
	// batchBytes bounds the messages of one produce request read from
	// stdin; a larger message goes alone.
	batchBytes = 4 << 20
	// readBufferBytes is the initial buffer stdin is read into; it grows
	// for longer messages, up to maxMessageBytes.
	readBufferBytes = 1 << 20
)

var produceCmd = &command{
	name:    "produce",
	args:    "TOPIC [MESSAGE...]",
	opts:    "[-d DELIM | -0 | -raw] [-batch N] [-H KEY=VALUE]... [-v]",
	summary: "send messages: the arguments, or stdin one per line",
	help: `Sends each MESSAGE argument, or without them stdin: one message per line
(-d another delimiter, -0 NUL-delimited, -raw all of stdin as one message).
A delimiter at the very end of the input does not make an empty message; an
empty line in the middle does. Stdin is streamed: each request carries up to
-batch messages (and about 4 MiB), and lines are sent as soon as they are
read, so "tail -f log | hrqa produce logs" sends each line at once. A message
may be up to 64 MiB. The topic is created if it does not exist, also when
there is no message to send (empty stdin).

-H KEY=VALUE (repeatable) gives every message sent these headers, in order;
hrqa consume -format json shows them.

A request whose connection breaks is sent again on a new one and stored
once (idempotent produce). If a request fails for good, the messages before
it are stored and hrqa exits with 1; the failed request's messages may or
may not be stored.

Examples:
  hrqa produce orders '{"id":1}' '{"id":2}'
  seq 1 100000 | hrqa produce numbers
  find . -print0 | hrqa produce files -0
  hrqa produce images -raw < cat.png
  echo hello | hrqa produce greetings -v     # prints the offset of "hello"
  hrqa produce orders -H trace=abc -H ct=json '{"id":3}'`,
	setup: func(fs *flag.FlagSet) action {
		var d delimFlags
		d.register(fs, "ends")
		raw := fs.Bool("raw", false, "send all of stdin as one message")
		batch := fs.Int("batch", 1000, "most messages per request")
		verbose := fs.Bool("v", false, "print the offset of each message sent, one per line")
		var headers headerFlags
		fs.Var(&headers, "H", "KEY=VALUE: a header for every message; repeat for more")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) == 0 {
				return usagef("missing TOPIC")
			}
			topic, msgs := args[0], args[1:]
			delim, err := d.bytes(fs)
			switch {
			case err != nil:
				return err
			case *raw && (isSet(fs, "d") || d.nul):
				return usagef("-raw excludes -d and -0")
			case *raw && len(msgs) > 0:
				return usagef("-raw reads stdin and takes no MESSAGE arguments")
			case *batch < 1:
				return usagef("-batch must be at least 1, got %d", *batch)
			}
			c, err := e.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			p := &producer{c: c, topic: topic, maxMsgs: *batch, headers: headers}
			out := bufio.NewWriter(e.stdout)
			if *verbose {
				p.out = out
			}
			switch {
			case len(msgs) > 0:
				err = p.sendArgs(ctx, msgs)
			case *raw:
				hintTerminal(e, "reading one message from stdin; end it with Ctrl-D")
				err = p.sendRaw(ctx, e.stdin)
			default:
				hintTerminal(e, "reading messages from stdin, one per line; end with Ctrl-D")
				err = p.sendStream(ctx, e.stdin, delim)
			}
			if err == nil && p.sent == 0 {
				// No message: still create the topic, as promised.
				if err = c.CreateTopic(ctx, topic); errors.Is(err, client.ErrTopicExists) {
					err = nil
				}
			}
			if ferr := out.Flush(); err == nil {
				err = ferr
			}
			return explain(err, topic)
		}
	},
}

// hintTerminal tells a person typing at a terminal how the input ends.
func hintTerminal(e *env, hint string) {
	if f, ok := e.stdin.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			fmt.Fprintf(e.stderr, "hrqa: %s\n", hint)
		}
	}
}

// producer sends messages to one topic in requests of at most maxMsgs.
type producer struct {
	c       *client.Client
	topic   string
	maxMsgs int
	headers []client.Header // given to every message; nil: none
	out     *bufio.Writer   // the offsets are printed here; nil: not printed
	sent    int             // messages acknowledged
}

// send sends msgs in one request.
func (p *producer) send(ctx context.Context, msgs [][]byte) error {
	var base int64
	var err error
	if len(p.headers) == 0 {
		base, err = p.c.Produce(ctx, p.topic, msgs...)
	} else {
		ms := make([]client.Message, len(msgs))
		for i, m := range msgs {
			ms[i] = client.Message{Value: m, Headers: p.headers}
		}
		base, err = p.c.ProduceMessages(ctx, p.topic, ms...)
	}
	if err != nil {
		return err
	}
	p.sent += len(msgs)
	if p.out == nil {
		return nil
	}
	for i := range msgs {
		fmt.Fprintln(p.out, base+int64(i))
	}
	return p.out.Flush()
}

func (p *producer) sendArgs(ctx context.Context, args []string) error {
	msgs := make([][]byte, len(args))
	for i, a := range args {
		msgs[i] = []byte(a)
	}
	for len(msgs) > 0 {
		n := min(len(msgs), p.maxMsgs)
		if err := p.send(ctx, msgs[:n]); err != nil {
			return err
		}
		msgs = msgs[n:]
	}
	return nil
}

func (p *producer) sendRaw(ctx context.Context, r io.Reader) error {
	msg, err := io.ReadAll(io.LimitReader(r, maxMessageBytes+1))
	if err != nil {
		return fmt.Errorf("reading stdin: %w", err)
	}
	if len(msg) > maxMessageBytes {
		return failf(client.ErrFrameTooLarge, "stdin holds more than %d bytes, the largest message", maxMessageBytes)
	}
	return p.send(ctx, [][]byte{msg})
}

// sendStream sends the messages of r, split at delim, while a goroutine
// reads the next batch.
func (p *producer) sendStream(ctx context.Context, r io.Reader, delim []byte) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the reader if a request fails
	out := make(chan *batch, 1)
	free := make(chan *batch, 2)
	free <- new(batch)
	free <- new(batch)
	bt := &batcher{ctx: ctx, cur: new(batch), out: out, free: free, maxMsgs: p.maxMsgs, maxBytes: batchBytes}
	readErr := make(chan error, 1)
	go func() {
		err := bt.read(r, delim)
		close(out)
		readErr <- err
	}()
	for {
		select {
		case b, ok := <-out:
			if !ok {
				return <-readErr
			}
			if err := p.send(ctx, b.messages()); err != nil {
				return err
			}
			b.reset()
			free <- b
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// batch is messages stored back to back.
type batch struct {
	data []byte
	ends []int // end of each message in data
	msgs [][]byte
}

func (b *batch) add(m []byte) {
	b.data = append(b.data, m...)
	b.ends = append(b.ends, len(b.data))
}

func (b *batch) len() int { return len(b.ends) }

// messages returns the messages; they live until reset.
func (b *batch) messages() [][]byte {
	b.msgs = b.msgs[:0]
	start := 0
	for _, end := range b.ends {
		b.msgs = append(b.msgs, b.data[start:end:end])
		start = end
	}
	return b.msgs
}

func (b *batch) reset() {
	b.data, b.ends, b.msgs = b.data[:0], b.ends[:0], b.msgs[:0]
}

// batcher splits a stream into messages and groups them into batches of at
// most maxMsgs messages and about maxBytes, handed over on out; handed-over
// batches come back on free. The batch it holds is handed over before each
// read of the stream, which may block, so lines that arrive slowly are sent
// at once rather than when a batch fills.
type batcher struct {
	ctx               context.Context
	cur               *batch
	out               chan<- *batch
	free              chan *batch
	maxMsgs, maxBytes int
}

// read splits r at delim until its end, then hands over the last batch.
func (bt *batcher) read(r io.Reader, delim []byte) error {
	sc := bufio.NewScanner(handOverReader{r: r, bt: bt})
	sc.Buffer(make([]byte, 0, readBufferBytes), maxMessageBytes)
	sc.Split(splitAt(delim))
	n := 0
	for sc.Scan() {
		m := sc.Bytes()
		if bt.cur.len() > 0 && len(bt.cur.data)+len(m) > bt.maxBytes {
			if err := bt.handOver(); err != nil {
				return err
			}
		}
		bt.cur.add(m)
		n++
		if bt.cur.len() >= bt.maxMsgs {
			if err := bt.handOver(); err != nil {
				return err
			}
		}
	}
	err := sc.Err()
	if errors.Is(err, bufio.ErrTooLong) {
		err = failf(err, "message %d is longer than %d bytes, the largest message", n+1, maxMessageBytes)
	} else if err != nil && bt.ctx.Err() == nil {
		err = fmt.Errorf("reading stdin: %w", err)
	}
	// The messages before a read error are sent, then the error reported.
	return errors.Join(err, bt.handOver())
}

// handOver passes the current batch, if it holds messages, to the sender
// and takes a free one.
func (bt *batcher) handOver() error {
	if bt.cur.len() == 0 {
		return nil
	}
	select {
	case bt.out <- bt.cur:
	case <-bt.ctx.Done():
		return bt.ctx.Err()
	}
	select {
	case bt.cur = <-bt.free:
		return nil
	case <-bt.ctx.Done():
		return bt.ctx.Err()
	}
}

// handOverReader hands over the batcher's batch before each read.
type handOverReader struct {
	r  io.Reader
	bt *batcher
}

func (h handOverReader) Read(p []byte) (int, error) {
	if err := h.bt.handOver(); err != nil {
		return 0, err
	}
	return h.r.Read(p)
}

// splitAt is a bufio.SplitFunc that splits at delim. The final message
// needs no delimiter, and a delimiter at the very end makes no empty one.
func splitAt(delim []byte) bufio.SplitFunc {
	// searched counts the bytes at the start of data already known to hold
	// no delimiter, so a long message is scanned once, not once per read.
	searched := 0
	return func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.Index(data[searched:], delim); i >= 0 {
			i += searched
			searched = 0
			return i + len(delim), data[:i], nil
		}
		if atEOF && len(data) > 0 {
			searched = 0
			return len(data), data, nil
		}
		searched = max(0, len(data)-len(delim)+1)
		return 0, nil, nil
	}
}

// headerFlags collects -H KEY=VALUE flags.
type headerFlags []client.Header

func (h *headerFlags) String() string { return "" }

func (h *headerFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	switch {
	case !ok:
		return fmt.Errorf("%q is not KEY=VALUE", s)
	case len(k) == 0 || len(k) > protocol.MaxHeaderKeyLen:
		return fmt.Errorf("header key %q must be 1 to %d bytes", k, protocol.MaxHeaderKeyLen)
	case len(v) > protocol.MaxHeaderValueLen:
		return fmt.Errorf("header %q: value of %d bytes, at most %d", k, len(v), protocol.MaxHeaderValueLen)
	case len(*h) >= protocol.MaxHeaders:
		return fmt.Errorf("at most %d headers", protocol.MaxHeaders)
	}
	*h = append(*h, client.Header{Key: k, Value: []byte(v)})
	return nil
}
