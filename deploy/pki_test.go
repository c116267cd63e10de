package deploy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and the DNS
// names given, and a client certificate, written as a kubernetes.io/tls
// Secret mounts them: tls.crt, tls.key and ca.crt in dir. The server
// certificate allows client authentication too, as the servers of a
// cluster present it to each other (docs/replication.md, "TLS between the
// servers").
type testPKI struct {
	dir    string
	pool   *x509.CertPool
	client tls.Certificate
	server *x509.Certificate
}

func newTestPKI(t *testing.T, dir string, dnsNames ...string) *testPKI {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "deploy test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, names []string, usage ...x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "haraqa"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: names,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	srvDER, srvKey := leaf(2, dnsNames, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	cliDER, cliKey := leaf(3, nil, x509.ExtKeyUsageClientAuth)
	write := func(name, typ string, der []byte) []byte {
		b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return b
	}
	write("ca.crt", "CERTIFICATE", caDER)
	write("tls.crt", "CERTIFICATE", srvDER)
	write("tls.key", "EC PRIVATE KEY", marshalKey(t, srvKey))
	cli, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cliDER}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: marshalKey(t, cliKey)}))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := x509.ParseCertificate(srvDER)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{dir: dir, pool: x509.NewCertPool(), client: cli, server: srv}
	p.pool.AddCert(ca)
	return p
}

// clientConfig trusts the CA and, with mtls, presents the client certificate.
func (p *testPKI) clientConfig(mtls bool) *tls.Config {
	c := &tls.Config{RootCAs: p.pool, MinVersion: tls.VersionTLS12}
	if mtls {
		c.Certificates = []tls.Certificate{p.client}
	}
	return c
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func marshalKey(t *testing.T, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	b, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
