package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/storage"
)

// TestHelpSaysWhatHappens pins what the help texts promise where a
// newcomer was misled: truncation is exact (not whole segment files only),
// an -offset reaching back past the oldest message starts at the oldest,
// and produce creates the topic even from empty stdin.
func TestHelpSaysWhatHappens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cmd      string
		want     []string
		dontWant []string
	}{
		{"truncate", []string{"Truncation is exact", `"hrqa topics info" counts only readable bytes`}, []string{"whole segment files only"}},
		{"consume", []string{"-1000 on a topic of 10 prints all 10"}, nil},
		{"produce", []string{"The topic is created if it does not exist, also when there is no message to send (empty stdin)"}, nil},
	} {
		out := strings.Join(strings.Fields(ok(t, "", "", tc.cmd, "-h")), " ")
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("hrqa %s -h does not say %q", tc.cmd, w)
			}
		}
		for _, w := range tc.dontWant {
			if strings.Contains(out, w) {
				t.Errorf("hrqa %s -h still says %q", tc.cmd, w)
			}
		}
	}
}

// TestFrameTooLargeSaysWhy: a produce over the server's -max-frame names
// the frame's size, the server's limit and both ways out.
func TestFrameTooLargeSaysWhy(t *testing.T) {
	t.Parallel()
	const limit = 4096
	addr, _ := server(t, func(so *storage.Options, bc *broker.Config) {
		bc.MaxFrameSize = limit
		so.MaxBatchBytes = limit
	})
	msg := strings.Repeat("x", 3*limit)
	fails(t, addr, "", "the server's limit is 4096 (-max-frame): send smaller batches (hrqa produce -batch N", "produce", "big", msg)
	r := hrqa(t, addr, "", "produce", "big", msg)
	size := 0
	if m := regexp.MustCompile(`a frame of (\d+) bytes`).FindStringSubmatch(r.stderr); m != nil {
		size, _ = strconv.Atoi(m[1])
	}
	if size <= len(msg) {
		t.Errorf("stderr %q does not name the frame's size, over %d bytes", r.stderr, len(msg))
	}
	if !strings.Contains(r.stderr, "or raise the server's -max-frame") {
		t.Errorf("stderr %q does not name the server's -max-frame as the other fix", r.stderr)
	}
}
