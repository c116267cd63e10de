package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// attackerIP is the i-th source address of row's attackers: 127.0.<row>.2
// and up (row D is 17, row 1t 18), so that neither the victim (127.0.0.1)
// nor another row shares a per-address count with them.
func attackerIP(row string, i int) string {
	n, err := strconv.Atoi(row)
	switch {
	case row == "1t":
		n = 18
	case err != nil:
		n = 17
	}
	return fmt.Sprintf("127.0.%d.%d", n, 2+i%250)
}

// dialer binds ip as the source address.
func dialer(ip string) *net.Dialer {
	return &net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
}

// rawDial connects to the binary port from ip, with TLS on the tls rig.
func (g *threatRig) rawDial(ip string) (net.Conn, error) {
	if g.tls != nil {
		return tls.DialWithDialer(dialer(ip), "tcp", g.srv.addr, g.tls)
	}
	return dialer(ip).Dial("tcp", g.srv.addr)
}

// raw2 is a binary protocol connection driven frame by frame.
type raw2 struct {
	net.Conn
	corr uint32
}

// rawHello connects from ip and says hello with token; a refused hello
// is an error.
func (g *threatRig) rawHello(ip, token string) (*raw2, error) {
	c, err := g.rawDial(ip)
	if err != nil {
		return nil, err
	}
	w := &raw2{Conn: c}
	code, _, err := w.do(func(id uint32) []byte { return protocol.AppendHelloRequest(nil, id, 1, "threats", token) })
	if err == nil && code != protocol.CodeOK {
		err = fmt.Errorf("hello: code %d", code)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return w, nil
}

// do sends one request and reads its answer (10 s at most).
func (w *raw2) do(build func(corr uint32) []byte) (protocol.Code, []byte, error) {
	w.corr++
	_ = w.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := w.Write(build(w.corr)); err != nil {
		return 0, nil, err
	}
	return readResponse(w)
}

// readResponse reads one response frame: its code and payload.
func readResponse(r io.Reader) (protocol.Code, []byte, error) {
	var l [protocol.FrameLengthSize]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(l[:])
	if n > 64<<20 {
		return 0, nil, fmt.Errorf("response length %d", n)
	}
	frame := make([]byte, 4+int(n))
	copy(frame, l[:])
	if _, err := io.ReadFull(r, frame[4:]); err != nil {
		return 0, nil, err
	}
	hdr, payload, err := protocol.ParseResponseHeader(frame)
	return hdr.Code, payload, err
}

// httpClient is an HTTP client of the rig whose connections come from ip.
func (g *threatRig) httpClient(ip string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: dialer(ip).DialContext, TLSClientConfig: g.tls, MaxIdleConnsPerHost: 4,
		DisableCompression: true}}
}

// url is the address of path on the rig's HTTP port.
func (g *threatRig) url(path string) string {
	if g.tls != nil {
		return "https://" + g.http + path
	}
	return "http://" + g.http + path
}

// request sends method on path with token (none if empty) and headers
// given as name, value pairs; it returns the status and the body read.
func (g *threatRig) request(cl *http.Client, method, path, token string, body io.Reader, hdr ...string) (int, []byte, http.Header, error) {
	req, err := http.NewRequest(method, g.url(path), body)
	if err != nil {
		return 0, nil, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header, err
}

// selfSigned writes a certificate for 127.0.0.1 and its key into dir and
// returns a client configuration trusting it.
func selfSigned(dir string) (*tls.Config, string, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", "", err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "threats"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, "", "", err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, "", "", err
	}
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return nil, "", "", err
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return nil, "", "", err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, "", "", err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}, certPath, keyPath, nil
}
