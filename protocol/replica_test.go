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
	for _, op := range []Op{OpReplicaFetch, OpEpochEnd, OpClusterStatus, OpProducerOwners, OpClusterMember} {
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
