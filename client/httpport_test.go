package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
)

// TestDialHTTPPort: dialing an HTTP port fails with ErrHTTPPort as soon as
// the HTTP server answers the first frame, not at the deadline.
func TestDialHTTPPort(t *testing.T) {
	hs := httptest.NewServer(http.NotFoundHandler())
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := client.Dial(ctx, strings.TrimPrefix(hs.URL, "http://"))
	if !errors.Is(err, client.ErrHTTPPort) || ctx.Err() != nil {
		t.Fatalf("Dial of an HTTP port: %v, want ErrHTTPPort before the deadline", err)
	}
}
