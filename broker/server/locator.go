package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/haraqa/haraqa/broker/httpapi"
	"github.com/haraqa/haraqa/broker/peer"
	"github.com/haraqa/haraqa/protocol"
)

// Bounds of a topic lookup among the peers.
const (
	// peerTimeout bounds each peer's answer, the dial included (as the
	// Go client's DefaultLocateTimeout).
	peerTimeout = 2 * time.Second
	// peerDownFor is how long a peer that did not answer is taken as down
	// without asking it again, so that requests fail at once meanwhile.
	peerDownFor = 2 * time.Second
	// locateTTL is how long the peer a topic was found on is remembered.
	// That no peer had a topic is not remembered: it may be created on
	// one (through a redirect from here) the next moment.
	locateTTL = 5 * time.Second
	// locateCacheSize bounds the answers remembered.
	locateCacheSize = 4096
)

// peerLocator is the httpapi.Locator New builds from Config.Peers (the
// -peers flag): it asks the other servers of the list, over the binary
// protocol, whether they have a topic, and places a new one as the Go
// client does (protocol.Place over the whole list, this server included).
type peerLocator struct {
	peers []Peer
	self  []bool   // peers[i] is this server
	addrs []string // the peers' binary addresses, for protocol.Place
	log   *slog.Logger

	mu      sync.Mutex
	closed  bool         // by close: no more connections are dialed
	conns   []*peer.Conn // dialed on first use, again once broken; nil for self
	down    []time.Time  // taken as down until then
	downErr []error      // why
	cache   map[string]located
}

// located is an answer: the peer a topic is on, -1 for none.
type located struct {
	peer    int
	expires time.Time
}

var _ httpapi.Locator = (*peerLocator)(nil)

// newPeerLocator recognises this server in peers by its binary address
// listen (see isSelf) and logs the list.
func newPeerLocator(peers []Peer, listen string, log *slog.Logger) *peerLocator {
	l := &peerLocator{peers: peers, log: log, cache: make(map[string]located),
		self: make([]bool, len(peers)), conns: make([]*peer.Conn, len(peers)),
		down: make([]time.Time, len(peers)), downErr: make([]error, len(peers))}
	var selves []string
	for i, p := range peers {
		l.addrs = append(l.addrs, p.Addr)
		if l.self[i] = isSelf(p.Addr, listen); l.self[i] {
			selves = append(selves, p.Addr)
		}
	}
	if len(selves) == 0 {
		log.Warn("-peers does not list this server: no new topic is placed on it", "listen", listen, "peers", strings.Join(l.addrs, ","))
	} else {
		log.Info("peers", "peers", strings.Join(l.addrs, ","), "self", strings.Join(selves, ","))
	}
	return l
}

// Locate implements httpapi.Locator.
func (l *peerLocator) Locate(ctx context.Context, topic string, create bool) (string, bool, error) {
	now := time.Now()
	l.mu.Lock()
	c, ok := l.cache[topic]
	l.mu.Unlock()
	if !ok || now.After(c.expires) {
		var err error
		if c.peer, err = l.find(ctx, topic); err != nil {
			return "", false, err
		}
		if c.peer >= 0 {
			l.remember(topic, c.peer, now)
		}
	}
	if c.peer >= 0 {
		return l.peers[c.peer].HTTP, false, nil
	}
	if !create {
		return "", true, nil // on no server: this one's 404
	}
	i := protocol.Place(topic, l.addrs)
	if i < 0 || l.self[i] {
		return "", true, nil
	}
	return l.peers[i].HTTP, false, nil
}

// find asks every other peer, in parallel, whether it has topic, and
// returns the first that does, or -1 if every peer answered that it does
// not. A peer that does not answer within peerTimeout, or failed to in
// the last peerDownFor, fails the lookup with an error naming it: the
// topic may be there.
func (l *peerLocator) find(ctx context.Context, topic string) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		peer int
		err  error
	}
	answers := make(chan answer, len(l.peers))
	asked := 0
	var downs []error
	for i := range l.peers {
		if l.self[i] {
			continue
		}
		if err := l.isDown(i); err != nil {
			downs = append(downs, err)
			continue
		}
		asked++
		go func() {
			actx, cancel := context.WithTimeout(ctx, peerTimeout)
			defer cancel()
			answers <- answer{i, l.ask(actx, i, topic)}
		}()
	}
	for range asked {
		a := <-answers
		switch {
		case a.err == nil:
			return a.peer, nil
		case errors.Is(a.err, &protocol.Error{Code: protocol.CodeTopicNotFound}):
		case ctx.Err() != nil:
			return 0, ctx.Err()
		default:
			downs = append(downs, l.markDown(a.peer, a.err))
		}
	}
	if len(downs) > 0 {
		return 0, fmt.Errorf("topic %q is not here and may be on a peer that did not answer: %w", topic, errors.Join(downs...))
	}
	return -1, nil
}

// ask asks peer i for topic's info, dialing it first if need be. A
// connection that broke is dialed again, and a request it failed is sent
// once more on the new one.
func (l *peerLocator) ask(ctx context.Context, i int, topic string) error {
	var err error
	for range 2 {
		var c *peer.Conn
		if c, err = l.conn(ctx, i); err != nil {
			return err
		}
		if _, err = c.TopicInfo(ctx, topic); !errors.Is(err, peer.ErrConnection) || ctx.Err() != nil {
			return err
		}
		l.drop(i, c)
	}
	return err
}

// conn returns the connection to peer i, dialing it if there is none or
// it broke.
func (l *peerLocator) conn(ctx context.Context, i int) (*peer.Conn, error) {
	l.mu.Lock()
	c := l.conns[i]
	l.mu.Unlock()
	if c != nil && c.Err() == nil {
		return c, nil
	}
	c, err := peer.Dial(ctx, l.peers[i].Addr, peer.Options{Name: "haraqa-peers", DialTimeout: peerTimeout})
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch old := l.conns[i]; {
	case l.closed:
		c.Close()
		return nil, fmt.Errorf("%w: shut down", ErrState)
	case old != nil && old.Err() == nil:
		c.Close() // another lookup dialed it meanwhile
		return old, nil
	case old != nil:
		old.Close()
	}
	l.conns[i] = c
	return c, nil
}

// drop forgets c, peer i's connection, which broke.
func (l *peerLocator) drop(i int, c *peer.Conn) {
	c.Close()
	l.mu.Lock()
	if l.conns[i] == c {
		l.conns[i] = nil
	}
	l.mu.Unlock()
}

// isDown returns why peer i is taken as down, or nil.
func (l *peerLocator) isDown(i int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Now().Before(l.down[i]) {
		return l.downErr[i]
	}
	return nil
}

// markDown takes peer i as down for peerDownFor and returns err naming it.
func (l *peerLocator) markDown(i int, err error) error {
	err = fmt.Errorf("peer %s: %w", l.peers[i].Addr, err)
	l.mu.Lock()
	l.down[i], l.downErr[i] = time.Now().Add(peerDownFor), err
	l.mu.Unlock()
	return err
}

// remember caches an answer; past locateCacheSize the expired answers go,
// and all of them if none had.
func (l *peerLocator) remember(topic string, peer int, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.cache) >= locateCacheSize {
		for t, c := range l.cache {
			if now.After(c.expires) {
				delete(l.cache, t)
			}
		}
		if len(l.cache) >= locateCacheSize {
			clear(l.cache)
		}
	}
	l.cache[topic] = located{peer: peer, expires: now.Add(locateTTL)}
}

// close closes the peers' connections; a lookup after it dials none.
func (l *peerLocator) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for _, c := range l.conns {
		if c != nil {
			c.Close()
		}
	}
}

// isSelf reports whether peer, an entry host:port of -peers, is this
// server, which listens on listen (-listen and -tcp). The ports must be
// equal; then the host must be the -listen address, or, when that is
// 0.0.0.0 or ::, this machine: localhost, a loopback address, an address
// of one of its interfaces, its host name or a name under it
// (haraqa-0.haraqa.default.svc for the pod haraqa-0), or a name that
// resolves to one of its addresses.
func isSelf(peer, listen string) bool {
	host, port, err := net.SplitHostPort(peer)
	lhost, lport, lerr := net.SplitHostPort(listen)
	if err != nil || lerr != nil || port != lport {
		return false
	}
	if strings.EqualFold(host, lhost) {
		return true
	}
	lip := net.ParseIP(lhost)
	if lip != nil && !lip.IsUnspecified() {
		return resolvesTo(host, func(ip net.IP) bool { return ip.Equal(lip) })
	}
	if name, err := os.Hostname(); err == nil && name != "" {
		if h := strings.ToLower(host); h == strings.ToLower(name) || strings.HasPrefix(h, strings.ToLower(name)+".") {
			return true
		}
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	local, _ := net.InterfaceAddrs()
	return resolvesTo(host, func(ip net.IP) bool {
		if ip.IsLoopback() {
			return true
		}
		for _, a := range local {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
		return false
	})
}

// resolvesTo reports whether host, an IP address or a name resolved within
// a second, has an address that match accepts.
func resolvesTo(host string, match func(net.IP) bool) bool {
	if ip := net.ParseIP(host); ip != nil {
		return match(ip)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return false
	}
	for _, ip := range ips {
		if match(ip.IP) {
			return true
		}
	}
	return false
}
