package protocol

import (
	"errors"
	"strings"
	"testing"
)

func TestCompileTopicFilter(t *testing.T) {
	for _, ok := range []string{"^orders\\.", "a|b|c", "(eu|us)-[0-9]{1,4}$", "x{1000}", "[a-z]+"} {
		re, err := CompileTopicFilter(ok)
		if err != nil || re == nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	// Small to send, huge once expanded: each is refused before it is
	// compiled, in far less time than compiling it would take.
	costly := []string{
		strings.Repeat("(?:a?){1000}", 300) + "z",
		"((((a{100}){100}){100}){100})",
		"(?:(?:a{1000}){1000})",
		strings.Repeat("a", MaxRegexLen+1),
		"(",
	}
	for _, expr := range costly {
		if _, err := CompileTopicFilter(expr); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%.40q...: %v, want ErrInvalidArgument", expr, err)
		}
	}
}

func FuzzCompileTopicFilter(f *testing.F) {
	f.Add("^a.*b$")
	f.Add("(?:a?){1000}z")
	f.Fuzz(func(t *testing.T, expr string) {
		re, err := CompileTopicFilter(expr)
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) || re != nil {
				t.Fatalf("%q: %v %v", expr, re, err)
			}
			return
		}
		_ = re.MatchString(strings.Repeat("a", 255))
	})
}
