// Package deploy holds no code, only the tests of what deploys haraqa: the
// container image (../Dockerfile, built by make image), the Kubernetes
// manifests in kubernetes/, the Helm chart in helm/haraqa and the Grafana
// dashboard in grafana/. Every object is decoded strictly into the
// k8s.io/api types, checked against the server's own flags, ports and
// health paths, and run where it can be: the image with podman or docker,
// the manifests' server arguments with the server binary on loopback, a
// cluster's pods as that many server processes (cluster_test.go), which
// are also restarted one at a time as a rolling upgrade does
// (rolling_test.go) and scraped for every metric the dashboard names
// (grafana_test.go).
//
// It is a module of its own so that Helm and the Kubernetes API stay out
// of the main module's dependencies: go test ./... at the repository's
// root does not enter it; make test runs it (cd deploy && go test ./...).
package deploy
