package server

import (
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
