package broker

import (
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/protocol"
)

// Stats are the broker's counters since it started.
type Stats struct {
	Connections     int64 // open connections
	Requests        int64 // requests handled
	Errors          int64 // error responses sent
	ProducedMsgs    int64 // messages appended
	ProducedBytes   int64 // batch bytes appended
	ConsumedBytes   int64 // batch bytes sent to consumers and followers (replica fetches)
	ZeroCopyBytes   int64 // of ConsumedBytes, sent with sendfile(2)
	CopiedBytes     int64 // of ConsumedBytes, copied through a buffer (all of a TLS connection's)
	ParkedPolls     int64 // consumes waiting for data right now
	ClosedForFrames int64 // connections closed for an oversized or malformed frame
	AcceptErrors    int64 // failed accepts (EMFILE and the like), each retried
	RefusedConns    int64 // connections refused at the connection limit (Config.MaxConns)
	StallClosed     int64 // connections closed for not reading their responses (Config.StallTimeout)
	BufferedBytes   int64 // bytes buffered for all connections now (Config.MaxBufferedBytes)
	BudgetPauses    int64 // times a connection stopped being read for the memory budget
	IdleClosed      int64 // connections closed for idleness (Config.IdleTimeout)
	BudgetClosed    int64 // connections closed over the memory budget for the largest unfinished frames
	HelloTimeouts   int64 // connections closed for no hello in time (Config.HelloTimeout)
	AuthFailures    int64 // hellos refused: unknown token, or too many failures (Config.Auth)
	TLSErrors       int64 // TLS handshakes that failed (Config.TLS)
	TurnsYielded    int64 // times a connection's frames gave its event loop up after loopTurn, with frames left
	ControlPauses   int64 // times a connection was not read for a while, over Config.MaxControlRate
	MemberConns     int64 // open connections of cluster members, outside MaxConns and MaxConnsPerAddr
}

type counters struct {
	connections, requests, errors                atomic.Int64
	producedMsgs, producedBytes, consumedBytes   atomic.Int64
	zeroCopyBytes, copiedBytes, parked, badFrame atomic.Int64
	acceptErrors, refusedConns, stallClosed      atomic.Int64
	buffered, budgetPauses, idleClosed           atomic.Int64
	authFailures, budgetClosed, helloTimeouts    atomic.Int64
	pending                                      atomic.Int64 // responses owed
	tlsErrors, turnsYielded, controlPauses       atomic.Int64
	memberConns                                  atomic.Int64
}

// Stats returns the counters.
func (b *Broker) Stats() Stats {
	s := &b.stats
	return Stats{
		Connections:     s.connections.Load(),
		Requests:        s.requests.Load(),
		Errors:          s.errors.Load(),
		ProducedMsgs:    s.producedMsgs.Load(),
		ProducedBytes:   s.producedBytes.Load(),
		ConsumedBytes:   s.consumedBytes.Load(),
		ZeroCopyBytes:   s.zeroCopyBytes.Load(),
		CopiedBytes:     s.copiedBytes.Load(),
		ParkedPolls:     s.parked.Load(),
		ClosedForFrames: s.badFrame.Load(),
		AcceptErrors:    s.acceptErrors.Load(),
		RefusedConns:    s.refusedConns.Load(),
		StallClosed:     s.stallClosed.Load(),
		BufferedBytes:   s.buffered.Load(),
		BudgetPauses:    s.budgetPauses.Load(),
		IdleClosed:      s.idleClosed.Load(),
		BudgetClosed:    s.budgetClosed.Load(),
		HelloTimeouts:   s.helloTimeouts.Load(),
		AuthFailures:    s.authFailures.Load(),
		TLSErrors:       s.tlsErrors.Load(),
		TurnsYielded:    s.turnsYielded.Load(),
		ControlPauses:   s.controlPauses.Load(),
		MemberConns:     s.memberConns.Load(),
	}
}

// clock is the arrival time of a request when requests are observed.
func (b *Broker) clock() time.Time {
	if b.cfg.ObserveRequest == nil {
		return time.Time{}
	}
	return time.Now()
}

func (b *Broker) observe(op protocol.Op, waited bool, start time.Time) {
	if b.cfg.ObserveRequest != nil {
		b.cfg.ObserveRequest(op, waited, time.Since(start))
	}
}
