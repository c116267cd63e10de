package bench

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// docPath is the file `make bench` rewrites.
const docPath = "../docs/benchmarks.md"

// freshMatrix is a matrix as `make bench` would render it: the standard
// cells, some failed, so every kind of row is in the table.
func freshMatrix() *Matrix {
	mc := DefaultMatrixConfig()
	ratio, ceil, zc, lat := 0.5, 123.4, 1.0, Latency{P50: 7}
	m := &Matrix{
		Config:  mc,
		Machine: Machine{Cores: 4, CPU: "Fresh CPU", Kernel: "Linux 9.9", Memory: "8 GiB", Go: "go9.9"},
		Started: time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC),
		Took:    7 * time.Minute,
	}
	for i, c := range mc.Cells {
		row := MatrixRow{Cell: c}
		if i%7 == 3 {
			row.Failed = []string{"boom"}
		} else {
			row.Runs = []*Result{{MsgsPerSec: 12345, MBPerSec: 1.2, Latency: Latency{P50: 10, P99: 90},
				CeilingMBPerSec: &ceil, CeilingLatency: &lat, RatioToCeiling: &ratio, ZeroCopyShare: &zc}}
		}
		m.Rows = append(m.Rows, row)
	}
	return m
}

// sectionAt splits doc at its markers: before the begin marker's line,
// the markers' lines and what lies between, and after the end marker's line.
func sectionAt(t *testing.T, doc string) (before, section, after string) {
	t.Helper()
	begin := lineIndex(doc, MarkerBegin, 0)
	end := lineIndex(doc, MarkerEnd, max(begin, 0))
	if begin < 0 || end < 0 {
		t.Fatalf("%s: no %s ... %s section", docPath, MarkerBegin, MarkerEnd)
	}
	stop := end + len(MarkerEnd)
	if stop < len(doc) && doc[stop] == '\n' {
		stop++
	}
	return doc[:begin], doc[begin:stop], doc[stop:]
}

var number = regexp.MustCompile(`[0-9][0-9.,]*`)

// notGenerated returns the lines of old, the section between the markers
// of a document, that Markdown does not write: old is compared with fresh,
// a section Markdown rendered for the same cells, line by line, the
// figures and the machine's description aside. It returns nil when old
// could have come from Markdown.
func notGenerated(old, fresh string) []string {
	var bad []string
	for _, h := range Headings(old) {
		if h != MatrixHeading {
			bad = append(bad, "heading "+h)
		}
	}
	ol, fl := strings.Split(old, "\n"), strings.Split(fresh, "\n")
	for i, line := range ol {
		if i >= len(fl) {
			bad = append(bad, "extra line "+line)
			continue
		}
		want := fl[i]
		switch {
		case strings.HasPrefix(want, "| "):
			// A table row: its cells vary, their number does not.
			if !strings.HasPrefix(line, "| ") || strings.Count(line, "|") != strings.Count(want, "|") {
				bad = append(bad, "not a table row: "+line)
			}
		case strings.HasPrefix(want, "Machine: "), strings.HasPrefix(want, "Written by "):
			if prefix := want[:strings.IndexByte(want, ' ')]; !strings.HasPrefix(line, prefix+" ") {
				bad = append(bad, line)
			}
		case number.ReplaceAllString(line, "N") != number.ReplaceAllString(want, "N"):
			bad = append(bad, line)
		}
	}
	if len(ol) < len(fl) {
		bad = append(bad, "missing the generator's lines from "+fl[len(ol)])
	}
	return bad
}

// TestBenchmarksDocRewrite runs `make bench`'s rewrite on the real
// docs/benchmarks.md with a fresh table: everything outside the markers
// stays byte for byte, the new table is all that lies between them, and
// what it replaces was a generated table too, not hand-written text.
func TestBenchmarksDocRewrite(t *testing.T) {
	raw, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	section := freshMatrix().Markdown()
	got, err := replaceSection(doc, section)
	if err != nil {
		t.Fatalf("rewrite of %s: %v", docPath, err)
	}
	before, old, after := sectionAt(t, doc)
	gotBefore, gotSection, gotAfter := sectionAt(t, got)
	if gotBefore != before {
		t.Errorf("the rewrite changed %s before %s", docPath, MarkerBegin)
	}
	if gotAfter != after {
		t.Errorf("the rewrite changed %s after %s", docPath, MarkerEnd)
	}
	if gotSection != section {
		t.Errorf("between the markers: got\n%s\nwant the generated section\n%s", gotSection, section)
	}
	if bad := notGenerated(old, section); len(bad) > 0 {
		t.Errorf("%s has text between %s and %s that `make bench` would delete; move it outside the markers:\n%s",
			docPath, MarkerBegin, MarkerEnd, strings.Join(bad, "\n"))
	}
	if err := CheckSection(docPath); err != nil {
		t.Error(err)
	}
	// Rewriting its own output changes nothing.
	if again, err := replaceSection(got, section); err != nil || again != got {
		t.Errorf("second rewrite: changed %v, %v", again != got, err)
	}
}

// TestBenchmarksDocHandWrittenCaught puts hand-written text between the
// markers of the real document, as the four sections once were, and
// checks that both the test above and the rewrite itself refuse it.
func TestBenchmarksDocHandWrittenCaught(t *testing.T) {
	raw, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	section := freshMatrix().Markdown()
	_, old, _ := sectionAt(t, doc)
	if bad := notGenerated(old, section); len(bad) > 0 {
		t.Skip("the document itself fails TestBenchmarksDocRewrite")
	}
	cases := map[string]string{
		"heading after the begin marker": MarkerBegin + "\n### Notes\n\nHand-written.\n\n",
		"heading before the end marker":  "\n## TLS against plaintext\n\nHand-written.\n" + MarkerEnd,
		"paragraph without a heading":    MarkerBegin + "\nA hand-written paragraph.\n\n",
	}
	for name, insert := range cases {
		t.Run(name, func(t *testing.T) {
			marker := MarkerBegin
			if strings.HasSuffix(insert, MarkerEnd) {
				marker = MarkerEnd
			}
			edited := strings.Replace(doc, marker, insert, 1)
			_, old, _ := sectionAt(t, edited)
			if bad := notGenerated(old, section); len(bad) == 0 {
				t.Error("the check found nothing")
			}
			if strings.Contains(insert, "\n#") {
				if _, err := replaceSection(edited, section); err == nil {
					t.Error("the rewrite dropped a hand-written heading without an error")
				}
				path := filepath.Join(t.TempDir(), "benchmarks.md")
				if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := CheckSection(path); !errors.Is(err, ErrMatrix) {
					t.Errorf("CheckSection: %v", err)
				}
				if err := RewriteSection(path, section); err == nil {
					t.Error("RewriteSection: no error")
				}
				if b, _ := os.ReadFile(path); string(b) != edited {
					t.Error("RewriteSection changed the file it refused")
				}
			}
		})
	}
}

func TestHeadings(t *testing.T) {
	doc := "# A\ntext #1\n```\n# a comment\n```\n## B\n"
	got := Headings(doc)
	if len(got) != 2 || got[0] != "# A" || got[1] != "## B" {
		t.Fatalf("Headings = %q", got)
	}
}
