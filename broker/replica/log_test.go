package replica

import (
	"testing"

	"github.com/haraqa/haraqa/storage"
)

// lg returns the handle on topic name's log in s, failing the test if
// there is none.
func lg(tb testing.TB, s *storage.Store, name string) *storage.Log {
	tb.Helper()
	l, err := s.Log(name)
	if err != nil {
		tb.Fatalf("log %q: %v", name, err)
	}
	return l
}
