package broker_test

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/storage"
)

// TestShutdownDuringTLSHandshakes: Shutdown returns while TLS connections
// are handshaking and enrolling with the event loops, however the two
// interleave (an event loop that is stopping never answers a registration,
// and Shutdown waits for the goroutines enrolling).
func TestShutdownDuringTLSHandshakes(t *testing.T) {
	ca := brokertest.NewCA(t, "test-ca")
	serverTLS := brokertest.ServerTLS(t, ca.Server(t))
	clientTLS := &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1"}
	for round := range 5 {
		s := brokertest.Start(t, 1, func(_ *storage.Options, c *broker.Config) { c.TLS = serverTLS })
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				nc, err := net.DialTimeout("tcp", s.Addr, ioTimeout)
				if err != nil {
					return // the listener may be closed already
				}
				defer nc.Close()
				tc := tls.Client(nc, clientTLS)
				ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
				defer cancel()
				_ = tc.HandshakeContext(ctx)
			})
		}
		done := make(chan error, 1)
		// No deadline: a shutdown that waits for a lost registration hangs.
		go func() { done <- s.Server.Shutdown(context.Background()) }()
		select {
		case err := <-done:
			if err != nil {
				t.Logf("round %d: close: %v", round, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: Shutdown did not return during TLS handshakes", round)
		}
		wg.Wait()
	}
}
