package client

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// A request whose write fails before any of its bytes left is reported as
// not sent, so the caller may retry it; the connection is failed.
func TestWriteFailureMarksRequestsNotSent(t *testing.T) {
	local, remote := net.Pipe()
	remote.Close() // every write fails at once, nothing written
	c := &conn{nc: local, pending: make(map[uint32]waiter), done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, sent := c.roundTrip(ctx, nil, func(dst []byte, id uint32) []byte {
		return protocol.AppendPingRequest(dst, id)
	})
	if sent || !errors.Is(resp.err, ErrConnection) || !errors.Is(resp.err, errNotSent) {
		t.Fatalf("roundTrip over a closed pipe: sent %v, err %v; want not sent, ErrConnection", sent, resp.err)
	}
	if !c.dead() {
		t.Fatal("the connection is not failed after a write error")
	}
	if _, _, err := c.send(time.Time{}, func(dst []byte, id uint32) []byte { return dst }, nil); !errors.Is(err, ErrConnection) {
		t.Fatalf("send on a failed connection: %v", err)
	}
}

// After a partial write, the frames wholly after the bytes written are not
// sent; the frame cut short may have reached the server.
func TestUnsentFramesAfterPartialWrite(t *testing.T) {
	ids, ends := []uint32{7, 8, 9}, []int{10, 25, 40}
	for _, c := range []struct {
		n    int
		want []uint32
	}{{0, []uint32{7, 8, 9}}, {10, []uint32{8, 9}}, {12, []uint32{9}}, {40, nil}} {
		if got := unsentFrames(ids, ends, c.n); !slices.Equal(got, c.want) {
			t.Errorf("after %d of 40 bytes: unsent %v, want %v", c.n, got, c.want)
		}
	}
}
