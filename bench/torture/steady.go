package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/haraqa/haraqa/client"
)

// steady is a producer that sends one message at a time to a topic until
// halted, recording each acknowledged one; refusals for lack of space are
// counted, not fatal.
type steady struct {
	stop    chan struct{}
	done    chan struct{}
	acked   atomic.Int64
	nospace atomic.Int64
	lastOK  atomic.Int64 // Unix nanoseconds of the last acknowledged produce
	err     error        // the first other failure, once done
}

// startSteady starts producer prod on topic.
func startSteady(ctx context.Context, s *server, l *ledger, topic string, prod int) *steady {
	st := &steady{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(st.done)
		c, err := s.dial(ctx)
		if err != nil {
			st.err = err
			return
		}
		defer c.Close()
		for {
			select {
			case <-st.stop:
				return
			case <-time.After(time.Millisecond):
			}
			err := l.produce(ctx, c, topic, prod, 1)
			switch {
			case err == nil:
				st.acked.Add(1)
				st.lastOK.Store(time.Now().UnixNano())
			case errors.Is(err, client.ErrNoSpace):
				st.nospace.Add(1)
			default:
				st.err = fmt.Errorf("producer of %s: %w", topic, err)
				return
			}
		}
	}()
	return st
}

// halt stops the producer and returns its failure, if any.
func (st *steady) halt() error {
	close(st.stop)
	<-st.done
	return st.err
}

// failed reports whether the producer has stopped by itself.
func (st *steady) failed() bool {
	select {
	case <-st.done:
		return true
	default:
		return false
	}
}
