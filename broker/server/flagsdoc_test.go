package server

import (
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestFlagsDocumented: docs/flags.md, the flag reference the README
// links, has a row for every flag of the haraqa binary and names none it
// does not have.
func TestFlagsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/flags.md")
	if err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	fs := newFlagSet(&c, &cliFlags{}, io.Discard)
	documented := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "| `-") {
			continue
		}
		cell, _, _ := strings.Cut(line[2:], " |")
		for _, m := range regexp.MustCompile("`-([a-z0-9-]+)`").FindAllStringSubmatch(cell, -1) {
			documented[m[1]] = true
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if !documented[f.Name] {
			t.Errorf("flag -%s is not in docs/flags.md", f.Name)
		}
		delete(documented, f.Name)
	})
	for name := range documented {
		t.Errorf("docs/flags.md documents -%s, which the server does not have", name)
	}
}
