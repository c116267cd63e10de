package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/haraqa/haraqa/broker/httpapi"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// Batches whose messages carry headers, compressed or not, are served as
// their values only.
func TestConsumeBatchWithHeaders(t *testing.T) {
	s := startREST(t, httpapi.Config{})
	if err := s.Store.CreateTopic("h"); err != nil {
		t.Fatal(err)
	}
	hs := []protocol.Header{{Key: []byte("trace"), Value: []byte("abc")}}
	raw := protocol.AppendHeaderMessage(nil, hs, []byte("hello"))
	raw = protocol.AppendHeaderMessage(raw, nil, []byte("x"))
	meta := protocol.BatchMeta{ProducerID: 1, Sequence: 0, Headers: true}
	for i, codec := range []protocol.Codec{protocol.CodecNone, protocol.CodecZstd} {
		meta.Sequence = uint64(i)
		if _, err := s.Log(t, "h").Append(protocol.AppendBatchRawMeta(nil, meta, codec, 2, raw), storage.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r := do(t, http.MethodGet, s.url+"/topics/h?id=0&limit=4", "")
	if r.code != http.StatusOK || r.body != "helloxhellox" || r.h.Get("X-Sizes") != "5:1:5:1" {
		t.Fatalf("got %d %q sizes %q", r.code, r.body, r.h.Get("X-Sizes"))
	}
}
