package storage

import (
	"errors"
	"testing"

	"github.com/haraqa/haraqa/protocol"
)

// lg returns the handle on topic name's log, failing the test if there is
// none.
func lg(tb testing.TB, s *Store, name string) *Log {
	tb.Helper()
	l, err := s.Log(name)
	if err != nil {
		tb.Fatalf("log %q: %v", name, err)
	}
	return l
}

// ownedBy returns n AppendOptions of owner.
func ownedBy(owner string, n int) []AppendOptions {
	opts := make([]AppendOptions, n)
	for i := range opts {
		opts[i].Owner = owner
	}
	return opts
}

// TestLogAfterDelete: a handle held across its topic's deletion fails as a
// lookup by name would, and never reaches a topic created since under the
// same name; after Close it fails with ErrClosed.
func TestLogAfterDelete(t *testing.T) {
	s, _ := openTest(t, 2)
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	l := lg(t, s, "t")
	if l.Name() != "t" {
		t.Fatalf("name %q", l.Name())
	}
	if _, err := l.Append(protocol.AppendBatch(nil, msgs(0, 2)...), AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTopic("t"); err != nil {
		t.Fatal(err)
	}
	checkGone := func(when string, want error) {
		t.Helper()
		b := protocol.AppendBatch(nil, msgs(0, 1)...)
		_, appendErr := l.Append(b, AppendOptions{})
		_, manyErrs := l.AppendMany([][]byte{b}, nil)
		_, readErr := l.Read(0, 0, 1<<20)
		_, infoErr := l.Info()
		_, watchErr := l.Watch(0, func() {})
		errs := map[string]error{
			"Append":       appendErr,
			"AppendMany":   manyErrs[0],
			"AppendAsync":  l.AppendAsync(b, AppendOptions{}, nil, nil),
			"Read":         readErr,
			"Info":         infoErr,
			"Watch":        watchErr,
			"CommitOffset": l.CommitOffset("g", Commit{Offset: 0}),
			"SetEpoch":     l.SetEpoch(1, 0),
			"Truncate":     l.Truncate(1),
			"ReadOnly":     l.ReadOnly(),
		}
		for op, err := range errs {
			if !errors.Is(err, want) {
				t.Errorf("%s: %s: %v, want %v", when, op, err, want)
			}
		}
	}
	checkGone("deleted", ErrTopicNotFound)
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	checkGone("deleted and created again", ErrTopicNotFound)
	if info, err := lg(t, s, "t").Info(); err != nil || info.Next != 0 {
		t.Fatalf("the new topic: %+v, %v", info, err)
	}
	l = lg(t, s, "t")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkGone("closed", ErrClosed)
}

// TestLogMissing: looking up a topic that is not there.
func TestLogMissing(t *testing.T) {
	s, _ := openTest(t, 1)
	if _, err := s.Log("missing"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("missing topic: %v, want ErrTopicNotFound", err)
	}
	if _, err := s.Log("../x"); !errors.Is(err, ErrInvalidTopic) {
		t.Fatalf("bad name: %v, want ErrInvalidTopic", err)
	}
}

// TestValidateWithoutLog: a caller that finds a topic missing tells a
// batch or an import no topic would take from one that only lacks its
// topic, with the errors an append or an import would give.
func TestValidateWithoutLog(t *testing.T) {
	s, _ := openTest(t, 1)
	good := protocol.AppendBatch(nil, []byte("x"))
	if err := s.Validate("missing", good, AppendOptions{}); err != nil {
		t.Fatalf("a good batch: %v", err)
	}
	bad := protocol.AppendBatch(nil, []byte("x"))
	bad[len(bad)-1] ^= 1
	if err := s.Validate("missing", bad, AppendOptions{}); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("a bad batch: %v, want ErrInvalidBatch", err)
	}
	if err := s.ValidateImport("missing", -1, nil); !errors.Is(err, ErrInvalidImport) {
		t.Fatalf("an import at -1: %v, want ErrInvalidImport", err)
	}
	if err := s.ValidateImport("missing", 0, [][]byte{bad}); !errors.Is(err, ErrInvalidBatch) {
		t.Fatalf("an import of a bad batch: %v, want ErrInvalidBatch", err)
	}
	if s.HasTopic("missing") {
		t.Fatal("validation created the topic")
	}
}
