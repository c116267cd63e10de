package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReplaceSection(t *testing.T) {
	section := MarkerBegin + "\nnew\n" + MarkerEnd + "\n"
	cases := []struct {
		name, doc, want string
	}{
		{"empty file", "", section},
		{"no markers", "# Title\n\ntext\n", "# Title\n\ntext\n\n" + section},
		{"no final newline", "text", "text\n\n" + section},
		{"replace", "a\n" + MarkerBegin + "\nold\nold\n" + MarkerEnd + "\nb\n", "a\n" + section + "b\n"},
		{"replace at end", "a\n" + MarkerBegin + "\nold\n" + MarkerEnd, "a\n" + section},
		{"marker mentioned inline stays", "see `" + MarkerBegin + "` here\n", "see `" + MarkerBegin + "` here\n\n" + section},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := replaceSection(tc.doc, section)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got\n%q\nwant\n%q", got, tc.want)
			}
			// Idempotent: a second rewrite changes nothing.
			again, err := replaceSection(got, section)
			if err != nil || again != got {
				t.Fatalf("second rewrite: %q, %v", again, err)
			}
		})
	}
	for _, doc := range []string{MarkerBegin + "\nx\n", "x\n" + MarkerEnd + "\n"} {
		if _, err := replaceSection(doc, section); err == nil {
			t.Errorf("unpaired marker in %q accepted", doc)
		}
	}
}

func TestRewriteSectionFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	head := "# Benchmarks\n\nHand-written text.\n"
	if err := os.WriteFile(path, []byte(head), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"first", "second"} {
		if err := RewriteSection(path, MarkerBegin+"\n"+body+"\n"+MarkerEnd+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := head + "\n" + MarkerBegin + "\nsecond\n" + MarkerEnd + "\n"; string(got) != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v not kept", st.Mode())
	}
	// A file that does not exist yet is created.
	fresh := filepath.Join(t.TempDir(), "new.md")
	if err := RewriteSection(fresh, MarkerBegin+"\nx\n"+MarkerEnd+"\n"); err != nil {
		t.Fatal(err)
	}
}

func TestMedian(t *testing.T) {
	runs := []*Result{{MBPerSec: 5}, {MBPerSec: 1}, {MBPerSec: 3}}
	pick := always(func(r *Result) float64 { return r.MBPerSec })
	if v, ok := median(runs, pick); !ok || v != 3 {
		t.Fatalf("median of 5 1 3 = %v", v)
	}
	if v, _ := median(runs[:2], pick); v != 3 {
		t.Fatalf("median of 5 1 = %v, want 3", v)
	}
	r := 0.5
	runs[0].RatioToCeiling = &r
	if v, ok := median(runs, optional(func(r *Result) *float64 { return r.RatioToCeiling })); !ok || v != 0.5 {
		t.Fatalf("median of the one ratio = %v %v", v, ok)
	}
	if _, ok := median(nil, pick); ok {
		t.Fatal("median of nothing")
	}
}

func TestMatrixMarkdown(t *testing.T) {
	mc := DefaultMatrixConfig()
	if n := len(mc.Cells); n != 36 {
		t.Fatalf("standard matrix has %d cells, want 2 sizes x 3 batches x 2 volumes x 3 modes", n)
	}
	ratio, ceil := 0.9, 1000.0
	run := func(mbs float64) *Result {
		return &Result{MsgsPerSec: mbs * 1000, MBPerSec: mbs, Latency: Latency{P50: 10, P99: 20},
			CeilingMBPerSec: &ceil, RatioToCeiling: &ratio}
	}
	m := &Matrix{
		Config:  mc,
		Machine: Machine{Cores: 2, CPU: "Test CPU", Kernel: "Linux 6.0", Memory: "1 GiB", Go: "go1.26"},
		Started: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC),
		Took:    time.Minute,
		Rows: []MatrixRow{
			{Cell: Cell{ModeProduce, 1024, 1000, 1}, Runs: []*Result{run(900), run(1000), run(800)}},
			{Cell: Cell{ModeConsume, 100, 1, 3}, Failed: []string{"boom"}},
		},
	}
	md := m.Markdown()
	for _, want := range []string{
		MarkerBegin, MarkerEnd, "2 cores (Test CPU), Linux 6.0", "go1.26",
		"| produce | 1024 B | 1000 | 1 | 900,000 | 900.0 | 10 | 20 | 1000.0 | 0.90 | - |",
		"| consume | 100 B | 1 | 3 | failed |",
		"haraqa-bench -embedded -mode produce -size 1024 -batch 1000 -volumes 1 -duration 1s -warmup 300ms -ceiling -json",
		"-mode MODE -size SIZE -batch BATCH -volumes VOLUMES",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if !strings.HasPrefix(md, MarkerBegin+"\n") || !strings.HasSuffix(md, MarkerEnd+"\n") {
		t.Error("section not delimited by the markers")
	}
}

func TestThisMachine(t *testing.T) {
	m := ThisMachine()
	if m.Cores < 1 || !strings.HasPrefix(m.Go, "go") || m.Kernel == "" {
		t.Fatalf("%+v", m)
	}
}

func TestGroupThousands(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567.6: "1,234,568"} {
		if got := groupThousands(v); got != want {
			t.Errorf("groupThousands(%v) = %q, want %q", v, got, want)
		}
	}
}
