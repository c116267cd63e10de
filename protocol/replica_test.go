package protocol

import (
	"bytes"
	"errors"
	"testing"
)

func TestReplicaFetchRoundTrip(t *testing.T) {
	req := ReplicaFetchRequest{Offset: 42, MaxBytes: 1 << 20, MaxWaitMs: 500, Epoch: 7, Topic: []byte("orders"), Follower: []byte("10.0.0.2:14353")}
	frame := AppendReplicaFetchRequest(nil, 3, req)
	h, p, err := ParseRequestHeader(frame)
	if err != nil || h.Op != OpReplicaFetch || h.CorrID != 3 {
		t.Fatalf("%+v %v", h, err)
	}
	got, err := ParseReplicaFetchRequest(p)
	if err != nil || got.Offset != 42 || got.MaxBytes != 1<<20 || got.MaxWaitMs != 500 || got.Epoch != 7 ||
		string(got.Topic) != "orders" || string(got.Follower) != "10.0.0.2:14353" {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []ReplicaFetchRequest{
		{Offset: -1, Epoch: 1, Topic: []byte("t"), Follower: []byte("f")},
		{Offset: 0, Epoch: 0, Topic: []byte("t"), Follower: []byte("f")},
		{Offset: 0, Epoch: 1, Topic: []byte("t")},
		{Offset: 0, Epoch: 1, Topic: []byte("../x"), Follower: []byte("f")},
	} {
		_, p, _ := ParseRequestHeader(AppendReplicaFetchRequest(nil, 1, bad))
		if _, err := ParseReplicaFetchRequest(p); err == nil {
			t.Errorf("%+v parsed", bad)
		}
	}
	if _, err := ParseReplicaFetchRequest(p[:len(p)-1]); err == nil {
		t.Error("a short request parsed")
	}

	batches := AppendBatch(nil, []byte("a"), []byte("b"))
	resp := ReplicaFetchResponse{StartOffset: 42, NextOffset: 50, HighWater: 44, Epoch: 7, BatchEpoch: 6}
	head := AppendReplicaFetchResponseHeader(nil, 3, resp, len(batches))
	if len(head) != ReplicaFetchResponseHeaderSize {
		t.Fatalf("header is %d bytes, want %d", len(head), ReplicaFetchResponseHeaderSize)
	}
	rh, rp, err := ParseResponseHeader(append(head, batches...))
	if err != nil || rh.Op != OpReplicaFetch || rh.Code != CodeOK {
		t.Fatalf("%+v %v", rh, err)
	}
	back, err := ParseReplicaFetchResponse(rp)
	resp.Batches = batches
	if err != nil || back.StartOffset != 42 || back.NextOffset != 50 || back.HighWater != 44 || back.Epoch != 7 || back.BatchEpoch != 6 || !bytes.Equal(back.Batches, batches) {
		t.Fatalf("%+v %v", back, err)
	}
	bad := bytes.Clone(rp)
	bad[40]++ // the size field
	if _, err := ParseReplicaFetchResponse(bad); !errors.Is(err, ErrMalformed) {
		t.Errorf("wrong size: %v", err)
	}
}

func TestEpochEndRoundTrip(t *testing.T) {
	_, p, err := ParseRequestHeader(AppendEpochEndRequest(nil, 1, "t", 9))
	if err != nil {
		t.Fatal(err)
	}
	topic, epoch, err := ParseEpochEndRequest(p)
	if err != nil || string(topic) != "t" || epoch != 9 {
		t.Fatalf("%s %d %v", topic, epoch, err)
	}
	_, p, err = ParseResponseHeader(AppendEpochEndResponse(nil, 1, 8, 1234))
	if err != nil {
		t.Fatal(err)
	}
	e, end, err := ParseEpochEndResponse(p)
	if err != nil || e != 8 || end != 1234 {
		t.Fatalf("%d %d %v", e, end, err)
	}
	if _, _, err := ParseEpochEndResponse(p[:15]); err == nil {
		t.Error("a short response parsed")
	}
}

func TestReplicaCodesNamed(t *testing.T) {
	for _, c := range []Code{CodeNotLeader, CodeNotEnoughReplicas, CodeFencedEpoch} {
		if c.String() == "" || c.String()[:5] == "code " {
			t.Errorf("code %d has no name", c)
		}
	}
	for _, op := range []Op{OpReplicaFetch, OpEpochEnd, OpClusterStatus, OpProducerOwners, OpClusterMember, OpLogEnds} {
		if !op.Valid() || op.String() == "unknown op" {
			t.Errorf("op %d", op)
		}
	}
}

func TestBatchProducer(t *testing.T) {
	b := AppendBatchMeta(nil, BatchMeta{ProducerID: 77, Sequence: 5}, []byte("a"))
	if pid, seq := BatchProducer(b); pid != 77 || seq != 5 {
		t.Fatalf("%d %d", pid, seq)
	}
	if pid, seq := BatchProducer(AppendBatch(nil, []byte("a"))); pid != 0 || seq != 0 {
		t.Fatalf("a batch without a producer: %d %d", pid, seq)
	}
	if pid, _ := BatchProducer(b[:BatchHeaderSize-1]); pid != 0 {
		t.Fatal("a short header gave a producer")
	}
}

func TestProducerOwnersRoundTrip(t *testing.T) {
	h, p, err := ParseRequestHeader(AppendProducerOwnersRequest(nil, 3, "t", []uint64{1, 1 << 63}))
	if err != nil || h.Op != OpProducerOwners {
		t.Fatal(h.Op, err)
	}
	topic, ids, err := ParseProducerOwnersRequest(p)
	if err != nil || string(topic) != "t" || len(ids) != 2 || ids[0] != 1 || ids[1] != 1<<63 {
		t.Fatalf("%s %v %v", topic, ids, err)
	}
	if _, _, err := ParseProducerOwnersRequest(p[:len(p)-1]); err == nil {
		t.Error("a short request parsed")
	}
	big := AppendProducerOwnersRequest(nil, 3, "t", make([]uint64, MaxOwnerQuery+1))
	if _, _, err := ParseProducerOwnersRequest(big[HeaderSize:]); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("%d ids: %v, want ErrInvalidArgument", MaxOwnerQuery+1, err)
	}
	_, p, err = ParseResponseHeader(AppendProducerOwnersResponse(nil, 3, map[uint64]string{7: "alice", 9: ""}))
	if err != nil {
		t.Fatal(err)
	}
	owners, err := ParseProducerOwnersResponse(p)
	if err != nil || len(owners) != 2 || owners[7] != "alice" || owners[9] != "" {
		t.Fatalf("%v %v", owners, err)
	}
	if _, err := ParseProducerOwnersResponse(p[:len(p)-2]); err == nil {
		t.Error("a short response parsed")
	}
}

// FuzzParseProducerOwners: neither parser panics or allocates past its
// bound, and what parses encodes back to the same bytes.
func FuzzParseProducerOwners(f *testing.F) {
	f.Add(AppendProducerOwnersRequest(nil, 1, "t", []uint64{5})[HeaderSize:])
	f.Add(AppendProducerOwnersResponse(nil, 1, map[uint64]string{5: "o"})[HeaderSize:])
	f.Fuzz(func(t *testing.T, payload []byte) {
		if topic, ids, err := ParseProducerOwnersRequest(payload); err == nil {
			if len(ids) > MaxOwnerQuery {
				t.Fatalf("%d ids parsed", len(ids))
			}
			if b := AppendProducerOwnersRequest(nil, 1, string(topic), ids)[HeaderSize:]; !bytes.Equal(b, payload) {
				t.Fatalf("re-encoded %x, parsed %x", b, payload)
			}
		}
		if owners, err := ParseProducerOwnersResponse(payload); err == nil {
			if len(owners) > MaxOwnerQuery {
				t.Fatalf("%d owners parsed", len(owners))
			}
			if len(owners) <= 1 {
				if b := AppendProducerOwnersResponse(nil, 1, owners)[HeaderSize:]; !bytes.Equal(b, payload) {
					t.Fatalf("re-encoded %x, parsed %x", b, payload)
				}
			}
		}
	})
}

func TestClusterMemberRoundTrip(t *testing.T) {
	_, p, err := ParseRequestHeader(AppendClusterMemberRequest(nil, 1, MemberAdd, "10.0.0.4:14353/4353/14355"))
	if err != nil {
		t.Fatal(err)
	}
	action, entry, err := ParseClusterMemberRequest(p)
	if err != nil || action != MemberAdd || string(entry) != "10.0.0.4:14353/4353/14355" {
		t.Fatalf("%d %s %v", action, entry, err)
	}
	for _, bad := range [][]byte{
		AppendClusterMemberRequest(nil, 1, 3, "x")[HeaderSize:],
		AppendClusterMemberRequest(nil, 1, MemberRemove, "")[HeaderSize:],
		AppendClusterMemberRequest(nil, 1, MemberRemove, string(make([]byte, 1025)))[HeaderSize:],
	} {
		if _, _, err := ParseClusterMemberRequest(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%x: %v, want ErrInvalidArgument", bad, err)
		}
	}
	if _, _, err := ParseClusterMemberRequest(p[:len(p)-1]); err == nil {
		t.Error("a short request parsed")
	}
}

func TestLogEndsRoundTrip(t *testing.T) {
	h, p, err := ParseRequestHeader(AppendLogEndsRequest(nil, 3, []string{"orders", "t"}))
	if err != nil || h.Op != OpLogEnds || h.CorrID != 3 {
		t.Fatal(h, err)
	}
	topics, err := ParseLogEndsRequest(p)
	if err != nil || len(topics) != 2 || string(topics[0]) != "orders" || string(topics[1]) != "t" {
		t.Fatalf("%q %v", topics, err)
	}
	want := []LogEnd{{Epoch: 4, Next: 1 << 40}, LogEndNone, {Epoch: 0, Next: 0}}
	_, p, err = ParseResponseHeader(AppendLogEndsResponse(nil, 3, want))
	if err != nil {
		t.Fatal(err)
	}
	ends, err := ParseLogEndsResponse(p)
	if err != nil || len(ends) != 3 || ends[0] != want[0] || ends[1] != want[1] || ends[2] != want[2] {
		t.Fatalf("%v %v", ends, err)
	}
}

// TestLogEndsBadInput: cut-short frames, counts past the bound or past
// the bytes, bad topic names and bad ends are refused, never a panic.
func TestLogEndsBadInput(t *testing.T) {
	req := AppendLogEndsRequest(nil, 1, []string{"orders", "t"})[HeaderSize:]
	for i := range len(req) {
		if _, err := ParseLogEndsRequest(req[:i]); err == nil {
			t.Errorf("a request cut to %d bytes parsed", i)
		}
	}
	many := make([]string, MaxLogEndsQuery+1)
	for i := range many {
		many[i] = "t"
	}
	u32 := func(n uint32) []byte { return appendU32(nil, n) }
	for _, bad := range []struct {
		what    string
		payload []byte
		want    error
	}{
		{"too many topics", AppendLogEndsRequest(nil, 1, many)[HeaderSize:], ErrInvalidArgument},
		{"no topic", u32(0), ErrInvalidArgument},
		{"a count past the bytes", append(u32(1<<31), req[4:]...), ErrInvalidArgument},
		{"a count past the bound, bytes to match", append(u32(MaxLogEndsQuery+1), make([]byte, 3*(MaxLogEndsQuery+1))...), ErrInvalidArgument},
		{"an empty name", append(u32(2), 0, 0, 2, 0, 'a', 'b'), ErrInvalidTopic},
		{"trailing bytes", append(append([]byte(nil), req...), 0), errTrailingPayload},
	} {
		if _, err := ParseLogEndsRequest(bad.payload); !errors.Is(err, bad.want) {
			t.Errorf("%s: %v, want %v", bad.what, err, bad.want)
		}
	}
	resp := AppendLogEndsResponse(nil, 1, []LogEnd{{Epoch: 2, Next: 9}})[HeaderSize:]
	for i := range len(resp) {
		if _, err := ParseLogEndsResponse(resp[:i]); err == nil {
			t.Errorf("a response cut to %d bytes parsed", i)
		}
	}
	for _, bad := range []struct {
		what    string
		payload []byte
	}{
		{"a count past the bytes", append(u32(1<<31), resp[4:]...)},
		{"a count past the bound", append(u32(MaxLogEndsQuery+1), make([]byte, logEndSize*(MaxLogEndsQuery+1))...)},
		{"a negative epoch", AppendLogEndsResponse(nil, 1, []LogEnd{{Epoch: -1, Next: 9}})[HeaderSize:]},
		{"a negative offset", AppendLogEndsResponse(nil, 1, []LogEnd{{Epoch: 1, Next: -2}})[HeaderSize:]},
		{"trailing bytes", append(append([]byte(nil), resp...), 0)},
	} {
		if _, err := ParseLogEndsResponse(bad.payload); err == nil {
			t.Errorf("%s: parsed", bad.what)
		}
	}
}

// FuzzParseLogEnds: neither parser panics or allocates past its bound,
// and what parses encodes back to the same bytes.
func FuzzParseLogEnds(f *testing.F) {
	f.Add(AppendLogEndsRequest(nil, 1, []string{"orders", "t"})[HeaderSize:])
	f.Add(AppendLogEndsResponse(nil, 1, []LogEnd{{Epoch: 3, Next: 7}, LogEndNone})[HeaderSize:])
	f.Fuzz(func(t *testing.T, payload []byte) {
		if topics, err := ParseLogEndsRequest(payload); err == nil {
			if len(topics) == 0 || len(topics) > MaxLogEndsQuery {
				t.Fatalf("%d topics parsed", len(topics))
			}
			names := make([]string, len(topics))
			for i, tp := range topics {
				names[i] = string(tp)
			}
			if b := AppendLogEndsRequest(nil, 1, names)[HeaderSize:]; !bytes.Equal(b, payload) {
				t.Fatalf("re-encoded %x, parsed %x", b, payload)
			}
		}
		if ends, err := ParseLogEndsResponse(payload); err == nil {
			if len(ends) > MaxLogEndsQuery {
				t.Fatalf("%d ends parsed", len(ends))
			}
			if b := AppendLogEndsResponse(nil, 1, ends)[HeaderSize:]; !bytes.Equal(b, payload) {
				t.Fatalf("re-encoded %x, parsed %x", b, payload)
			}
		}
	})
}
