package service

import (
	"errors"
	"testing"

	"github.com/haraqa/haraqa/storage"
)

// TestProduceMissingTopic: a produce to a missing topic fails a batch no
// topic would take as invalid and creates nothing for it, and creates
// the topic for a good batch that asks for it; an import that no topic
// would take creates nothing either.
func TestProduceMissingTopic(t *testing.T) {
	s := open(t, Config{})
	var c Caller
	bad := batch("x")
	bad[len(bad)-1] ^= 1
	bases, errs := s.ProduceMany(c, "t", []Produce{
		{Batch: bad, Expect: -1, Create: true},
		{Batch: batch("y"), Expect: -1},
	})
	if !errors.Is(errs[0], storage.ErrInvalidBatch) || !errors.Is(errs[1], storage.ErrTopicNotFound) {
		t.Fatalf("a bad batch and a good one to a missing topic: %v %v", bases, errs)
	}
	if err := s.ProduceAsync(c, "t", Produce{Batch: bad, Expect: -1, Create: true}, nil, nil); !errors.Is(err, storage.ErrInvalidBatch) {
		t.Fatalf("a bad batch queued for a missing topic: %v", err)
	}
	if _, _, err := s.Import(c, "t", -1, nil, true); !errors.Is(err, storage.ErrInvalidImport) {
		t.Fatalf("an import at -1 into a missing topic: %v", err)
	}
	if _, _, err := s.Import(c, "t", 0, bad, true); !errors.Is(err, storage.ErrInvalidBatch) {
		t.Fatalf("an import of a bad batch into a missing topic: %v", err)
	}
	if s.HasTopic("t") {
		t.Fatal("a refused produce or import created the topic")
	}
	if base, err := s.Produce(c, "t", Produce{Batch: batch("z"), Expect: -1, Create: true}); err != nil || base != 0 {
		t.Fatalf("a good batch that creates its topic: %d, %v", base, err)
	}
	if base, err := s.Produce(c, "t", Produce{Batch: batch("w"), Expect: 0}); !errors.Is(err, storage.ErrOffsetMismatch) {
		t.Fatalf("a produce expecting a passed offset: %d, %v", base, err)
	}
}
