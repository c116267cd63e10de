package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ErrTLSConfig is wrapped by the errors of TLSConfigFromFiles.
var ErrTLSConfig = errors.New("client: TLS configuration")

// TLSConfigFromFiles returns the TLS configuration that hrqa's and
// haraqa-bench's -tls flags describe, for WithTLS:
//
//   - ca: a PEM file of the certificate authorities that sign the server's
//     certificate; they replace the system's roots. Empty: the system's.
//   - cert, key: a PEM certificate and its key presented to a server that
//     asks for client certificates (-tls-client-ca); both or neither.
//   - serverName: the name the server's certificate must carry (default:
//     the host of the address dialed).
//   - system: use TLS with the system's roots even when nothing else is
//     given.
//
// With all of them empty and system false it returns nil, nil: plaintext.
// Any one of them turns TLS on.
func TLSConfigFromFiles(ca, cert, key, serverName string, system bool) (*tls.Config, error) {
	if ca == "" && cert == "" && key == "" && serverName == "" && !system {
		return nil, nil
	}
	cfg := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12}
	if ca != "" {
		b, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%w: CA file: %w", ErrTLSConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrTLSConfig, ca)
		}
		cfg.RootCAs = pool
	}
	switch {
	case cert != "" && key != "":
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("%w: client certificate: %w", ErrTLSConfig, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case cert != "" || key != "":
		return nil, fmt.Errorf("%w: a client certificate needs both its certificate and its key file", ErrTLSConfig)
	}
	return cfg, nil
}
