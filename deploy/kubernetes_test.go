package deploy

import (
	"os"
	"path/filepath"
	"testing"
)

// loadManifests decodes every file in kubernetes/.
func loadManifests(t *testing.T) objects {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in kubernetes/: %v", err)
	}
	var o objects
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := decode(f, data, &o); err != nil {
			t.Fatal(err)
		}
	}
	return o
}

// manifestsCluster is the cluster deploy/kubernetes describes: three pods,
// every topic on all three, acks=all with two in sync.
var manifestsCluster = clusterWant{replicas: 3, minInsync: 2, domain: "cluster.local", tokenKey: "cluster-token"}

// TestKubernetesManifests checks the plain manifests, then runs their
// three pods' args as one cluster on loopback: a topic created through a
// client given every pod lives on all three, all in sync, and a produce
// with acks=all is answered.
func TestKubernetesManifests(t *testing.T) {
	s := haraqa(t)
	o := loadManifests(t)
	sts := checkObjects(t, s, o, want{replicas: 3, size: "10Gi", authFile: true, cluster: &manifestsCluster})
	if t.Failed() {
		return
	}
	ps := startPods(t, s, sts, testAuth())
	ps.exercise(t, 3)
	ps.stop(t)
}
