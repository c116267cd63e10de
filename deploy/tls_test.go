package deploy

import (
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// checkCertificate checks the cert-manager Certificate of a deployment
// whose pods run in namespace under domain: it is made into the Secret the
// pods mount for TLS, allows server and client authentication (the
// servers present it to each other as both), and names every pod as the
// other servers check it, by its host in -peers (checkCluster), and the
// client Service. It returns the DNS names, for a certificate of the
// test's CA to carry.
func checkCertificate(t *testing.T, c *certificate, sts *appsv1.StatefulSet, namespace, domain string) []string {
	t.Helper()
	var secret string
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == "tls" && v.Secret != nil {
			secret = v.Secret.SecretName
		}
	}
	if c.Spec.SecretName == "" || c.Spec.SecretName != secret {
		t.Errorf("the Certificate %s is made into the Secret %q, the pods mount %q", c.Name, c.Spec.SecretName, secret)
	}
	for _, u := range []string{"server auth", "client auth"} {
		if !slices.Contains(c.Spec.Usages, u) {
			t.Errorf("the Certificate %s allows %v, not %s", c.Name, c.Spec.Usages, u)
		}
	}
	if c.Spec.IssuerRef.Name == "" || c.Spec.IsCA {
		t.Errorf("the Certificate %s: issuer %+v, isCA %v", c.Name, c.Spec.IssuerRef, c.Spec.IsCA)
	}
	hosts := []string{fmt.Sprintf("%s.%s.svc", sts.Name, namespace)}
	for i := range int(*sts.Spec.Replicas) {
		hosts = append(hosts, fmt.Sprintf("%s-%d.%s.%s.svc.%s", sts.Name, i, sts.Spec.ServiceName, namespace, domain))
	}
	cert := &x509.Certificate{DNSNames: c.Spec.DNSNames}
	for _, h := range hosts {
		if err := cert.VerifyHostname(h); err != nil {
			t.Errorf("the Certificate %s does not name %s: %v", c.Name, h, err)
		}
	}
	if err := cert.VerifyHostname(fmt.Sprintf("%s-0.%s.%s.svc.%s", sts.Name, sts.Spec.ServiceName, otherNamespace, domain)); err == nil {
		t.Errorf("the Certificate %s names a pod of another namespace: %v", c.Name, c.Spec.DNSNames)
	}
	return c.Spec.DNSNames
}

// inNamespace is names with the namespace from replaced by to.
func inNamespace(names []string, from, to string) []string {
	var out []string
	for _, n := range names {
		labels := strings.Split(n, ".")
		for i, l := range labels {
			if l == from {
				labels[i] = to
			}
		}
		out = append(out, strings.Join(labels, "."))
	}
	return out
}

// checkServerCert checks that the certificate the pods of a test run
// present names each pod's host as the manifests' -peers spell it.
func checkServerCert(t *testing.T, ps *pods, sts *appsv1.StatefulSet, domain string) {
	t.Helper()
	for i := range ps.list {
		if err := ps.pki.server.VerifyHostname(podHost(sts, i, domain)); err != nil {
			t.Errorf("the servers' certificate: %v", err)
		}
	}
}
