package service

import "github.com/haraqa/haraqa/storage"

// This file: what the metrics read of the store, which checks no right:
// the HTTP port serves /metrics under its own rule (-auth-metrics).

type (
	// StoreStats are the store's counters (storage's).
	StoreStats = storage.Stats
	// TopicStats are a topic's gauges (storage's).
	TopicStats = storage.TopicStats
)

// StoreStats returns the store's counters.
func (s *Service) StoreStats() StoreStats { return s.store.Stats() }

// TopicStats returns every topic's gauges.
func (s *Service) TopicStats() []TopicStats { return s.store.TopicStats() }

// GroupStats returns every topic's groups, by topic: the store's, and
// those of the replicated topics this server leads (held by the
// cluster).
func (s *Service) GroupStats() map[string][]GroupOffset {
	gs := s.store.GroupStats()
	if s.view != nil {
		for topic, groups := range s.view.GroupStats() {
			if gs == nil {
				gs = map[string][]GroupOffset{}
			}
			gs[topic] = groups
		}
	}
	return gs
}

// Ready returns nil when the server serves what it holds: always
// without a cluster; in one, once it is in step with it and caught up on
// its replicated topics (ClusterView.Ready).
func (s *Service) Ready() error {
	if s.view == nil {
		return nil
	}
	return s.view.Ready()
}

// Volumes returns the volume directories, in order. They are server
// paths: for operators' metrics, never for error messages.
func (s *Service) Volumes() []string { return s.store.Volumes() }

// VolumeFree returns each volume's free bytes, in the order of Volumes.
func (s *Service) VolumeFree() []int64 { return s.store.VolumeFree() }
