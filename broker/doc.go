// Package broker serves haraqa's binary protocol on gnet event loops and
// translates each request into a call of the one request path, package
// broker/service, which both ports share.
//
// New builds a Broker on an opened storage.Store (and the service on it:
// Broker.Service hands it to the HTTP port); Start listens and runs the
// event loops; Shutdown refuses new requests, answers those in flight and
// closes every connection; Dead is closed if the loops die on their own.
//
// What the broker owns is what is the binary port's own:
//   - accepting (accept.go): its own listener whose goroutine hands
//     connections to gnet, backing off on EMFILE, -max-conns and
//     -max-conns-per-addr (cluster members leave both after their hello);
//   - TLS through a socket pair (tls.go, tlsout.go);
//   - framing and backpressure (conn.go): a frame is taken whole, checked
//     against -max-frame before it is buffered, and counted in the memory
//     budget shared with the HTTP port (budget.go, Broker.Reserve);
//   - dispatch and response order (dispatch.go, order.go): requests that
//     may block (appends with fsync, decoding, waits on the cluster) run on
//     the connection's worker goroutine (worker.go), never on an event
//     loop, and answers leave in request order;
//   - consumes sent from the segment files with sendfile(2) where the
//     socket takes them (consume.go), long polls woken by appends and by
//     the high-water mark of replicated topics;
//   - a follower's replica wait (op 24, replicawait.go), parked until one
//     of its topics has something to fetch;
//   - idle connections (idle.go), the per-connection control rate
//     (control.go), hello and tokens (hello.go), counters (stats.go).
//
// docs/broker.md explains each choice and docs/architecture.md draws
// the packages around this one.
package broker
