package deploy

import (
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// loadManifests decodes every file in kubernetes/.
func loadManifests(t *testing.T) objects { return loadFiles(t, "kubernetes/*.yaml") }

// loadFiles decodes every file that matches pattern.
func loadFiles(t *testing.T, pattern string) objects {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests match %s: %v", pattern, err)
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
// three pods' args as one cluster on loopback, over TLS between the
// servers with a certificate of the names cert-manager/certificate.yaml
// asks for (and 127.0.0.1, which the pods' names are mapped to): a topic
// created through a client given every pod lives on all three, all in
// sync, and a produce with acks=all is answered.
func TestKubernetesManifests(t *testing.T) {
	s := haraqa(t)
	o := loadManifests(t)
	sts := checkObjects(t, s, o, want{replicas: 3, size: "10Gi", tls: true, clusterCA: true, authFile: true, cluster: &manifestsCluster})
	names := checkCertManager(t, sts)
	if t.Failed() {
		return
	}
	ps := startPods(t, s, sts, testAuth(), inNamespace(names, "default", testNamespace)...)
	checkServerCert(t, ps, sts, manifestsCluster.domain)
	ps.exercise(t, 3)
	ps.stop(t)
}

// checkCertManager checks kubernetes/cert-manager: a self-signed Issuer
// signs a CA Certificate, whose Secret a CA Issuer signs the servers'
// Certificate with (checkCertificate), for the namespace "default" its
// names are written for. It returns the servers' certificate's names.
func checkCertManager(t *testing.T, sts *appsv1.StatefulSet) []string {
	t.Helper()
	o := loadFiles(t, "kubernetes/cert-manager/*.yaml")
	if len(o.certificates) != 2 || len(o.issuers) != 2 || len(o.statefulSets)+len(o.services)+len(o.secrets) != 0 {
		t.Fatalf("kubernetes/cert-manager: %d Certificates, %d Issuers, want 2 and 2 and nothing else", len(o.certificates), len(o.issuers))
	}
	issuers := map[string]*issuer{}
	for _, is := range o.issuers {
		issuers[is.Name] = is
	}
	ca, srv := o.certificates[0], o.certificates[1]
	if ca.Spec.IsCA {
		if is := issuers[ca.Spec.IssuerRef.Name]; is == nil || is.Spec.SelfSigned == nil || ca.Spec.IssuerRef.Kind != "Issuer" {
			t.Errorf("the CA %s is not issued by a self-signed Issuer of the file: %+v", ca.Name, ca.Spec.IssuerRef)
		}
	} else {
		t.Errorf("the first Certificate, %s, is not a CA", ca.Name)
	}
	if is := issuers[srv.Spec.IssuerRef.Name]; is == nil || is.Spec.CA == nil || is.Spec.CA.SecretName != ca.Spec.SecretName || srv.Spec.IssuerRef.Kind != "Issuer" {
		t.Errorf("the servers' Certificate %s is not issued by the CA's Issuer (%+v)", srv.Name, srv.Spec.IssuerRef)
	}
	return checkCertificate(t, srv, sts, "default", manifestsCluster.domain)
}
