package replica

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/storage"
)

// shared is what a member's replicated logs share with their manager:
// the configuration, the store, the member's part of the cluster, the
// logger, the counters, and the background work that Close waits for.
type shared struct {
	cfg   Config
	store *storage.Store
	log   *slog.Logger
	node  atomic.Pointer[cluster.Node] // set by Start; the ports serve before it
	stats stats

	// draining: the member is stopping (Drain): produces are refused, and
	// those appended meanwhile wait for the followers whatever their acks.
	draining atomic.Bool

	pokes chan struct{} // Poke's: a reconcile is due
	done  chan struct{} // closed by Close
	wg    sync.WaitGroup
}

// stats are the member's replication counters (Stats).
type stats struct {
	leaderChanges atomic.Int64
	isrChanges    atomic.Int64
	truncations   atomic.Int64
	repairs       atomic.Int64 // logs cut at a range unreadable on every volume (repair)
	fetchedBytes  atomic.Int64
}

// Poke asks for a reconcile with the cluster's metadata: the node's
// OnChange. It never blocks.
func (sh *shared) Poke() {
	select {
	case sh.pokes <- struct{}{}:
	default:
	}
}

// untilClosed returns a context that ends after d, or once the manager
// is closed.
func (sh *shared) untilClosed(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	go func() {
		select {
		case <-sh.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// httpOf returns a member's HTTP base URL.
func (sh *shared) httpOf(id string) string {
	n := sh.node.Load()
	if id == "" || n == nil {
		return ""
	}
	mb, _ := n.Member(id)
	return mb.HTTP
}

func (sh *shared) notLeader(topic, leader string) error {
	return &service.NotLeaderError{Topic: topic, Leader: leader, LeaderHTTP: sh.httpOf(leader)}
}

// inContact reports whether this member may act on its replicated topics.
func (sh *shared) inContact() bool {
	n := sh.node.Load()
	return n != nil && n.InContact(sh.cfg.Lease)
}
