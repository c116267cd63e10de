// Package deploy holds no code, only the tests of what deploys haraqa: the
// container image (../Dockerfile, built by make image), the Kubernetes
// manifests in kubernetes/ and the Helm chart in helm/haraqa. Every object
// is decoded strictly into the k8s.io/api types, checked against the
// server's own flags, ports and health paths, and run where it can be: the
// image with podman or docker, the manifests' server arguments with the
// server binary on loopback.
//
// It is a module of its own so that Helm and the Kubernetes API stay out
// of the main module's dependencies: go test ./... at the repository's
// root does not enter it; make test runs it (cd deploy && go test ./...).
package deploy
