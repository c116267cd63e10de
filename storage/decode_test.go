package storage

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// zstdZeros is a zstd batch of one message of zeros that decodes to
// about rawSize bytes.
func zstdZeros(rawSize int) []byte {
	raw := protocol.AppendMessage(nil, make([]byte, rawSize-4))
	return protocol.AppendBatchRaw(nil, protocol.CodecZstd, 1, raw)
}

// appendWithin appends batch on another goroutine and returns its error,
// failing the test if it has not returned within d.
func appendWithin(t *testing.T, s *Store, batch []byte, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := s.Append("t", batch)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("append of %d bytes still waits after %v", len(batch), d)
		return nil
	}
}

// TestHostile2Row2DeclaredSizeRefused: the decoded size a compressed
// batch declares is checked before anything is decoded: over MaxBatchBytes
// or over MaxDecodeBytes, the append is refused with ErrInvalidBatch even
// while every decode worker and byte of the budget is taken, without
// waiting for either. One within both bounds waits for the budget and is
// stored once it frees.
func TestHostile2Row2DeclaredSizeRefused(t *testing.T) {
	s, _ := openTest(t, 1, func(o *Options) {
		o.MaxBatchBytes = 1 << 20
		o.MaxDecodeBytes = 256 << 10
		o.DecodeWorkers = 1
	})
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	held := s.decode.acquire(s.decode.max) // a decode of the whole budget, running
	for name, b := range map[string][]byte{
		// A body that is not zstd at all: decoding it would fail otherwise.
		"2 MiB declared, over MaxBatchBytes": protocol.AppendBatchBody(nil, protocol.CodecZstd, 1, 2<<20, []byte("0123456789abcdef")),
		"512 KiB, over MaxDecodeBytes":       zstdZeros(512 << 10),
	} {
		err := appendWithin(t, s, b, 10*time.Second)
		if !errors.Is(err, ErrInvalidBatch) || !errors.Is(err, protocol.ErrBadBody) || !strings.Contains(err.Error(), "declares") {
			t.Errorf("%s: %v, want ErrInvalidBatch for the declared size", name, err)
		}
	}
	if w := s.Stats().DecodeWaits; w != 0 {
		t.Fatalf("%d refused appends waited for the decode budget", w)
	}
	ok := make(chan error, 1)
	go func() {
		_, err := s.Append("t", zstdZeros(128<<10))
		ok <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); s.Stats().DecodeWaits == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("an append within the bounds did not wait for the taken budget")
		}
	}
	s.decode.release(held)
	select {
	case err := <-ok:
		if err != nil {
			t.Fatalf("append within the bounds: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("append within the bounds still waits once the budget freed")
	}
	if info, _ := s.Info("t"); info.Next != 1 {
		t.Fatalf("next offset %d, want 1", info.Next)
	}
}

// TestDecodeWorkers: with DecodeWorkers decodes running, the next
// compressed append waits for one to end, whatever bytes are free, and
// waiters start in the order they came; an uncompressed append does not
// wait.
func TestDecodeWorkers(t *testing.T) {
	s, _ := openTest(t, 1, func(o *Options) { o.DecodeWorkers = 1 })
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	d := s.decode
	held := d.acquire(0) // the one worker, no bytes
	started := make(chan int, 2)
	for i := range 2 {
		go func() {
			n := d.acquire(1)
			started <- i
			time.Sleep(10 * time.Millisecond)
			d.release(n)
		}()
		for deadline := time.Now().Add(10 * time.Second); d.waits.Load() != int64(i+1); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("acquire %d did not wait for the busy worker", i)
			}
		}
	}
	if err := appendWithin(t, s, protocol.AppendBatch(nil, []byte("plain")), 10*time.Second); err != nil {
		t.Fatalf("uncompressed append while the worker is busy: %v", err)
	}
	select {
	case i := <-started:
		t.Fatalf("acquire %d started while the only worker was busy", i)
	default:
	}
	d.release(held)
	for want := range 2 {
		select {
		case i := <-started:
			if i != want {
				t.Fatalf("acquire %d started before %d, which came first", i, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("acquire %d never started", want)
		}
	}
	if err := appendWithin(t, s, zstdZeros(1<<10), 10*time.Second); err != nil {
		t.Fatalf("compressed append once the worker is free: %v", err)
	}
}
