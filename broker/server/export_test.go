package server

import (
	"context"
	"log/slog"

	"github.com/haraqa/haraqa/broker/httpapi"
)

// PeerTimeout bounds each peer's answer to a topic lookup.
const PeerTimeout = peerTimeout

// IsSelf is isSelf, for TestIsSelf.
var IsSelf = isSelf

// NewPeerLocator returns the Locator New builds from peers, and its close.
func NewPeerLocator(peers []Peer, listen string, log *slog.Logger) (httpapi.Locator, func()) {
	l := newPeerLocator(peers, listen, log)
	return l, l.close
}

// ShutdownWithoutHandOff is Shutdown with no hand-off to the cluster: its
// connections close as a crashed server's would, and the others find it
// gone on their own.
func (s *Server) ShutdownWithoutHandOff(ctx context.Context) error {
	s.mu.Lock()
	s.noHandOff = true
	s.mu.Unlock()
	return s.Shutdown(ctx)
}
