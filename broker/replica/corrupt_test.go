package replica

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// TestFollowerRefusesCorruptBatch: a fetch answer whose batch fails its
// CRC (a bit flipped on the way, or in the leader's page cache) is
// refused whole and nothing of it is stored; the follow loop fetches the
// same offset again (any error starts it over), and the batches stored
// then are the leader's, byte for byte.
func TestFollowerRefusesCorruptBatch(t *testing.T) {
	leader, follower := openReplica(t), openReplica(t)
	lead(t, leader, 1, names("m", 0, 8)...)
	rl := newReplicaLog(New(follower, Config{Self: "f"}).shared, "t")
	var raw []byte
	for _, b := range batchesOf(t, leader, 0) {
		raw = append(raw, b...)
	}
	bad := slices.Clone(raw)
	bad[len(bad)-1] ^= 0x40 // the last message's value: the frame holds, the CRC does not
	ctx := context.Background()
	if _, err := rl.storeFetched(ctx, nil, lg(t, follower, "t"), protocol.ReplicaFetchResponse{Batches: bad, BatchEpoch: 1}, map[uint64]bool{}); !errors.Is(err, storage.ErrInvalidBatch) {
		t.Fatalf("a corrupt answer stored: %v", err)
	}
	if info, _ := lg(t, follower, "t").Info(); info.Next != 0 {
		t.Fatalf("after the refused answer the follower's next offset is %d, want 0", info.Next)
	}
	next, err := rl.storeFetched(ctx, nil, lg(t, follower, "t"), protocol.ReplicaFetchResponse{Batches: raw, BatchEpoch: 1}, map[uint64]bool{})
	if err != nil || next != 8 {
		t.Fatalf("the good answer: next %d, %v", next, err)
	}
	if got, want := batchesOf(t, follower, 0), batchesOf(t, leader, 0); !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatal("the follower's batches are not the leader's bytes")
	}
}
