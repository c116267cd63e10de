package broker

import (
	"fmt"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/haraqa/haraqa/protocol"
)

// This file: closing idle connections (Config.IdleTimeout).
//
// No timer runs per connection and no tick looks at every connection
// often: each connection records when it last received bytes (one atomic
// store per callback that brought some), and the stall tick sweeps the
// connections every IdleTimeout/4, waking only those that received nothing
// for IdleTimeout. On its loop, a woken connection closes itself if it
// holds nothing either, or only a frame that stopped coming (idle).

// DefaultIdleTimeout is the default Config.IdleTimeout: Kafka's
// connections.max.idle.ms. The Go client drops its own connections after 9
// minutes without a request (client.WithIdleTimeout), before the server does.
const DefaultIdleTimeout = 10 * time.Minute

// track registers a new connection for the idle sweep. Runs on the loop.
func (cs *conn) track() {
	b, c := cs.b, cs.c
	if b.cfg.IdleTimeout <= 0 {
		return
	}
	cs.lastRecv.Store(time.Now().UnixNano())
	b.liveMu.Lock()
	b.live[c] = cs
	b.liveMu.Unlock()
}

// untrack forgets a closed connection. Runs on the loop.
func (b *Broker) untrack(c gnet.Conn) {
	if b.cfg.IdleTimeout <= 0 {
		return
	}
	b.liveMu.Lock()
	delete(b.live, c)
	b.liveMu.Unlock()
}

// sweepIdle wakes the connections that received nothing for IdleTimeout,
// at most every IdleTimeout/4. Runs on the tick goroutine.
func (b *Broker) sweepIdle(now time.Time) {
	if b.cfg.IdleTimeout <= 0 || now.Before(b.nextSweep) {
		return
	}
	b.nextSweep = now.Add(b.cfg.IdleTimeout / 4)
	cutoff := now.Add(-b.cfg.IdleTimeout).UnixNano()
	var due []gnet.Conn
	b.liveMu.Lock()
	for c, cs := range b.live {
		if cs.lastRecv.Load() <= cutoff {
			due = append(due, c)
		}
	}
	b.liveMu.Unlock()
	for _, c := range due {
		_ = c.Wake(nil)
	}
}

// idle reports whether a connection whose input is empty, or only part of
// a frame, has received nothing for IdleTimeout and holds nothing else: no
// request waiting for its answer (a parked consume included), no answer
// unsent, no produce being stored. A frame begun and not continued for
// that long is a client stuck or trickling nothing (a slowloris), and is
// not read. Runs on the loop.
func (cs *conn) idle() bool {
	b := cs.b
	if time.Since(time.Unix(0, cs.lastRecv.Load())) < b.cfg.IdleTimeout {
		return false
	}
	return len(cs.slots) == 0 && (cs.big == nil || cs.waitingFrame) && cs.outbound() == 0 &&
		cs.w.held.Load() == 0 && cs.w.queued.Load() == 0 && cs.w.inStore.Load() == 0 && !cs.w.busy()
}

// closeIdle sends c one CodeIdleTimeout frame (op 0, correlation id 0) and
// closes it. Every request c sent was answered, so its client knows that
// whatever it sent after those answers was not read (partial: part of a
// frame was): it may send it again on a new connection, produces
// included. Runs on the loop.
func (b *Broker) closeIdle(c gnet.Conn, partial bool) gnet.Action {
	b.stats.idleClosed.Add(1)
	what := "the connection received nothing"
	if partial {
		what = "a frame begun on the connection received no more bytes"
	}
	msg := fmt.Sprintf("idle timeout: %s for %s (-idle-timeout) and it was closed; nothing sent on it after its last answer was read", what, b.cfg.IdleTimeout)
	_, _ = c.Write(protocol.AppendErrorResponse(nil, 0, 0, protocol.CodeIdleTimeout, msg))
	return gnet.Close
}
