package client

import (
	"testing"

	"github.com/haraqa/haraqa/protocol"
)

// TestErrorDoesNotRepeatItself: a server's message that repeats the
// code (with its package's prefix) is said once.
func TestErrorDoesNotRepeatItself(t *testing.T) {
	for _, c := range []struct {
		e    Error
		want string
	}{
		{Error{Op: protocol.OpConsume, Code: protocol.CodeTopicNotFound, Message: `storage: topic not found: "x"`}, `haraqa: consume: topic not found: "x"`},
		{Error{Op: protocol.OpConsume, Code: protocol.CodeTopicNotFound, Message: `topic not found`}, `haraqa: consume: topic not found`},
		{Error{Op: protocol.OpConsume, Code: protocol.CodeTopicNotFound, Message: `no topic orders`}, `haraqa: consume: topic not found: no topic orders`},
		{Error{Op: protocol.OpConsume, Code: protocol.CodeTopicNotFound, Message: `storage: topic not founded`}, `haraqa: consume: topic not found: storage: topic not founded`},
		{Error{Code: protocol.CodeTopicNotFound, Message: `broker: storage: topic not found: "y"`}, `haraqa: topic not found: "y"`},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.e, got, c.want)
		}
	}
}
