package server

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
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
