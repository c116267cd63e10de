package storage

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/haraqa/haraqa/protocol"
)

// openTest opens a store on n fresh volumes with small segments.
func openTest(t testing.TB, n int, tweak ...func(*Options)) (*Store, Options) {
	t.Helper()
	vols := make([]string, n)
	for i := range vols {
		vols[i] = t.TempDir()
	}
	opts := DefaultOptions(vols...)
	opts.Entries = 10
	for _, f := range tweak {
		f(&opts)
	}
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, opts
}

func msgs(from, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, "message-%d-%s", from+i, bytes.Repeat([]byte{'x'}, (from+i)%37))
	}
	return out
}

// readAll reads every message of the topic from offset on, checking CRCs.
func readAll(t testing.TB, s *Store, topic string, offset int64) [][]byte {
	t.Helper()
	start := offset
	var out [][]byte
	for _, b := range rawBatches(t, s, topic, offset) {
		bt, _, err := protocol.ParseBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := bt.Validate(); err != nil {
			t.Fatalf("served an invalid batch at %d: %v", bt.BaseOffset, err)
		}
		err = protocol.Messages(bt.Body, bt.Count, bt.BaseOffset, func(o int64, m []byte) error {
			if o >= offset {
				if want := start + int64(len(out)); o != want {
					t.Fatalf("read offset %d, want %d", o, want)
				}
				out = append(out, append([]byte(nil), m...))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	for _, vols := range []int{1, 3} {
		for _, batch := range []int{1, 2, 1000} {
			t.Run(fmt.Sprintf("vols=%d/batch=%d", vols, batch), func(t *testing.T) {
				s, _ := openTest(t, vols)
				if err := s.CreateTopic("t"); err != nil {
					t.Fatal(err)
				}
				var want [][]byte
				for i := 0; i < 3; i++ {
					m := msgs(len(want), batch)
					base, err := lg(t, s, "t").Append(protocol.AppendBatch(nil, m...), AppendOptions{})
					if err != nil {
						t.Fatal(err)
					}
					if base != int64(len(want)) {
						t.Fatalf("base %d, want %d", base, len(want))
					}
					want = append(want, m...)
				}
				got := readAll(t, s, "t", 0)
				if len(got) != len(want) {
					t.Fatalf("read %d messages, want %d", len(got), len(want))
				}
				for i := range want {
					if !bytes.Equal(got[i], want[i]) {
						t.Fatalf("message %d differs", i)
					}
				}
				info, err := lg(t, s, "t").Info()
				if err != nil || info.Next != int64(len(want)) || info.Oldest != 0 {
					t.Fatalf("info %+v %v", info, err)
				}
			})
		}
	}
}

func TestNotFound(t *testing.T) {
	s, _ := openTest(t, 1)
	if _, err := s.Log("nope"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("got %v", err)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestFsyncPolicyText(t *testing.T) {
	for _, p := range []FsyncPolicy{FsyncNever, FsyncInterval, FsyncAlways} {
		text, err := p.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var q FsyncPolicy
		if err := q.UnmarshalText(text); err != nil || q != p {
			t.Fatalf("%s: round trip gave %v, %v", p, q, err)
		}
		var fs flag.FlagSet
		var r FsyncPolicy
		fs.TextVar(&r, "fsync", FsyncNever, "")
		if err := fs.Parse([]string{"-fsync", string(text)}); err != nil || r != p {
			t.Fatalf("-fsync %s: %v, %v", text, r, err)
		}
	}
	q := FsyncAlways
	if err := q.UnmarshalText([]byte("sometimes")); !errors.Is(err, ErrInvalidOptions) || q != FsyncAlways {
		t.Fatalf("bad name: %v, policy now %v", err, q)
	}
	if _, err := FsyncPolicy(7).MarshalText(); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("bad policy marshalled: %v", err)
	}
}

func TestStoreFsyncPolicy(t *testing.T) {
	opts := DefaultOptions(t.TempDir())
	opts.Fsync = FsyncAlways
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.FsyncPolicy(); got != FsyncAlways {
		t.Fatalf("FsyncPolicy() = %v, want always", got)
	}
}

func TestHasTopic(t *testing.T) {
	s, _ := openTest(t, 1)
	if s.HasTopic("t") {
		t.Fatal("HasTopic before create")
	}
	if err := s.CreateTopic("t"); err != nil {
		t.Fatal(err)
	}
	if !s.HasTopic("t") || s.HasTopic("u") || s.HasTopic("../t") {
		t.Fatal("HasTopic after create: want t only")
	}
	if err := s.DeleteTopic("t"); err != nil {
		t.Fatal(err)
	}
	if s.HasTopic("t") {
		t.Fatal("HasTopic after delete")
	}
}

// A volume directory that does not exist is made, with a warning naming
// it: a mistyped path must not start empty in silence.
func TestMissingVolumeWarned(t *testing.T) {
	var logs bytes.Buffer
	vol := filepath.Join(t.TempDir(), "typo", "volume")
	opts := DefaultOptions(vol)
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	s := mustOpen(t, opts)
	if !strings.Contains(logs.String(), "did not exist") || !strings.Contains(logs.String(), vol) {
		t.Fatalf("no warning naming the made volume: %q", logs.String())
	}
	mustClose(t, s)
	logs.Reset()
	mustOpen(t, opts)
	if strings.Contains(logs.String(), "did not exist") {
		t.Fatalf("warned of a volume that exists: %q", logs.String())
	}
}
