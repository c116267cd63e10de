package server

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// This file: the TLS material of both ports, read from PEM files and
// reloaded without dropping a connection. Each handshake asks for the
// configuration in force (tls.Config.GetConfigForClient), so a reload
// changes what new connections are served and leaves established ones
// alone. A reload that fails (a missing file, a key that does not match
// its certificate, a half-written file) keeps the previous configuration
// and says why in the log.

// DefaultTLSReloadCheck is how often the certificate files' modification
// times are compared with those last loaded.
const DefaultTLSReloadCheck = 5 * time.Second

// ErrTLSFiles is wrapped by the errors of loading or reloading the TLS
// files.
var ErrTLSFiles = errors.New("server: TLS files")

// certs holds the TLS configuration made from the files and reloads it.
type certs struct {
	certFile, keyFile, caFile string
	log                       *slog.Logger

	cur atomic.Pointer[tls.Config] // what handshakes get now

	mu     sync.Mutex // serializes loads; guards stamps
	stamps []stamp    // of the files as last loaded (or tried)

	// peers is how the cluster's servers speak TLS to each other: set
	// by startCluster before the replica manager dials anyone; nil
	// without a cluster.
	peers atomic.Pointer[peerTLS]
}

// stamp is what tells a file changed.
type stamp struct {
	mod  time.Time
	size int64
}

// loadCerts reads the files once; an error here stops the server's start.
func loadCerts(certFile, keyFile, caFile string, log *slog.Logger) (*certs, error) {
	c := &certs{certFile: certFile, keyFile: keyFile, caFile: caFile, log: log}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.loadLocked(); err != nil {
		return nil, err
	}
	return c, nil
}

// files are the paths loaded, the client CA last if any.
func (c *certs) files() []string {
	if c.caFile == "" {
		return []string{c.certFile, c.keyFile}
	}
	return []string{c.certFile, c.keyFile, c.caFile}
}

// statLocked returns the files' stamps. mu must be held.
func (c *certs) statLocked() []stamp {
	files := c.files()
	st := make([]stamp, len(files))
	for i, f := range files {
		if fi, err := os.Stat(f); err == nil {
			st[i] = stamp{mod: fi.ModTime(), size: fi.Size()}
		}
	}
	return st
}

// loadLocked reads the files and, if they make a configuration, puts it in
// force. mu must be held.
func (c *certs) loadLocked() error {
	c.stamps = c.statLocked()
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("%w: certificate %s and key %s: %w", ErrTLSFiles, c.certFile, c.keyFile, err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{pair},
		MinVersion:   tls.VersionTLS12,
		// Full-size records from the start: the ports move bulk data, and
		// smaller first records help only a browser's first paint.
		DynamicRecordSizingDisabled: true,
	}
	if c.caFile != "" {
		b, err := os.ReadFile(c.caFile)
		if err != nil {
			return fmt.Errorf("%w: client CA: %w", ErrTLSFiles, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return fmt.Errorf("%w: client CA %s holds no PEM certificate", ErrTLSFiles, c.caFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	if old := c.cur.Load(); old != nil && sameCert(old, cfg) && old.ClientCAs.Equal(cfg.ClientCAs) {
		return nil // rewritten with the same contents
	}
	c.cur.Store(cfg)
	attrs := []any{"cert", c.certFile}
	if leaf := pair.Leaf; leaf != nil {
		attrs = append(attrs, "subject", leaf.Subject.String(), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
		if time.Now().After(leaf.NotAfter) {
			c.log.Warn("the TLS certificate has expired: clients will refuse it", attrs...)
		}
	}
	if c.caFile != "" {
		attrs = append(attrs, "client_ca", c.caFile)
	}
	c.log.Info("TLS certificate loaded", attrs...)
	return nil
}

// sameCert reports whether a and b present the same certificate chain.
func sameCert(a, b *tls.Config) bool {
	ca, cb := a.Certificates[0].Certificate, b.Certificates[0].Certificate
	if len(ca) != len(cb) {
		return false
	}
	for i := range ca {
		if !bytes.Equal(ca[i], cb[i]) {
			return false
		}
	}
	return true
}

// reload reads the files again. On failure the configuration in force
// stays, and the error says why.
func (c *certs) reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loadLocked()
}

// reloadIfChanged reloads when a file's modification time or size differs
// from when it was last loaded. A failed load is not tried again until a
// file changes once more (a certificate and its key written one after the
// other change twice).
func (c *certs) reloadIfChanged() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.statLocked()
	changed := false
	for i := range now {
		changed = changed || !now[i].mod.Equal(c.stamps[i].mod) || now[i].size != c.stamps[i].size
	}
	if !changed {
		return
	}
	if err := c.loadLocked(); err != nil {
		c.log.Error("TLS files changed but cannot be loaded; keeping the previous certificate", "err", err)
	}
}

// watch calls reloadIfChanged every interval until stop is closed.
func (c *certs) watch(interval time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			c.reloadIfChanged()
		}
	}
}

// config is the configuration both ports are given: each handshake takes
// the one in force.
func (c *certs) config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return c.cur.Load(), nil
		},
	}
}

// ErrPeerCert is wrapped by the errors of checking the certificate a
// cluster member presents on the cluster port.
var ErrPeerCert = errors.New("server: cluster member certificate")

// peerTLS is how the servers of a cluster speak TLS to each other, on the
// cluster port and on a follower's fetch from its leader's binary port.
// Each presents its own certificate, the one its ports serve (reloaded
// with them), and verifies the other's against roots as a server
// certificate (extended key usage serverAuth, or none): when it dials, for
// the host of the address it dials, as -peers spells it; when it accepts
// on the cluster port, for the host of one of the -peers entries. So only
// a server whose certificate the cluster's CA issued for a member's name
// takes part, whichever CA the roots are (the system's included).
//
// The roots are read once, at start; the certificate is reloaded.
type peerTLS struct {
	certs *certs
	roots *x509.CertPool // nil: the system's
	hosts []string       // of -peers, each once
}

// newPeerTLS loads the CA file (empty: the system's roots) the members'
// certificates are verified against.
func newPeerTLS(c *certs, caFile string, hosts []string) (*peerTLS, error) {
	p := &peerTLS{certs: c}
	for _, h := range hosts {
		if !slices.Contains(p.hosts, h) {
			p.hosts = append(p.hosts, h)
		}
	}
	if caFile == "" {
		return p, nil
	}
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("%w: cluster CA: %w", ErrTLSFiles, err)
	}
	p.roots = x509.NewCertPool()
	if !p.roots.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%w: cluster CA %s holds no PEM certificate", ErrTLSFiles, caFile)
	}
	return p, nil
}

// cert is this server's certificate in force.
func (p *peerTLS) cert() *tls.Certificate { return &p.certs.cur.Load().Certificates[0] }

// serverConfig is the cluster port's configuration: it requires a
// member's certificate.
func (p *peerTLS) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion:                  tls.VersionTLS12,
		DynamicRecordSizingDisabled: true,
		GetCertificate:              func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return p.cert(), nil },
		// Verified by verifyMember: the library's own check of a client
		// certificate checks no name, and wants clientAuth where a
		// member presents its server certificate.
		ClientAuth:       tls.RequireAnyClientCert,
		VerifyConnection: p.verifyMember,
	}
}

// clientConfig is the configuration of a connection to another member,
// on its cluster port or its binary port. Its ServerName is left empty:
// the dialer sets it to the host it dials (package cluster's transport,
// and crypto/tls's Dialer under the client package).
func (p *peerTLS) clientConfig() *tls.Config {
	return &tls.Config{
		MinVersion:                  tls.VersionTLS12,
		DynamicRecordSizingDisabled: true,
		RootCAs:                     p.roots,
		// Presented when the other side asks: always on the cluster port,
		// on a binary port with -tls-client-ca.
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return p.cert(), nil },
	}
}

// verifyMember accepts the certificate of a connection to the cluster
// port if the roots issued it as a server certificate for one of the
// -peers hosts.
func (p *peerTLS) verifyMember(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: none presented", ErrPeerCert)
	}
	leaf := cs.PeerCertificates[0]
	opts := x509.VerifyOptions{Roots: p.roots, Intermediates: x509.NewCertPool(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := leaf.Verify(opts); err != nil {
		return fmt.Errorf("%w: %q: %w", ErrPeerCert, leaf.Subject.String(), err)
	}
	for _, h := range p.hosts {
		if leaf.VerifyHostname(h) == nil {
			return nil
		}
	}
	return fmt.Errorf("%w: %q names none of the -peers hosts (%s)", ErrPeerCert, leaf.Subject.String(), strings.Join(p.hosts, ", "))
}
