package storage

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

func TestTopicStatsCountTraffic(t *testing.T) {
	var fsyncs atomic.Int64
	s, opts := openTest(t, 2, func(o *Options) {
		o.Fsync = FsyncAlways
		o.OnFsync = func(d time.Duration) {
			if d < 0 {
				t.Errorf("negative fsync duration %v", d)
			}
			fsyncs.Add(1)
		}
	})
	for _, name := range []string{"b", "a"} {
		if err := s.CreateTopic(name); err != nil {
			t.Fatal(err)
		}
	}
	var produced int64
	for i := 0; i < 3; i++ {
		batch := protocol.AppendBatch(nil, msgs(i*4, 4)...)
		produced += int64(len(batch))
		if _, err := lg(t, s, "a").Append(batch, AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := lg(t, s, "a").Read(2, 5, 0) // offsets 2..6 of batches [0,4) and [4,8)
	if err != nil {
		t.Fatal(err)
	}
	readBytes := r.Bytes
	r.Release()

	st := s.TopicStats()
	if len(st) != 2 || st[0].Name != "a" || st[1].Name != "b" {
		t.Fatalf("TopicStats = %+v, want a then b", st)
	}
	a := st[0]
	if a.ProducedMessages != 12 || a.ProducedBytes != produced {
		t.Errorf("produced %d messages, %d bytes; want 12, %d", a.ProducedMessages, a.ProducedBytes, produced)
	}
	if a.ConsumedMessages != 5 || a.ConsumedBytes != readBytes {
		t.Errorf("consumed %d messages, %d bytes; want 5, %d", a.ConsumedMessages, a.ConsumedBytes, readBytes)
	}
	if a.Next != 12 || a.Bytes != produced || a.Segments != 1 {
		t.Errorf("info %+v: want next 12, %d bytes, 1 segment (entries %d)", a.TopicInfo, produced, opts.Entries)
	}
	if st[1].ProducedMessages != 0 || st[1].ConsumedMessages != 0 {
		t.Errorf("idle topic b counts traffic: %+v", st[1])
	}
	// Every append fsyncs each of the 2 volumes.
	if n := fsyncs.Load(); n < 6 {
		t.Errorf("OnFsync called %d times, want at least 6", n)
	}
	if got := s.Volumes(); len(got) != 2 || got[1] != opts.Volumes[1] {
		t.Errorf("Volumes() = %v", got)
	}
}

// TestTopicStatsReplicaTraffic: a follower's copies count as replicated,
// not produced, across segment rolls and under either fsync policy; a
// leader's reads for its followers count as replica reads, not consumed;
// Peek counts nowhere.
func TestTopicStatsReplicaTraffic(t *testing.T) {
	for _, policy := range []FsyncPolicy{FsyncNever, FsyncAlways} {
		t.Run(policy.String(), func(t *testing.T) {
			small := func(o *Options) { o.Fsync = policy; o.Entries = 4 }
			leader, _, batches := leaderLog(t, 40, small)
			follower, _ := openTest(t, 2, small)
			if err := follower.CreateTopic("r"); err != nil {
				t.Fatal(err)
			}
			var bytes, n int64
			for _, b := range batches {
				bytes += int64(len(b))
				n += int64(countOf(t, b))
			}
			before := leader.TopicStats()[0] // rawBatches read the log
			if _, err := lg(t, follower, "r").Replicate(batches); err != nil {
				t.Fatal(err)
			}
			f := follower.TopicStats()[0]
			if f.ProducedMessages != 0 || f.ProducedBytes != 0 {
				t.Errorf("follower produced %d messages, %d bytes; want none", f.ProducedMessages, f.ProducedBytes)
			}
			if f.ReplicatedMessages != n || f.ReplicatedBytes != bytes || f.Segments < 2 {
				t.Errorf("follower replicated %d messages, %d bytes in %d segments; want %d, %d, several", f.ReplicatedMessages, f.ReplicatedBytes, f.Segments, n, bytes)
			}

			r, err := lg(t, leader, "r").ReadReplica(0, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			r.Release()
			if r, err = lg(t, leader, "r").Peek(0, 0, 0); err != nil {
				t.Fatal(err)
			}
			if len(r.Spans) != 0 || r.Bytes != bytes || r.Next != n {
				t.Errorf("Peek: %d spans, %d bytes, next %d; want no span, %d bytes, next %d", len(r.Spans), r.Bytes, r.Next, bytes, n)
			}
			r.Release()
			l := leader.TopicStats()[0]
			if l.ProducedMessages != n || l.ProducedBytes != bytes || l.ReplicatedMessages != 0 {
				t.Errorf("leader produced %d messages, %d bytes, replicated %d; want %d, %d, 0", l.ProducedMessages, l.ProducedBytes, l.ReplicatedMessages, n, bytes)
			}
			if l.ConsumedMessages != before.ConsumedMessages || l.ConsumedBytes != before.ConsumedBytes {
				t.Errorf("leader consumed %d messages, %d bytes, %+v before replica reads and a peek; want no change", l.ConsumedMessages, l.ConsumedBytes, before)
			}
			if l.ReplicaReadMessages != n || l.ReplicaReadBytes != bytes {
				t.Errorf("leader read %d messages, %d bytes for followers; want %d, %d", l.ReplicaReadMessages, l.ReplicaReadBytes, n, bytes)
			}
		})
	}
}
