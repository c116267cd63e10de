package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		pos     []string
		offset  int64
		follow  bool
		errWant string
	}{
		{args: []string{"t", "-offset", "-1", "-f"}, pos: []string{"t"}, offset: -1, follow: true},
		{args: []string{"-f", "-offset=7", "t"}, pos: []string{"t"}, offset: 7, follow: true},
		{args: []string{"--offset", "3", "a", "b"}, pos: []string{"a", "b"}, offset: 3},
		{args: []string{"a", "-5", "-", "-f=false"}, pos: []string{"a", "-5", "-"}},
		{args: []string{"a", "--", "-f", "-offset"}, pos: []string{"a", "-f", "-offset"}},
		{args: []string{"t", "-offset"}, errWant: "flag -offset needs a value"},
		{args: []string{"t", "-nope"}, errWant: "unknown flag -nope"},
		{args: []string{"t", "-offset", "x"}, errWant: `invalid value "x" for flag -offset`},
		{args: []string{"t", "-f=maybe"}, errWant: "-f"},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		offset := fs.Int64("offset", 0, "")
		follow := fs.Bool("f", false, "")
		pos, err := parseFlags(fs, tc.args)
		var ue *usageError
		switch {
		case tc.errWant != "":
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.errWant) {
				t.Errorf("%q: error %v, want a usage error holding %q", tc.args, err, tc.errWant)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case !slices.Equal(pos, tc.pos) || *offset != tc.offset || *follow != tc.follow:
			t.Errorf("%q: positional %q, -offset %d, -f %v; want %q, %d, %v",
				tc.args, pos, *offset, *follow, tc.pos, tc.offset, tc.follow)
		}
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	if _, err := parseFlags(fs, []string{"a", "-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`,`: ",", `\n`: "\n", `\t\r`: "\t\r", `\0`: "\x00", `\\`: `\`, `a\x00b\xFF`: "a\x00b\xff", `::`: "::",
	} {
		got, err := unescape(in)
		if err != nil || string(got) != want {
			t.Errorf("unescape(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{`\`, `\q`, `\x`, `\x1`, `\xzz`} {
		if got, err := unescape(in); err == nil {
			t.Errorf("unescape(%q) = %q, want an error", in, got)
		}
	}
}

func TestParseBefore(t *testing.T) {
	now := time.Date(2025, 1, 2, 15, 4, 5, 0, time.UTC)
	for in, want := range map[string]before{
		"5000":                        {offset: 5000},
		"-10":                         {offset: -10},
		"2025-01-01T00:00:00Z":        {time: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), byTime: true},
		"2025-01-01T01:00:00.5+01:00": {time: time.Date(2025, 1, 1, 0, 0, 0, 5e8, time.UTC), byTime: true},
		"24h":                         {time: now.Add(-24 * time.Hour), byTime: true},
		"1h30m":                       {time: now.Add(-90 * time.Minute), byTime: true},
	} {
		got, err := parseBefore(in, now)
		if err != nil || got.offset != want.offset || got.byTime != want.byTime || !got.time.Equal(want.time) {
			t.Errorf("parseBefore(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "yesterday", "-1h", "2025-01-01", "1d"} {
		if got, err := parseBefore(in, now); err == nil {
			t.Errorf("parseBefore(%q) = %+v, want an error", in, got)
		}
	}
}

// split returns the messages splitAt finds in input, read in pieces of
// the sizes r makes.
func split(r io.Reader, delim []byte, max int) ([]string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4), max)
	sc.Split(splitAt(delim))
	var msgs []string
	for sc.Scan() {
		msgs = append(msgs, sc.Text())
	}
	return msgs, sc.Err()
}

// splitModel is what splitAt must find: the pieces between delimiters,
// with no empty piece after a final delimiter.
func splitModel(input, delim []byte) []string {
	parts := bytes.Split(input, delim)
	if len(parts[len(parts)-1]) == 0 {
		parts = parts[:len(parts)-1]
	}
	var msgs []string
	for _, p := range parts {
		msgs = append(msgs, string(p))
	}
	return msgs
}

func FuzzSplitAt(f *testing.F) {
	f.Add([]byte("a\nb\n\nc\n"), []byte("\n"))
	f.Add([]byte("a::b:::c::"), []byte("::"))
	f.Add([]byte("\x00\x00"), []byte("\x00"))
	f.Add([]byte("abcabcab"), []byte("abc"))
	f.Add([]byte("aaaa"), []byte("aa"))
	f.Add([]byte("aaa"), []byte("aa"))
	f.Add([]byte(""), []byte("\n"))
	f.Fuzz(func(t *testing.T, input, delim []byte) {
		if len(delim) == 0 || len(delim) > 8 {
			return
		}
		want := splitModel(input, delim)
		for _, r := range []io.Reader{
			bytes.NewReader(input),
			iotest.OneByteReader(bytes.NewReader(input)),
			iotest.HalfReader(bytes.NewReader(input)),
		} {
			got, err := split(r, delim, 1<<20)
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("split %q at %q: %q, %v; want %q", input, delim, got, err, want)
			}
		}
	})
}

func TestSplitAtTooLong(t *testing.T) {
	_, err := split(strings.NewReader("short\n"+strings.Repeat("x", 100)+"\n"), []byte("\n"), 64)
	if !errors.Is(err, bufio.ErrTooLong) {
		t.Errorf("a message longer than the buffer: %v, want bufio.ErrTooLong", err)
	}
	// A long message read byte by byte is searched once, not once per
	// read: quadratic, this would scan half a terabyte.
	long := strings.Repeat("x", 1<<20)
	got, err := split(iotest.OneByteReader(strings.NewReader(long+"\nend")), []byte("\n"), 2<<20)
	if err != nil || len(got) != 2 || got[0] != long || got[1] != "end" {
		t.Errorf("a long message: %d messages, %v", len(got), err)
	}
}
