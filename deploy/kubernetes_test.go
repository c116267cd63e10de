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

func TestKubernetesManifests(t *testing.T) {
	s := haraqa(t)
	o := loadManifests(t)
	sts := checkObjects(t, s, o, want{replicas: 1, size: "10Gi", authFile: true})
	if t.Failed() {
		return
	}
	runContainerArgs(t, s, sts)
}
