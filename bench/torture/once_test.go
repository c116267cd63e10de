package main

import (
	"strings"
	"testing"
)

// onceTopic is the topic of every producer in the onceCheck tests.
const onceTopic = "t"

// read feeds check the messages (producer, sequence) at offsets 0, 1, ...
func read(check *onceCheck, msgs ...[2]int) {
	for off, m := range msgs {
		check.message(onceTopic, int64(off), payload(m[0], m[1]))
	}
}

// TestOnceCheck gives the verifier of the idempotent phase a clean topic,
// then one each of the breaches it counts, and checks that it tells them
// apart and that a failed Future's message may be stored once.
func TestOnceCheck(t *testing.T) {
	topics := map[int]string{0: onceTopic, 1: onceTopic}
	// Producer 0 sent S0-S2 acknowledged at 0, 2, 3; producer 1 sent S0
	// acknowledged at 1 and S1, whose Future failed.
	sent := func() map[int][]int64 {
		return map[int][]int64{0: {0, 2, 3}, 1: {1, futureFailed}}
	}
	clean := [][2]int{{0, 0}, {1, 0}, {0, 1}, {0, 2}}
	cases := []struct {
		name  string
		msgs  [][2]int
		want  onceResult // the counters besides present, acked and failed
		error string     // "" for none; else a part of the error
	}{
		{"clean", clean, onceResult{}, ""},
		{"failed Future stored once", append(clean, [2]int{1, 1}), onceResult{failedStored: 1}, ""},
		{"failed Future stored twice", append(clean, [2]int{1, 1}, [2]int{1, 1}), onceResult{failedStored: 1, duplicates: 1}, "P1 S1 again, first read at 4"},
		{"acknowledged stored twice", append(clean, [2]int{0, 2}), onceResult{duplicates: 1}, "1 duplicates"},
		{"lost", [][2]int{{0, 0}, {1, 0}, {0, 1}}, onceResult{lost: 1}, "P0 S2 acknowledged at offset 3 is lost"},
		{"at another offset", [][2]int{{0, 0}, {1, 0}, {1, 1}, {0, 1}, {0, 2}}, onceResult{failedStored: 1, misplaced: 2}, "P0 S1, whose Future gave offset 2"},
		{"out of order", [][2]int{{0, 0}, {1, 0}, {0, 2}, {0, 1}}, onceResult{misplaced: 2, disorder: 1}, "P0 S1 after S2"},
		{"never sent", append(clean, [2]int{0, 3}), onceResult{foreign: 1}, "P0 S3 was never handed to Send"},
		{"unknown producer", append(clean, [2]int{2, 0}), onceResult{foreign: 1}, "P2 S0 was never handed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			check := newOnceCheck(topics, sent())
			read(check, c.msgs...)
			got, err := check.finish()
			c.want.present, c.want.acked, c.want.failed = len(c.msgs), 4, 1
			if got != c.want {
				t.Errorf("counted %+v, want %+v", got, c.want)
			}
			switch {
			case c.error == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case c.error != "" && (err == nil || !strings.Contains(err.Error(), c.error)):
				t.Errorf("error %v, want one containing %q", err, c.error)
			}
		})
	}

	// Bytes that are no torture message, or a message on another topic.
	check := newOnceCheck(topics, sent())
	read(check, clean...)
	check.message(onceTopic, 4, []byte("garbage"))
	check.message("other", 0, payload(0, 0))
	if got, err := check.finish(); got.foreign != 2 || err == nil {
		t.Errorf("garbage and another topic: counted %+v, %v; want 2 never sent", got, err)
	}
}
