package docs

import (
	"os"
	"strings"
	"testing"
)

// TestNewcomerDocs pins what the README and docs/http.md tell a reader
// following them for the first time: bin/haraqa is not named before the
// reader is told how it gets built, the curl lines that answer with an
// empty body show the status code, and POST to a missing topic is said to
// be 404 next to them, while hrqa and the Go client create the topic.
func TestNewcomerDocs(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(readme), "\n") {
		if !strings.Contains(line, "bin/haraqa") {
			continue
		}
		if !strings.Contains(line, "build") {
			t.Errorf("README names bin/haraqa first in a line that does not say it is built (by make run or make build): %q", line)
		}
		break
	}

	http, err := os.ReadFile("http.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(http), "## REST API\n")
	block, after, ok2 := strings.Cut(rest, "```\n\n")
	if !ok || !ok2 {
		t.Fatal("docs/http.md has no curl block under \"## REST API\"")
	}
	n := 0
	for _, line := range strings.Split(block, "\n") {
		if !strings.HasPrefix(line, "curl ") || !strings.Contains(line, "-X PUT") && !strings.Contains(line, "-X DELETE") {
			continue
		}
		n++
		if !strings.Contains(line, "curl -i ") && !strings.Contains(line, "%{http_code}") {
			t.Errorf("docs/http.md: %q prints nothing to show it worked: use curl -i or -w '%%{http_code}\\n'", line)
		}
	}
	if n < 2 {
		t.Errorf("docs/http.md's curl block has %d PUT or DELETE lines, want one of each", n)
	}
	next, _, _ := strings.Cut(after, "\n\n")
	next = strings.Join(strings.Fields(next), " ")
	for _, want := range []string{"`POST` to a missing topic is 404", "`hrqa produce` and the Go client create it"} {
		if !strings.Contains(next, want) {
			t.Errorf("docs/http.md does not say %q right after its curl lines (it says %q)", want, next)
		}
	}
}
