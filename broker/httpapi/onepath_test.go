package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/httpapi"
	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// TestOnePathBothPorts: the same request refused on either port gets the
// same rule and the same message: the HTTP status is the one of the
// binary answer's code, and the body is the binary answer's message.
func TestOnePathBothPorts(t *testing.T) {
	s := startREST(t, httpapi.DefaultConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, s.Addr, client.WithAutoCreate(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Produce(ctx, "t", []byte("a"), []byte("b")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		binary func() error
		method string
		path   string
		hdr    []string
		code   protocol.Code
		status int
	}{
		{"truncate past the end", func() error { _, err := c.Truncate(ctx, "t", 5); return err },
			http.MethodPatch, "/topics/t?before=5", nil, protocol.CodeOffsetOutOfRange, http.StatusRequestedRangeNotSatisfiable},
		{"truncate before a negative offset", func() error { _, err := c.Truncate(ctx, "t", -1); return err },
			http.MethodPatch, "/topics/t?before=-1", nil, protocol.CodeInvalidArgument, http.StatusBadRequest},
		{"info of a missing topic", func() error { _, err := c.TopicInfo(ctx, "nope"); return err },
			http.MethodGet, "/topics/nope/info", nil, protocol.CodeTopicNotFound, http.StatusNotFound},
		{"produce to a missing topic", func() error { _, err := c.Produce(ctx, "nope", []byte("x")); return err },
			http.MethodPost, "/topics/nope", []string{"X-Sizes", "1"}, protocol.CodeTopicNotFound, http.StatusNotFound},
		{"group commit past the end", func() error { return c.CommitOffset(ctx, "g", "t", 99) },
			"", "", nil, protocol.CodeOffsetOutOfRange, 0},
	} {
		err := tc.binary()
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != tc.code {
			t.Errorf("%s, binary: %v, want code %v", tc.name, err, tc.code)
			continue
		}
		if tc.method == "" {
			continue
		}
		body := ""
		if tc.method == http.MethodPost {
			body = "x"
		}
		r := do(t, tc.method, s.url+tc.path, body, tc.hdr...)
		if r.code != tc.status {
			t.Errorf("%s, HTTP: %d %q, want %d", tc.name, r.code, r.body, tc.status)
		}
		if got := strings.TrimSpace(r.body); !strings.HasSuffix(ce.Message, got) && !strings.HasSuffix(got, ce.Message) {
			t.Errorf("%s: HTTP says %q, binary %q", tc.name, got, ce.Message)
		}
	}
}
