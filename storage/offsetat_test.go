package storage

import (
	"errors"
	"testing"
	"time"
)

// TestOffsetAt finds the first offset appended at or after a time: within
// and across segments, before the oldest, after the newest, far out of the
// int64 range, after a truncation in the middle of a segment, and after a
// restart (append times come from the files).
func TestOffsetAt(t *testing.T) {
	clk := newFakeClock()
	start := clk.Now()
	s, opts := openTest(t, 2, func(o *Options) { o.Now = clk.Now; o.Logger = testLogger(t) })
	for i := range 35 { // message i appended at start + i seconds, segments of 10
		populate(t, s, "tt", int64(i), 1)
		clk.Add(time.Second)
	}
	cases := []struct {
		at   time.Time
		want int64
	}{
		{start, 0},
		{start.Add(-time.Hour), 0}, // before the oldest
		{time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC), 0},
		{start.Add(15 * time.Second), 15},
		{start.Add(15500 * time.Millisecond), 16}, // between two batches
		{start.Add(10 * time.Second), 10},         // a segment's first batch
		{start.Add(9500 * time.Millisecond), 10},  // just before it
		{start.Add(34 * time.Second), 34},         // the newest
		{start.Add(35 * time.Second), 35},         // after the newest: the next offset
		{time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), 35},
	}
	check := func(s *Store, when string) {
		t.Helper()
		for _, tc := range cases {
			got, err := lg(t, s, "tt").OffsetAt(tc.at)
			if err != nil || got != tc.want {
				t.Fatalf("%s: offset at %s: %d %v, want %d", when, tc.at.Sub(start), got, err, tc.want)
			}
		}
	}
	check(s, "open")
	mustClose(t, s)
	s = mustOpen(t, opts)
	check(s, "reopened")

	// Truncated in the middle of a segment: never an offset before the oldest.
	if err := lg(t, s, "tt").Truncate(13); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		at   time.Duration
		want int64
	}{{0, 13}, {12 * time.Second, 13}, {13 * time.Second, 13}, {14 * time.Second, 14}} {
		if got, err := lg(t, s, "tt").OffsetAt(start.Add(tc.at)); err != nil || got != tc.want {
			t.Fatalf("after truncating to 13: offset at +%s: %d %v, want %d", tc.at, got, err, tc.want)
		}
	}

	if _, err := s.Log("missing"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("offset at in a missing topic: %v, want ErrTopicNotFound", err)
	}
	if err := s.CreateTopic("empty"); err != nil {
		t.Fatal(err)
	}
	if got, err := lg(t, s, "empty").OffsetAt(start); err != nil || got != 0 {
		t.Fatalf("offset at in an empty topic: %d %v, want 0", got, err)
	}
}

// TestInfoBytesAfterTruncate: a truncation within the first segment stops
// counting the hidden batches in Bytes; DiskBytes keeps them until the file
// goes. (populate's batches differ in size, so offset 5 is not half.)
func TestInfoBytesAfterTruncate(t *testing.T) {
	s, _ := openTest(t, 1)
	populate(t, s, "b", 0, 10) // one segment, several batches
	before, err := lg(t, s, "b").Info()
	if err != nil {
		t.Fatal(err)
	}
	if before.Bytes != before.DiskBytes || before.Bytes == 0 {
		t.Fatalf("before truncating: %+v", before)
	}
	if err := lg(t, s, "b").Truncate(5); err != nil {
		t.Fatal(err)
	}
	after, err := lg(t, s, "b").Info()
	if err != nil {
		t.Fatal(err)
	}
	if after.DiskBytes != before.DiskBytes || after.Bytes >= before.Bytes || after.Bytes <= 0 || after.Segments != 1 {
		t.Fatalf("after truncating to 5 of 10: %+v, before %+v: want fewer Bytes, the same DiskBytes", after, before)
	}
}
