package replica

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// storeLeader answers a follower's epoch questions from a leader's store,
// as the leader's op 18 does, and counts them.
type storeLeader struct {
	s     *storage.Store
	asked []int64
}

func (l *storeLeader) EpochEnd(_ context.Context, topic string, epoch int64) (int64, int64, error) {
	l.asked = append(l.asked, epoch)
	lg, err := l.s.Log(topic)
	if err != nil {
		return 0, 0, err
	}
	return lg.EpochEnd(epoch)
}

func openReplica(t *testing.T) *storage.Store {
	t.Helper()
	s, err := storage.Open(storage.DefaultOptions(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	return s
}

// lead records epoch at s's end, as a new leader does, and appends one
// batch of one message per name.
func lead(t *testing.T, s *storage.Store, epoch int64, names ...string) {
	t.Helper()
	info, err := lg(t, s, "t").Info()
	if err != nil {
		t.Fatal(err)
	}
	if err := lg(t, s, "t").SetEpoch(epoch, info.Next); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, err := lg(t, s, "t").Append(protocol.AppendBatch(nil, []byte(n)), storage.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// names returns "prefix0".."prefix(n-1)" from first on: prefix+first, ...
func names(prefix string, first, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, first+i)
	}
	return out
}

// logOf returns s's messages, offset by offset from its start.
func logOf(t *testing.T, s *storage.Store) []string {
	t.Helper()
	var out []string
	for _, b := range batchesOf(t, s, 0) {
		bt, _, err := protocol.ParseBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := protocol.Messages(bt.Body, bt.Count, bt.BaseOffset, func(_ int64, m []byte) error {
			out = append(out, string(m))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// batchesOf returns s's batches from offset on, each its own slice.
func batchesOf(t *testing.T, s *storage.Store, offset int64) [][]byte {
	t.Helper()
	r, err := lg(t, s, "t").Read(offset, 1<<20, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := r.AppendTo(nil)
	r.Release()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for len(raw) > 0 {
		_, n, err := protocol.ParseBatch(raw)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, raw[:n:n])
		raw = raw[n:]
	}
	return out
}

// follow truncates follower against leader as Manager.follow does before
// its first fetch, then copies the rest of the leader's log with the
// leader's epochs, as its fetches would, and checks both logs and epoch
// files end up the same. It returns the follower's log after the cut.
func follow(t *testing.T, follower, leader *storage.Store) (kept []string, asked []int64) {
	t.Helper()
	rl := newReplicaLog(New(follower, Config{Self: "f"}).shared, "t")
	l := &storeLeader{s: leader}
	if err := rl.truncate(context.Background(), l, lg(t, follower, "t")); err != nil {
		t.Fatal(err)
	}
	kept = logOf(t, follower)
	if want := logOf(t, leader); len(kept) > len(want) || !slices.Equal(kept, want[:len(kept)]) {
		t.Fatalf("after the cut the follower holds %q, not a prefix of the leader's %q", kept, want)
	}
	info, _ := lg(t, follower, "t").Info()
	les, _ := lg(t, leader, "t").Epochs()
	for _, b := range batchesOf(t, leader, info.Next) {
		bt, _, _ := protocol.ParseBatch(b)
		i, _ := slices.BinarySearchFunc(les, bt.BaseOffset+1, func(e storage.EpochStart, off int64) int {
			return int(e.Start - off)
		})
		es, _ := lg(t, follower, "t").Epochs()
		if e := les[i-1].Epoch; len(es) == 0 || es[len(es)-1].Epoch < e {
			if err := lg(t, follower, "t").SetEpoch(e, bt.BaseOffset); err != nil {
				t.Fatalf("recording the leader's epoch %d at %d: %v", e, bt.BaseOffset, err)
			}
		}
		if _, err := lg(t, follower, "t").Replicate([][]byte{b}); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := logOf(t, follower), logOf(t, leader); !slices.Equal(got, want) {
		t.Fatalf("after the copy the follower holds %q, the leader %q", got, want)
	}
	fes, _ := lg(t, follower, "t").Epochs()
	if !slices.Equal(fes, les) {
		t.Fatalf("after the copy the follower's epochs are %v, the leader's %v", fes, les)
	}
	return kept, l.asked
}

// KIP-101's first case: a follower restarts holding everything its
// leader acknowledged but with a high-water mark below it, and the leader
// dies. Cutting to the high-water mark would lose m8 and m9; asking the
// leader cuts nothing, so the follower that leads next has them (truncate
// is not given the mark at all).
func TestTruncateKeepsAcknowledged(t *testing.T) {
	leader, follower := openReplica(t), openReplica(t)
	for _, s := range []*storage.Store{leader, follower} {
		lead(t, s, 1, names("m", 0, 10)...)
	}
	kept, _ := follow(t, follower, leader)
	if len(kept) != 10 {
		t.Fatalf("the follower kept %d messages, want all 10", len(kept))
	}
}

// KIP-101's second case: the leader took m8 and m9 that its follower
// never copied, both crashed, the follower came back first and led epoch
// 2 from offset 8. The old leader, back as a follower, must cut its m8
// and m9 (which sit where the new leader has n8 and n9), not keep them
// because its high-water mark was past them.
func TestTruncateDivergedTail(t *testing.T) {
	oldLeader, newLeader := openReplica(t), openReplica(t)
	lead(t, oldLeader, 1, names("m", 0, 10)...)
	lead(t, newLeader, 1, names("m", 0, 8)...)
	lead(t, newLeader, 2, names("n", 8, 4)...)
	kept, asked := follow(t, oldLeader, newLeader)
	if len(kept) != 8 || !slices.Equal(asked, []int64{1}) {
		t.Fatalf("kept %q after asking about epochs %v; want m0-m7 after asking about 1", kept, asked)
	}
}

// KIP-279: a double failover leaves a follower whose last epoch (3) its
// leader never had, and an epoch (2) the leader had that the follower
// never had. Epoch 1's leader wrote m0-m9; A copied all ten, B only m0-m7.
// B led epoch 2 from 8 (b8-b11) and stopped before A copied any; A led
// epoch 3 from 10 (a10, a11) and stopped; B leads epoch 4 (b12, b13). A,
// asking about 3, hears "epoch 2, ended at 12": cutting to the lower of
// 12 and A's own end of its epoch below 2 (10) would keep m8 and m9 where
// B has b8 and b9. A must cut to 10 and ask about 1, then cut to 8.
func TestTruncateDoubleFailover(t *testing.T) {
	a, b := openReplica(t), openReplica(t)
	lead(t, a, 1, names("m", 0, 10)...)
	lead(t, a, 3, names("a", 10, 2)...)
	lead(t, b, 1, names("m", 0, 8)...)
	lead(t, b, 2, names("b", 8, 4)...)
	lead(t, b, 4, names("b", 12, 2)...)
	kept, asked := follow(t, a, b)
	if len(kept) != 8 || !slices.Equal(asked, []int64{3, 1}) {
		t.Fatalf("kept %q after asking about epochs %v; want m0-m7 after asking about 3, then 1", kept, asked)
	}
}

// A follower that led epoch 3 and took nothing keeps the epoch's record
// at its end. Its leader's log goes on from there under epoch 2 (which
// the follower never had): no batch is cut, but the record of 3 must go,
// or the copied batches of epoch 2 would be counted in epoch 3.
func TestTruncateEmptyEpoch(t *testing.T) {
	a, b := openReplica(t), openReplica(t)
	lead(t, a, 1, names("m", 0, 10)...)
	lead(t, a, 3)
	lead(t, b, 1, names("m", 0, 10)...)
	lead(t, b, 2, names("b", 10, 2)...)
	lead(t, b, 4, names("b", 12, 2)...)
	if kept, _ := follow(t, a, b); len(kept) != 10 {
		t.Fatalf("kept %q, want m0-m9", kept)
	}
}

// A log without any recorded epoch cannot be matched with the leader's:
// it is cut to its start and copied anew.
func TestTruncateNoEpochs(t *testing.T) {
	a, b := openReplica(t), openReplica(t)
	for _, n := range names("x", 0, 3) {
		if _, err := lg(t, a, "t").Append(protocol.AppendBatch(nil, []byte(n)), storage.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	lead(t, b, 1, names("m", 0, 5)...)
	if kept, asked := follow(t, a, b); len(kept) != 0 || len(asked) != 0 {
		t.Fatalf("kept %q after asking about %v; want nothing, unasked", kept, asked)
	}
}
