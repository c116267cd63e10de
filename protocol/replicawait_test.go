package protocol

import (
	"bytes"
	"errors"
	"testing"
)

// goldenReplicaWait is the request drawn in doc.go: follower "f1", a wait
// of 500 ms, "orders" at epoch 3, offset 5, high water 4, and "t" left.
func goldenReplicaWait() ReplicaWaitRequest {
	return ReplicaWaitRequest{MaxWaitMs: 500, Follower: []byte("f1"), Topics: []ReplicaWaitTopic{
		{Epoch: 3, Offset: 5, HighWater: 4, Topic: []byte("orders")},
		{Epoch: 1, Flags: ReplicaWaitLeave, Topic: []byte("t")},
	}}
}

// goldenReplicaReady answers a wait on two topics: the first holds
// batches for the follower (high water 9), the second's high-water mark
// moved to 7.
var goldenReplicaReady = []ReplicaWaitReady{{Index: 0, Fetch: true, HighWater: 9}, {Index: 1, HighWater: 7}}

// TestReplicaWaitGolden pins the bytes of op 24 as doc.go draws them.
func TestReplicaWaitGolden(t *testing.T) {
	req := AppendReplicaWaitRequest(nil, 42, goldenReplicaWait())
	want := unhex(t, "51000000 01 18 0000 2a000000 f4010000 0200 6631 02000000"+
		" 0300000000000000 0500000000000000 0400000000000000 00 "+goldenOrders+
		" 0100000000000000 0000000000000000 0000000000000000 01 0100 74")
	if !bytes.Equal(req, want) {
		t.Fatalf("request\n got %x\nwant %x", req, want)
	}
	resp := AppendReplicaWaitResponse(nil, 42, goldenReplicaReady)
	want = unhex(t, "26000000 01 18 0000 2a000000 02000000 00000000 01 0900000000000000 01000000 00 0700000000000000")
	if !bytes.Equal(resp, want) {
		t.Fatalf("response\n got %x\nwant %x", resp, want)
	}
}

func TestReplicaWaitRoundTrip(t *testing.T) {
	h, p, err := ParseRequestHeader(AppendReplicaWaitRequest(nil, 42, goldenReplicaWait()))
	if err != nil || h.Op != OpReplicaWait || h.CorrID != 42 || OpReplicaWait.String() != "replica wait" {
		t.Fatal(h, err)
	}
	got, err := ParseReplicaWaitRequest(p)
	if err != nil || got.MaxWaitMs != 500 || string(got.Follower) != "f1" || len(got.Topics) != 2 {
		t.Fatalf("%+v %v", got, err)
	}
	if a, b := got.Topics[0], got.Topics[1]; string(a.Topic) != "orders" || a.Epoch != 3 || a.Offset != 5 || a.HighWater != 4 || a.Flags != 0 ||
		string(b.Topic) != "t" || b.Epoch != 1 || b.Flags != ReplicaWaitLeave {
		t.Fatalf("%+v", got.Topics)
	}
	_, rp, err := ParseResponseHeader(AppendReplicaWaitResponse(nil, 42, []ReplicaWaitReady{{Index: 1, Fetch: true, HighWater: -1}}))
	if err != nil {
		t.Fatal(err)
	}
	ready, err := ParseReplicaWaitResponse(rp, 2)
	if err != nil || len(ready) != 1 || ready[0] != (ReplicaWaitReady{Index: 1, Fetch: true, HighWater: -1}) {
		t.Fatalf("%v %v", ready, err)
	}
}

// TestReplicaWaitBadInput: cut-short payloads, counts past the bound or
// the bytes, bad fields and bad positions are refused, never a panic.
func TestReplicaWaitBadInput(t *testing.T) {
	req := AppendReplicaWaitRequest(nil, 1, goldenReplicaWait())[HeaderSize:]
	for i := range len(req) {
		if _, err := ParseReplicaWaitRequest(req[:i]); err == nil {
			t.Errorf("a request cut to %d bytes parsed", i)
		}
	}
	u32 := func(n uint32) []byte { return appendU32(nil, n) }
	head := append(u32(500), 2, 0, 'f', '1') // max wait, follower
	one := func(e ReplicaWaitTopic) []byte {
		return AppendReplicaWaitRequest(nil, 1, ReplicaWaitRequest{Follower: []byte("f"), Topics: []ReplicaWaitTopic{e}})[HeaderSize:]
	}
	many := ReplicaWaitRequest{Follower: []byte("f"), Topics: make([]ReplicaWaitTopic, MaxReplicaWaitTopics+1)}
	for i := range many.Topics {
		many.Topics[i] = ReplicaWaitTopic{Epoch: 1, Topic: []byte("t")}
	}
	for _, bad := range []struct {
		what    string
		payload []byte
		want    error
	}{
		{"too many topics", AppendReplicaWaitRequest(nil, 1, many)[HeaderSize:], ErrInvalidArgument},
		{"no topic", append(append([]byte(nil), head...), u32(0)...), ErrInvalidArgument},
		{"a count past the bytes", append(append(append([]byte(nil), head...), u32(1<<31)...), req[len(head)+4:]...), ErrInvalidArgument},
		{"a count past the bound, bytes to match", append(append(append([]byte(nil), head...), u32(MaxReplicaWaitTopics+1)...),
			make([]byte, replicaWaitEntryMin*(MaxReplicaWaitTopics+1))...), ErrInvalidArgument},
		{"no follower", AppendReplicaWaitRequest(nil, 1, ReplicaWaitRequest{Topics: goldenReplicaWait().Topics})[HeaderSize:], ErrInvalidArgument},
		{"a negative wait", AppendReplicaWaitRequest(nil, 1, ReplicaWaitRequest{MaxWaitMs: -1, Follower: []byte("f"), Topics: goldenReplicaWait().Topics})[HeaderSize:], ErrInvalidArgument},
		{"epoch 0", one(ReplicaWaitTopic{Topic: []byte("t")}), ErrInvalidArgument},
		{"a negative offset", one(ReplicaWaitTopic{Epoch: 1, Offset: -1, Topic: []byte("t")}), ErrInvalidArgument},
		{"a negative high water", one(ReplicaWaitTopic{Epoch: 1, HighWater: -1, Topic: []byte("t")}), ErrInvalidArgument},
		{"an unknown flag", one(ReplicaWaitTopic{Epoch: 1, Flags: 2, Topic: []byte("t")}), ErrInvalidArgument},
		{"a bad name", one(ReplicaWaitTopic{Epoch: 1, Topic: []byte("..")}), ErrInvalidTopic},
		{"trailing bytes", append(append([]byte(nil), req...), 0), errTrailingPayload},
	} {
		if _, err := ParseReplicaWaitRequest(bad.payload); !errors.Is(err, bad.want) {
			t.Errorf("%s: %v, want %v", bad.what, err, bad.want)
		}
	}
	resp := AppendReplicaWaitResponse(nil, 1, goldenReplicaReady)[HeaderSize:]
	for i := range len(resp) {
		if _, err := ParseReplicaWaitResponse(resp[:i], 2); err == nil {
			t.Errorf("a response cut to %d bytes parsed", i)
		}
	}
	for _, bad := range []struct {
		what    string
		payload []byte
		asked   int
	}{
		{"a count past the bytes", append(u32(1<<31), resp[4:]...), 2},
		{"more than asked", resp, 1},
		{"a position past the topics asked", AppendReplicaWaitResponse(nil, 1, []ReplicaWaitReady{{Index: 2}})[HeaderSize:], 2},
		{"out of order", AppendReplicaWaitResponse(nil, 1, []ReplicaWaitReady{{Index: 1}, {Index: 0}})[HeaderSize:], 2},
		{"twice", AppendReplicaWaitResponse(nil, 1, []ReplicaWaitReady{{Index: 1}, {Index: 1}})[HeaderSize:], 2},
		{"no high water without the fetch flag", AppendReplicaWaitResponse(nil, 1, []ReplicaWaitReady{{Index: 0, HighWater: -1}})[HeaderSize:], 2},
		{"a high water below -1", AppendReplicaWaitResponse(nil, 1, []ReplicaWaitReady{{Index: 0, Fetch: true, HighWater: -2}})[HeaderSize:], 2},
		{"an unknown flag", append(u32(1), 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0), 2},
		{"trailing bytes", append(append([]byte(nil), resp...), 0), 2},
	} {
		if _, err := ParseReplicaWaitResponse(bad.payload, bad.asked); err == nil {
			t.Errorf("%s: parsed", bad.what)
		}
	}
}

// FuzzParseReplicaWait: neither parser panics or allocates past its
// bound, and what parses encodes back to the same bytes.
func FuzzParseReplicaWait(f *testing.F) {
	f.Add(AppendReplicaWaitRequest(nil, 1, goldenReplicaWait())[HeaderSize:], 2)
	f.Add(AppendReplicaWaitResponse(nil, 1, goldenReplicaReady)[HeaderSize:], 2)
	f.Fuzz(func(t *testing.T, payload []byte, asked int) {
		if req, err := ParseReplicaWaitRequest(payload); err == nil {
			if len(req.Topics) == 0 || len(req.Topics) > MaxReplicaWaitTopics {
				t.Fatalf("%d topics parsed", len(req.Topics))
			}
			if b := AppendReplicaWaitRequest(nil, 1, req)[HeaderSize:]; !bytes.Equal(b, payload) {
				t.Fatalf("re-encoded %x, parsed %x", b, payload)
			}
		}
		if ready, err := ParseReplicaWaitResponse(payload, asked); err == nil {
			if len(ready) > MaxReplicaWaitTopics || len(ready) > max(asked, 0) {
				t.Fatalf("%d ready of %d parsed", len(ready), asked)
			}
			if b := AppendReplicaWaitResponse(nil, 1, ready)[HeaderSize:]; !bytes.Equal(b, payload) {
				t.Fatalf("re-encoded %x, parsed %x", b, payload)
			}
		}
	})
}
