package server

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// A Peer is one server of a -peers list: the servers that share the
// topics, as the Go client is given them, this one among them.
type Peer struct {
	// Addr is the server's binary protocol address, host:port, exactly
	// as in the list: topics are placed by rendezvous hashing of it
	// (protocol.Place), so it must be spelled as the clients spell it.
	Addr string
	// HTTP is the base URL of the server's HTTP port, "http://host:port",
	// where requests for its topics are redirected.
	HTTP string
	// Raft is the server's cluster port, host:port ("" without a
	// cluster).
	Raft string
}

// ParsePeers parses a -peers list: comma-separated binary protocol
// addresses, host:port, the list the Go client takes
// ("a:14353,b:14353,c:14353"). A peer's HTTP port is taken to be httpPort,
// this server's own, unless its entry gives it after a slash
// (host:port/httpport), which servers sharing one host need; likewise its
// cluster port (clusterPort, 0 for none) after a second slash
// (host:port/httpport/clusterport). Blank entries and repeats are
// dropped; an empty list gives no peers.
func ParsePeers(list string, httpPort int, clusterPort ...int) ([]Peer, error) {
	var peers []Peer
	var seen []string
	for entry := range strings.SplitSeq(list, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		addr, hport, hasHTTP := strings.Cut(entry, "/")
		hport, cport, hasCluster := strings.Cut(hport, "/")
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" || !validPort(port) {
			return nil, fmt.Errorf("-peers: %q is not host:port", entry)
		}
		if !hasHTTP {
			if httpPort == 0 {
				return nil, fmt.Errorf("-peers: %q gives no HTTP port, and -http is 0: write host:port/httpport", entry)
			}
			hport = strconv.Itoa(httpPort)
		} else if !validPort(hport) {
			return nil, fmt.Errorf("-peers: %q: %q is not an HTTP port", entry, hport)
		}
		raft := ""
		switch {
		case hasCluster && !validPort(cport):
			return nil, fmt.Errorf("-peers: %q: %q is not a cluster port", entry, cport)
		case hasCluster:
			raft = net.JoinHostPort(host, cport)
		case len(clusterPort) > 0 && clusterPort[0] > 0:
			raft = net.JoinHostPort(host, strconv.Itoa(clusterPort[0]))
		}
		if slices.Contains(seen, addr) {
			continue
		}
		seen = append(seen, addr)
		peers = append(peers, Peer{Addr: addr, HTTP: "http://" + net.JoinHostPort(host, hport), Raft: raft})
	}
	return peers, nil
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n > 0 && n <= 65535
}

// checkPeers refuses what -peers cannot do yet: find its own entry with a
// port picked at start, or ask peers that want a token or TLS.
func checkPeers(c *Config, tcpPort uint) error {
	switch {
	case len(c.Peers) == 0:
		return nil
	case tcpPort == 0:
		return errors.New("-peers needs a -tcp port other than 0: the server finds itself in the list by it")
	case c.AuthFile != "" && c.Cluster == nil:
		return errors.New("-peers does not work with -auth-file yet: peers are asked for topics without a token (a -cluster does, with -cluster-token-file)")
	case c.TLSCertFile != "" && c.Cluster == nil:
		return errors.New("-peers does not work with -tls-cert yet: peers are asked for topics in plaintext (a -cluster's servers speak TLS to each other)")
	}
	return nil
}
