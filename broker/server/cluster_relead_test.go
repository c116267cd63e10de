package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
)

// TestClusterLeaderRestartsUnnoticed: a leader that dies and is back
// before the cluster finds it gone (a member timeout of a minute here)
// does not lead again under the epoch it led before: its log may end
// before what its followers copied (its machine lost its unsynced page
// cache), and batches taken at the same offsets under the same epoch
// would contradict theirs. It asks for a new epoch and leads under it,
// its followers cut back to its end of the old one, and every
// acknowledged message is on every replica.
func TestClusterLeaderRestartsUnnoticed(t *testing.T) {
	tc := startTestCluster(t, 3, 3, 2, noDetection)
	c := dialAll(t, tc.addrs, client.WithIdempotence(true))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const topic = "restarts"
	var acked []string
	st := seedTopic(t, ctx, tc, c, topic, 100, &acked)
	produce := producing(t, ctx, c, topic, &acked)
	leader, epoch := st.Leader, st.Epoch
	i := tc.index(leader)
	stop, stopCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer stopCancel()
	if err := tc.servers[i].ShutdownWithoutHandOff(stop); err != nil {
		t.Fatal(err)
	}
	tc.servers[i] = nil
	tc.start(i)
	st = waitTopic(t, dialOne(t, leader), topic, "the restarted leader leading under a new epoch", func(st topicStatus) bool {
		return st.Leader == leader && st.Epoch > epoch
	})
	if st.Epoch != epoch+1 {
		t.Fatalf("epoch %d after the restart, want %d: the lead moved meanwhile, which a member timeout of a minute should not allow", st.Epoch, epoch+1)
	}
	produce(100)
	waitTopic(t, dialOne(t, leader), topic, "200 messages on three replicas", func(st topicStatus) bool {
		return len(st.ISR) == 3 && st.HighWater == 200
	})
	for _, a := range tc.addrs {
		checkTopic(t, dialOne(t, a), topic, acked)
	}
}
