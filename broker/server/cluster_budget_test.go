package server_test

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/cluster"
	"github.com/haraqa/haraqa/broker/server"
)

// TestClusterFitsTheDescriptorBudget: in a cluster, the defaults of
// -max-conns, -max-http-conns and -max-open-files leave the cluster
// port's descriptors (cluster.Descriptors) out, so that all of them and
// the reserve fit the descriptor limit; values given are kept.
func TestClusterFitsTheDescriptorBudget(t *testing.T) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 || rl.Cur < 2*cluster.Descriptors {
		t.Skipf("descriptor limit %d: the defaults are capped", rl.Cur)
	}
	clustered := func() server.Config {
		cfg := server.DefaultConfig(t.TempDir())
		cfg.Broker.Addr = "127.0.0.1:14353"
		peers, err := server.ParsePeers("127.0.0.1:14353/4353/14355", 4353, 14355)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Peers = peers
		cfg.Cluster = &server.ClusterConfig{Addr: "127.0.0.1:14355", Replicas: 1, MinInsync: 1, Token: testSecret}
		return cfg
	}
	cfg := clustered()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	nofile := int(rl.Cur)
	sum := cfg.Broker.MaxConns + cfg.MaxHTTPConns + cfg.Storage.MaxOpenFiles + broker.DescriptorReserve + cluster.Descriptors
	if sum > nofile {
		t.Errorf("conns %d + HTTP conns %d + files %d + reserve %d + cluster %d = %d, over the limit %d",
			cfg.Broker.MaxConns, cfg.MaxHTTPConns, cfg.Storage.MaxOpenFiles, broker.DescriptorReserve, cluster.Descriptors, sum, nofile)
	}
	if cfg.Broker.MaxConns >= broker.DefaultMaxConns() {
		t.Errorf("max conns %d in a cluster, the default without one %d", cfg.Broker.MaxConns, broker.DefaultMaxConns())
	}
	if err := cfg.Validate(); err != nil || cfg.Broker.MaxConns != broker.DefaultMaxConnsFor(nofile-cluster.Descriptors) {
		t.Errorf("validated twice: max conns %d (%v)", cfg.Broker.MaxConns, err)
	}
	given := clustered()
	given.Broker.MaxConns = 100
	if err := given.Validate(); err != nil || given.Broker.MaxConns != 100 {
		t.Errorf("a max conns given: %d (%v), want 100", given.Broker.MaxConns, err)
	}
}
