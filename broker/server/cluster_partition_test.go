package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/broker/server"
	"github.com/haraqa/haraqa/client"
)

// partition cuts one server off from the others' cluster ports, both
// ways, while its binary and HTTP ports stay open to clients: each
// server presents its own token ("node-I") in the cluster port's
// preamble, and each listener drops the connections it must not carry.
type partition struct {
	mu       sync.Mutex
	isolated int // -1: none
	conns    map[int][]tokenConn
}

type tokenConn struct {
	net.Conn
	from int // the dialing server, -1 if unknown
}

func newPartition() *partition { return &partition{isolated: -1, conns: map[int][]tokenConn{}} }

// cut reports whether a connection dialed by from to server to's
// cluster port is cut.
func (p *partition) cutLocked(from, to int) bool {
	return p.isolated >= 0 && (to == p.isolated) != (from == p.isolated)
}

// isolate cuts server i off, closing the connections that cross.
func (p *partition) isolate(i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isolated = i
	for to, cs := range p.conns {
		for _, c := range cs {
			if p.cutLocked(c.from, to) {
				c.Close()
			}
		}
	}
}

func (p *partition) heal() {
	p.mu.Lock()
	p.isolated = -1
	p.mu.Unlock()
}

// listener wraps server to's cluster port.
func (p *partition) listener(to int, l net.Listener) net.Listener {
	return &cutListener{Listener: l, p: p, to: to}
}

type cutListener struct {
	net.Listener
	p  *partition
	to int
}

// Accept reads a connection's preamble to learn its dialer, then hands it
// on with the preamble put back, unless the partition cuts it.
func (l *cutListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		var h [7]byte
		_, err = io.ReadFull(c, h[:])
		var tok []byte
		if err == nil {
			tok = make([]byte, binary.LittleEndian.Uint16(h[5:]))
			_, err = io.ReadFull(c, tok)
		}
		_ = c.SetReadDeadline(time.Time{})
		from := -1
		fmt.Sscanf(string(tok), "node-%d", &from)
		l.p.mu.Lock()
		if err != nil || l.p.cutLocked(from, l.to) {
			l.p.mu.Unlock()
			c.Close()
			continue
		}
		tc := tokenConn{Conn: &prefixConn{Conn: c, r: io.MultiReader(bytes.NewReader(append(h[:], tok...)), c)}, from: from}
		l.p.conns[l.to] = append(l.p.conns[l.to], tc)
		l.p.mu.Unlock()
		return tc, nil
	}
}

type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// TestClusterDeposedLeaderPartitioned: a topic's leader cut off from the
// cluster, but still reachable by clients, acknowledges nothing that is
// lost: within its lease it stops taking produces and serving reads,
// while the others elect a new leader and go on; healed, it cuts what it
// took alone and copies the new leader's log. Every message acknowledged
// with acks=all, by either leader, is there once, in order, on all
// three.
func TestClusterDeposedLeaderPartitioned(t *testing.T) {
	p := newPartition()
	// Tokens tell the dialers apart: an auth file gives each server its
	// own, with the replication right, and the test's clients one of
	// admin.
	hash := func(tok string) string { h := sha256.Sum256([]byte(tok)); return hex.EncodeToString(h[:]) }
	lines := hash("tester") + " admin *\n"
	for i := range 3 {
		lines += hash(fmt.Sprintf("node-%d", i)) + " replication *\n"
	}
	authFile := filepath.Join(t.TempDir(), "auth")
	brokertest.WriteFile(t, authFile, []byte(lines))
	tc := newTestCluster(t, 3, 3, 2, func(i int, cfg *server.Config) {
		cfg.AuthFile = authFile
		cfg.Cluster.Token = fmt.Sprintf("node-%d", i)
	})
	tc.wrap = p.listener
	tc.startAll()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const topic = "p"
	all := dialAll(t, tc.addrs, client.WithIdempotence(true), client.WithToken("tester"))
	if err := all.CreateTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	var acked []string
	producing(t, ctx, all, topic, &acked)(50)
	st := waitTopic(t, dialOneWith(t, tc.addrs[0], client.WithToken("tester")), topic, "50 messages in sync", func(st topicStatus) bool {
		return len(st.ISR) == 3 && st.HighWater == 50
	})
	old := tc.index(st.Leader)
	var others []string
	for i, a := range tc.addrs {
		if i != old {
			others = append(others, a)
		}
	}
	direct := dialOneWith(t, st.Leader, client.WithToken("tester"))
	p.isolate(old)
	cutAt := time.Now()

	// The cut-off leader, asked directly: whatever it acknowledges must
	// survive; past its lease it takes and serves nothing.
	var lateAcks int
	for i := 0; time.Since(cutAt) < 2*time.Second; i++ {
		msg := fmt.Sprintf("d%05d", i)
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := direct.Produce(pctx, topic, []byte(msg))
		pcancel()
		if err == nil {
			acked = append(acked, msg)
			if time.Since(cutAt) > time.Second {
				lateAcks++
			}
		}
	}
	if lateAcks > 0 {
		t.Errorf("the cut-off leader acknowledged %d produces more than a second after the cut (its lease is 300 ms)", lateAcks)
	}
	if _, err := direct.Consume(ctx, topic, 0, 1); !errors.Is(err, client.ErrNotLeader) {
		t.Errorf("the cut-off leader served a read after its lease: %v", err)
	}
	st2 := waitTopic(t, dialOneWith(t, others[0], client.WithToken("tester")), topic, "a new leader among the others", func(s topicStatus) bool {
		return s.Leader != "" && s.Leader != st.Leader
	})
	t.Logf("leader %s cut off; %s leads at epoch %d", st.Leader, st2.Leader, st2.Epoch)
	rest := dialAll(t, others, client.WithIdempotence(true), client.WithToken("tester"))
	producing(t, ctx, rest, topic, &acked)(50)

	// Healed, the old leader cuts what it took alone and catches up.
	p.heal()
	waitTopic(t, dialOneWith(t, others[0], client.WithToken("tester")), topic, "all three in sync again", func(s topicStatus) bool {
		return len(s.ISR) == 3
	})
	// Every server holds the same log; every acknowledged message is in
	// it once, in order (a produce that timed out may be there too).
	var ref []string
	for i, a := range tc.addrs {
		log := readTopic(t, dialOneWith(t, a, client.WithToken("tester")), topic, int64(len(acked)))
		if i == 0 {
			ref = log
		} else if !slices.Equal(ref, log) {
			t.Fatalf("%s holds %d messages, %s %d, and they differ", tc.addrs[0], len(ref), a, len(log))
		}
	}
	seen := map[string]bool{}
	next := 0
	for _, m := range ref {
		if seen[m] {
			t.Fatalf("%q twice", m)
		}
		seen[m] = true
		if next < len(acked) && m == acked[next] {
			next++
		}
	}
	if next != len(acked) {
		t.Fatalf("acknowledged message %d (%q) is missing or out of order, of %d; the log holds %d", next, acked[next], len(acked), len(ref))
	}
	t.Logf("%d acknowledged, %d in the log", len(acked), len(ref))
}

// readTopic reads topic from c to its end (as c serves it), once at
// least min messages are there.
func readTopic(t *testing.T, c *client.Client, topic string, min int64) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		info, err := c.TopicInfo(ctx, topic)
		if err == nil && info.Next >= min {
			var out []string
			for off := info.Oldest; off < info.Next; {
				msgs, err := c.Consume(ctx, topic, off, int(info.Next-off))
				if err != nil || len(msgs) == 0 {
					break
				}
				for _, m := range msgs {
					out = append(out, string(m.Value))
				}
				off += int64(len(msgs))
			}
			if int64(len(out)) == info.Next-info.Oldest {
				return out
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: cannot read %s to its end: %v", c.Servers()[0], topic, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
