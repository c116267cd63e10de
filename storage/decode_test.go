package storage

import (
	"errors"
	"fmt"
	"slices"
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
		_, err := lg(t, s, "t").Append(batch, AppendOptions{})
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

// TestDeclaredSizeRefused: the decoded size a compressed
// batch declares is checked before anything is decoded: over MaxBatchBytes
// or over MaxDecodeBytes, the append is refused with ErrInvalidBatch even
// while every decode worker and byte of the budget is taken, without
// waiting for either. One within both bounds waits for the budget and is
// stored once it frees.
func TestDeclaredSizeRefused(t *testing.T) {
	s, _ := openTest(t, 1, func(o *Options) {
		o.MaxBatchBytes = 1 << 20
		o.MaxDecodeBytes = 256 << 10
		o.DecodeWorkers = 1
	})
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	held := mustAcquire(t, s.decode, "", s.decode.max) // a decode of the whole budget, running
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
		_, err := lg(t, s, "t").Append(zstdZeros(128<<10), AppendOptions{})
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
	if info, _ := lg(t, s, "t").Info(); info.Next != 1 {
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
	held := mustAcquire(t, d, "", 0) // the one worker, no bytes
	started := make(chan int, 2)
	for i := range 2 {
		go func() {
			n, _ := d.acquire("", 1) // one tenant's queue: first come, first served
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

// mustAcquire acquires n bytes of d for tenant, failing t on an error.
func mustAcquire(t *testing.T, d *decodeBudget, tenant string, n int64) int64 {
	t.Helper()
	held, err := d.acquire(tenant, n)
	if err != nil {
		t.Fatal(err)
	}
	return held
}

// queueDecodes starts one goroutine per label, in order, each acquiring n
// bytes of d for its tenant (the label up to its '#'), and waits until
// each waits before the next starts. A started acquire sends its label on
// the channel returned and releases at once, so with one worker the labels
// come out in the order d starts them.
func queueDecodes(t *testing.T, d *decodeBudget, n int64, labels ...string) <-chan string {
	return queueHeld(t, d, n, nil, labels...)
}

// queueHeld is queueDecodes whose started acquires release only once they
// receive from step (nil: at once).
func queueHeld(t *testing.T, d *decodeBudget, n int64, step <-chan struct{}, labels ...string) <-chan string {
	t.Helper()
	order := make(chan string, len(labels))
	queueInto(t, d, n, step, order, labels...)
	return order
}

// queueInto is queueHeld sending the labels to order, which several
// calls may share: read from one channel, the labels come in the order
// the decodes started (a select over several would pick among those
// ready at random).
func queueInto(t *testing.T, d *decodeBudget, n int64, step <-chan struct{}, order chan<- string, labels ...string) {
	t.Helper()
	for _, l := range labels {
		tenant, _, _ := strings.Cut(l, "#")
		waits := d.waits.Load()
		go func() {
			held, err := d.acquire(tenant, n)
			if err != nil {
				order <- "error: " + err.Error()
				return
			}
			order <- l
			if step != nil {
				<-step
			}
			d.release(held)
		}()
		for deadline := time.Now().Add(10 * time.Second); d.waits.Load() == waits; time.Sleep(100 * time.Microsecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not wait for the busy worker", l)
			}
		}
	}
}

// startOrder reads k labels from order.
func startOrder(t *testing.T, order <-chan string, k int) []string {
	t.Helper()
	var got []string
	for range k {
		select {
		case l := <-order:
			got = append(got, l)
		case <-time.After(10 * time.Second):
			t.Fatalf("started %v, then nothing", got)
		}
	}
	return got
}

// TestDecodeFairAcrossTenants: a tenant that floods the decode workers
// cannot put its backlog ahead of another tenant's batch. With the only
// worker busy, an attacker queues 16 decodes of 1 MiB, then a victim one
// of 1 KiB: the victim's starts second (after the attacker's first, which
// came at the same virtual time), not 17th as first come, first served
// would have it; and once the attacker runs ahead, a victim batch that
// comes later still goes before the rest of its backlog.
func TestDecodeFairAcrossTenants(t *testing.T) {
	d := newDecodeBudget(64<<20, 1, 1<<30)
	held := mustAcquire(t, d, "attacker", 0) // the one worker, busy
	var labels []string
	for i := range 16 {
		labels = append(labels, fmt.Sprintf("attacker#%d", i))
	}
	order := queueDecodes(t, d, 1<<20, append(labels, "victim#0")...)
	d.release(held)
	got := startOrder(t, order, 17)
	if pos := slices.Index(got, "victim#0"); pos != 1 {
		t.Fatalf("start order %v: the victim's decode started at position %d, want 1 (first come, first served: 16)", got, pos)
	}

	// Again, with the attacker's decodes running: three of them run one
	// after the other, then a victim batch comes; it starts as the third
	// ends, before the 13 the attacker still has queued.
	step := make(chan struct{})
	held = mustAcquire(t, d, "attacker", 0)
	order = queueHeld(t, d, 1<<20, step, labels...)
	d.release(held)
	got = startOrder(t, order, 1)
	for range 2 {
		step <- struct{}{}
		got = append(got, startOrder(t, order, 1)...)
	}
	victim := queueDecodes(t, d, 1<<10, "victim#1")
	step <- struct{}{} // the third attacker decode ends
	select {
	case l := <-victim:
		if l != "victim#1" {
			t.Fatal(l)
		}
	case l := <-order:
		t.Fatalf("after %v, %s started before the victim's decode, which came first in virtual time", got, l)
	case <-time.After(10 * time.Second):
		t.Fatal("the victim's decode never started")
	}
	go func() {
		for range 13 {
			step <- struct{}{}
		}
	}()
	if rest := startOrder(t, order, 13); len(rest) != 13 {
		t.Fatal(rest)
	}
}

// TestDecodeFairBytes: two tenants both backlogged share the worker in
// proportion to the bytes they decode, not to their batches: one
// decoding 1 MiB batches and one decoding 64 KiB ones, the second starts
// about 16 of its batches for each of the first's.
func TestDecodeFairBytes(t *testing.T) {
	d := newDecodeBudget(64<<20, 1, 1<<30)
	held := mustAcquire(t, d, "x", 0)
	var big, small []string
	for i := range 4 {
		big = append(big, fmt.Sprintf("big#%d", i))
	}
	for i := range 40 {
		small = append(small, fmt.Sprintf("small#%d", i))
	}
	order := make(chan string, len(big)+len(small))
	queueInto(t, d, 1<<20, nil, order, big...)
	queueInto(t, d, 64<<10, nil, order, small...)
	d.release(held)
	var got []string
	for len(got) < len(big)+len(small) {
		select {
		case l := <-order:
			got = append(got, l)
		case <-time.After(10 * time.Second):
			t.Fatalf("started %v, then nothing", got)
		}
	}
	// Between big#0 and big#1, about 1 MiB of small batches (each costs
	// 64 KiB and decodeCostFloor): 14 or so.
	between := slices.Index(got, "big#1") - slices.Index(got, "big#0") - 1
	if between < 10 || between > 16 {
		t.Fatalf("start order %v: %d small decodes between the first two big ones, want about 14", got, between)
	}
}

// TestDecodeQueueBound: a tenant holds at most MaxDecodeQueued declared
// bytes waiting; past it an acquire is refused with ErrDecodeQueueFull,
// while another tenant still queues, and a tenant's first waiting batch
// always fits however large.
func TestDecodeQueueBound(t *testing.T) {
	d := newDecodeBudget(64<<20, 1, 2<<20)
	held := mustAcquire(t, d, "x", 0)
	order := queueDecodes(t, d, 1<<20, "a#0", "a#1")
	if _, err := d.acquire("a", 1<<20); !errors.Is(err, ErrDecodeQueueFull) {
		t.Fatalf("a third 1 MiB decode of a tenant with 2 MiB waiting: %v, want ErrDecodeQueueFull", err)
	}
	if d.refused.Load() != 1 {
		t.Fatalf("refused %d, want 1", d.refused.Load())
	}
	other := queueDecodes(t, d, 8<<20, "b#0") // over the bound, but its first
	d.release(held)
	startOrder(t, order, 2)
	if l := startOrder(t, other, 1); l[0] != "b#0" {
		t.Fatal(l)
	}
}

// TestDecodeQueueFullOverAppend: the refusal reaches an append as
// ErrDecodeQueueFull, with nothing appended.
func TestDecodeQueueFullOverAppend(t *testing.T) {
	s, _ := openTest(t, 1, func(o *Options) { o.DecodeWorkers = 1; o.MaxDecodeQueued = 1 << 20 })
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	held := mustAcquire(t, s.decode, "x", 0)
	queueDecodes(t, s.decode, 1<<20, "a#0")
	_, errs := lg(t, s, "t").AppendMany([][]byte{zstdZeros(1 << 10)}, []AppendOptions{{Tenant: "a"}})
	if !errors.Is(errs[0], ErrDecodeQueueFull) {
		t.Fatalf("append past the tenant's queue bound: %v, want ErrDecodeQueueFull", errs[0])
	}
	s.decode.release(held)
	if _, errs := lg(t, s, "t").AppendMany([][]byte{zstdZeros(1 << 10)}, []AppendOptions{{Tenant: "a"}}); errs[0] != nil {
		t.Fatalf("append once the queue drained: %v", errs[0])
	}
	if st := s.Stats(); st.DecodeRefused != 1 {
		t.Fatalf("DecodeRefused %d, want 1", st.DecodeRefused)
	}
}
