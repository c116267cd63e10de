package broker_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// TestLongPollWakeup: a consume at the end with a long max wait is answered
// as soon as another connection produces, well before the wait ends.
func TestLongPollWakeup(t *testing.T) {
	s := brokertest.Start(t, 1)
	p := dialRaw(t, s.Addr)
	p.produce("poll", protocol.ProduceCreateTopic, "before")

	c := dialRaw(t, s.Addr)
	c.write(protocol.AppendConsumeRequest(nil, 5, "poll", 1, 0, 0, 8000))
	// A request behind the parked poll waits its turn.
	c.write(protocol.AppendPingRequest(nil, 6))
	waitFor(t, "the poll to park", func() bool { return s.Broker.Stats().ParkedPolls == 1 })

	start := time.Now()
	p.produce("poll", 0, "after")
	r := c.read()
	took := time.Since(start)
	if r.CorrID != 5 || r.Code != protocol.CodeOK {
		t.Fatalf("long poll answer %+v %s", r.ResponseHeader, r.errMsg())
	}
	cr, err := protocol.ParseConsumeResponse(r.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if got := messagesIn(t, cr, 0); cr.StartOffset != 1 || cr.NextOffset != 2 || len(got) != 1 || got[0].Data != "after" {
		t.Fatalf("long poll got start %d next %d %+v", cr.StartOffset, cr.NextOffset, got)
	}
	if took > 2*time.Second {
		t.Fatalf("long poll answered %s after the produce (max wait 8s)", took)
	}
	t.Logf("woken %s after the produce", took)
	if r := c.read(); r.CorrID != 6 || r.Op != protocol.OpPing {
		t.Fatalf("request behind the poll: %+v", r.ResponseHeader)
	}
	if n := s.Broker.Stats().ParkedPolls; n != 0 {
		t.Fatalf("%d polls still parked", n)
	}
}

// TestLongPollTimeout: with nothing produced, the poll is answered empty
// once its max wait is over; a poll on a connection that goes away is
// released.
func TestLongPollTimeout(t *testing.T) {
	s := brokertest.Start(t, 1)
	c := dialRaw(t, s.Addr)
	c.produce("idle", protocol.ProduceCreateTopic, "x")

	const wait = 300 * time.Millisecond
	start := time.Now()
	cr := c.consume("idle", 1, 0, 0, int32(wait/time.Millisecond))
	took := time.Since(start)
	if cr.StartOffset != 1 || cr.NextOffset != 1 || len(cr.Batches) != 0 {
		t.Fatalf("timed out poll %+v", cr)
	}
	if took < wait-20*time.Millisecond || took > wait+3*time.Second {
		t.Fatalf("poll with max wait %s answered after %s", wait, took)
	}
	t.Logf("max wait %s, answered after %s", wait, took)

	// A negative offset resolves before parking: -1 on a topic of one
	// message is offset 0, answered at once.
	if cr := c.consume("idle", -1, 0, 0, 5000); cr.StartOffset != 0 || len(cr.Batches) == 0 {
		t.Fatalf("poll at -1: %+v", cr)
	}

	// Connection closed while parked: the poll goes away.
	d := dialRaw(t, s.Addr)
	d.write(protocol.AppendConsumeRequest(nil, 1, "idle", 1, 0, 0, 60000))
	waitFor(t, "the poll to park", func() bool { return s.Broker.Stats().ParkedPolls == 1 })
	d.conn.Close()
	waitFor(t, "the poll to be released", func() bool { return s.Broker.Stats().ParkedPolls == 0 })

	// Deleting the topic answers its parked polls.
	d = dialRaw(t, s.Addr)
	d.write(protocol.AppendConsumeRequest(nil, 2, "idle", 1, 0, 0, 60000))
	waitFor(t, "the poll to park", func() bool { return s.Broker.Stats().ParkedPolls == 1 })
	c.ok(protocol.AppendDeleteTopicRequest(nil, c.id(), "idle"))
	if r := d.read(); r.CorrID != 2 || r.Code != protocol.CodeTopicNotFound {
		t.Fatalf("poll on a deleted topic: %+v %s", r.ResponseHeader, r.errMsg())
	}
}

// produceSpread fills topic with batches of 1 to 7 messages, returning the
// messages in offset order.
func produceSpread(c *rawConn, topic string, batches int) []string {
	var all []string
	for i := range batches {
		msgs := make([]string, 1+i%7)
		for j := range msgs {
			msgs[j] = fmt.Sprintf("%s-%d-%d-%s", topic, i, j, bytes.Repeat([]byte{'z'}, (i*31+j)%200))
		}
		pr := c.produce(topic, protocol.ProduceCreateTopic, msgs...)
		if pr.BaseOffset != int64(len(all)) {
			c.tb.Fatalf("batch %d at offset %d, want %d", i, pr.BaseOffset, len(all))
		}
		all = append(all, msgs...)
	}
	return all
}

// storedBytes returns the batches the store holds for [offset, end), as the
// server's own storage reads them.
func storedBytes(t *testing.T, s *brokertest.Server, topic string, offset int64) []byte {
	r, err := s.Log(t, topic).Read(offset, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	b, err := r.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConsumeSpanningSegments: with 10 messages per segment, one consume
// spans many segment files and is byte-identical to the stored batches;
// ranges that start and end inside segments hold the right messages.
func TestConsumeSpanningSegments(t *testing.T) {
	s := brokertest.Start(t, 2, withEntries(10))
	c := dialRaw(t, s.Addr)
	all := produceSpread(c, "seg", 60)
	info := c.info("seg")
	if info.Segments < 10 || info.NextOffset != int64(len(all)) {
		t.Fatalf("info %+v: want >= 10 segments and %d messages", info, len(all))
	}

	cr := c.consume("seg", 0, 0, 64<<20, 0)
	if want := storedBytes(t, s, "seg", 0); !bytes.Equal(cr.Batches, want) {
		t.Fatalf("consume of the whole topic: %d bytes, stored %d, not identical", len(cr.Batches), len(want))
	}
	got := messagesIn(t, cr, 0)
	if !slices.Equal(msgData(got), all) {
		t.Fatalf("consumed %d messages, want %d", len(got), len(all))
	}
	for i, m := range got {
		if m.Offset != int64(i) {
			t.Fatalf("message %d has offset %d", i, m.Offset)
		}
	}

	for _, tc := range []struct{ offset, limit int }{
		{7, 20}, {9, 2}, {10, 10}, {33, 77}, {len(all) - 3, 100}, {1, 1}, {0, len(all)},
	} {
		cr := c.consume("seg", int64(tc.offset), int32(tc.limit), 0, 0)
		want := all[tc.offset:min(tc.offset+tc.limit, len(all))]
		if got := msgData(messagesIn(t, cr, tc.limit)); !slices.Equal(got, want) {
			t.Errorf("offset %d limit %d: got %d messages %q..., want %d", tc.offset, tc.limit, len(got), got[:min(2, len(got))], len(want))
		}
		if !bytes.HasPrefix(storedBytes(t, s, "seg", cr.StartOffset), cr.Batches) {
			t.Errorf("offset %d limit %d: batches are not the stored bytes", tc.offset, tc.limit)
		}
	}
	// Reading on from each response's last message walks the whole topic.
	var walked []string
	for off := int64(0); off < int64(len(all)); {
		ms := messagesIn(t, c.consume("seg", off, 13, 0, 0), 13)
		if len(ms) == 0 {
			t.Fatalf("no progress at offset %d", off)
		}
		walked = append(walked, msgData(ms)...)
		off = ms[len(ms)-1].Offset + 1
	}
	if !slices.Equal(walked, all) {
		t.Fatalf("walking the topic read %d messages, want %d", len(walked), len(all))
	}
}

// TestConsumeMaxBytes: a response holds whole batches up to max bytes, but
// always at least one.
func TestConsumeMaxBytes(t *testing.T) {
	s := brokertest.Start(t, 1, withEntries(10))
	c := dialRaw(t, s.Addr)
	var sizes []int
	for i := range 12 {
		bt := batchOf(string(bytes.Repeat([]byte{byte('a' + i)}, 500)), "tail")
		c.ok(protocol.AppendProduceRequest(nil, c.id(), "mb", protocol.ProduceCreateTopic, bt))
		sizes = append(sizes, len(bt))
	}
	for _, tc := range []struct {
		maxBytes int32
		batches  int
	}{
		{1, 1},
		{int32(sizes[0]) - 1, 1},
		{int32(sizes[0]), 1},
		{int32(sizes[0]) + 1, 1},
		{int32(2 * sizes[0]), 2},
		{int32(5*sizes[0]) + 10, 5},
		{0, 12},  // the server's default
		{-1, 12}, // likewise
	} {
		for _, offset := range []int64{0, 1, 9, 10} {
			cr := c.consume("mb", offset, 0, tc.maxBytes, 0)
			nb := 0
			for b := cr.Batches; len(b) > 0; nb++ {
				_, n, err := protocol.ParseBatch(b)
				if err != nil {
					t.Fatal(err)
				}
				b = b[n:]
			}
			want := min(tc.batches, 12-int(offset/2))
			if nb != want || (tc.maxBytes > 0 && nb > 1 && len(cr.Batches) > int(tc.maxBytes)) {
				t.Errorf("max bytes %d from %d: %d batches (%d bytes), want %d", tc.maxBytes, offset, nb, len(cr.Batches), want)
			}
			if ms := messagesIn(t, cr, 0); len(ms) == 0 || ms[0].Offset != offset {
				t.Errorf("max bytes %d from %d: first message %+v", tc.maxBytes, offset, ms)
			}
		}
	}
}

// TestRestartReadBack: data written before a restart reads back identical
// after it, and the topic goes on from where it was.
func TestRestartReadBack(t *testing.T) {
	for _, p := range []storage.FsyncPolicy{storage.FsyncNever, storage.FsyncAlways} {
		t.Run("fsync="+p.String(), func(t *testing.T) {
			s := brokertest.Start(t, 3, withEntries(10), withFsync(p))
			c := dialRaw(t, s.Addr)
			a := produceSpread(c, "keep", 30)
			b := produceSpread(c, "also", 5)
			c.truncate("also", protocol.TruncateByOffset, 4)
			before := c.consume("keep", 0, 0, 64<<20, 0).Batches
			infoKeep, infoAlso := c.info("keep"), c.info("also")

			s2, err := s.Restart()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s2.Close() })
			c = dialRaw(t, s2.Addr)
			if got := c.list("", ""); !slices.Equal(got, []string{"also", "keep"}) {
				t.Fatalf("topics after restart %q", got)
			}
			if got := c.info("keep"); got != infoKeep {
				t.Fatalf("info after restart %+v, before %+v", got, infoKeep)
			}
			if got := c.info("also"); got != infoAlso {
				t.Fatalf("info of a truncated topic after restart %+v, before %+v", got, infoAlso)
			}
			after := c.consume("keep", 0, 0, 64<<20, 0).Batches
			if !bytes.Equal(after, before) {
				t.Fatalf("after restart read %d bytes, before %d: not identical", len(after), len(before))
			}
			if got := msgData(messagesIn(t, c.consume("keep", 0, 0, 64<<20, 0), 0)); !slices.Equal(got, a) {
				t.Fatalf("messages differ after restart")
			}
			if got := msgData(messagesIn(t, c.consume("also", 4, 0, 0, 0), 0)); !slices.Equal(got, b[4:]) {
				t.Fatalf("truncated topic after restart read %q", got)
			}
			if pr := c.produce("keep", 0, "more"); pr.BaseOffset != int64(len(a)) {
				t.Fatalf("produce after restart at %d, want %d", pr.BaseOffset, len(a))
			}
		})
	}
}
