package replica

import (
	"errors"
	"testing"

	"github.com/haraqa/haraqa/storage"
)

// TestReplicaLogHandle: a replicated log looks its topic up once and
// works through that handle; once the topic was deleted under it and
// created anew (apply's ensureLog), it takes the new log's handle, never
// writing into the deleted one.
func TestReplicaLogHandle(t *testing.T) {
	s := openReplica(t)
	lead(t, s, 1, names("m", 0, 3)...)
	rl := newReplicaLog(New(s, Config{Self: "a"}).shared, "t")
	first, err := rl.handle()
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := rl.handle(); again != first {
		t.Fatal("a second call looked the topic up again")
	}
	if info, err := rl.info(); err != nil || info.Next != 3 {
		t.Fatalf("info through the handle: %+v, %v; want next 3", info, err)
	}
	if err := s.DeleteTopic("t"); err != nil {
		t.Fatal(err)
	}
	if _, err := rl.info(); !errors.Is(err, storage.ErrTopicNotFound) {
		t.Fatalf("info of the deleted log: %v, want not found", err)
	}
	if err := rl.ensureLog(); err != nil {
		t.Fatal(err)
	}
	if info, err := rl.info(); err != nil || info.Next != 0 {
		t.Fatalf("info once created anew: %+v, %v; want an empty log", info, err)
	}
	if l, _ := rl.handle(); l == first {
		t.Fatal("the handle of the deleted log is kept")
	}
}
