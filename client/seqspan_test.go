package client

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestProducerSeqSpan: a produce may take a sequence at most seqSpan above
// the lowest one still unanswered on its topic; past it admit waits until
// that one is answered, and gives up with ErrConnection when its context
// ends. Other topics are not held back.
func TestProducerSeqSpan(t *testing.T) {
	p := newProducerSeq()
	ctx := context.Background()
	if err := p.admit(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	id, lagging := p.next("t") // a produce that will be answered late
	for range seqSpan - 1 {
		if err := p.admit(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		i, s := p.next("t")
		p.release("t", i, s, true) // answered at once
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := p.admit(short, "t"); !errors.Is(err, ErrConnection) {
		t.Fatalf("admit %d above the unanswered sequence %d: %v, want to wait and fail with ErrConnection", seqSpan, lagging, err)
	}
	if err := p.admit(ctx, "other"); err != nil {
		t.Fatalf("another topic: %v", err)
	}
	p.release("other", 0, 0, false)
	admitted := make(chan error, 1)
	go func() { admitted <- p.admit(ctx, "t") }()
	select {
	case err := <-admitted:
		t.Fatalf("admitted (%v) while sequence %d is unanswered", err, lagging)
	case <-time.After(20 * time.Millisecond):
	}
	p.release("t", id, lagging, true)
	select {
	case err := <-admitted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not admitted once the lowest sequence was answered")
	}
	if _, s := p.next("t"); s != seqSpan {
		t.Fatalf("sequence %d, want %d", s, seqSpan)
	}
}
