// Package adminreq lets package client/admin send its requests through a
// *client.Client (its connections, token, TLS, retries and routing over
// several servers) without package client exporting a raw request call.
// Package client sets Do when it is initialized.
package adminreq

import (
	"context"

	"github.com/haraqa/haraqa/protocol"
)

// Do sends one request on c, a *client.Client, and returns the payload of
// a successful answer; a server's refusal is a *client.Error. With topic
// set, a client of several servers sends it to the server topic lives on
// (placed there when none has it); with topic "", to its servers in turn
// until one answers. build appends the request frame.
var Do func(ctx context.Context, c any, topic string, op protocol.Op, build func(dst []byte, corrID uint32) []byte) ([]byte, error)
