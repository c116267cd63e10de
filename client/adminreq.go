package client

import (
	"context"
	"fmt"

	"github.com/haraqa/haraqa/client/internal/adminreq"
	"github.com/haraqa/haraqa/protocol"
)

// This file: the requests of package client/admin (cluster and
// replication administration), sent through a Client.

func init() { adminreq.Do = adminDo }

// adminDo implements adminreq.Do.
func adminDo(ctx context.Context, cv any, topic string, op protocol.Op, build func(dst []byte, corrID uint32) []byte) ([]byte, error) {
	c, ok := cv.(*Client)
	if !ok || c == nil {
		return nil, fmt.Errorf("%w: admin: not a *client.Client", ErrInvalidArgument)
	}
	return c.adminDo(ctx, topic, op, build)
}

// adminDo sends an admin request: on a Client of several servers, to the
// server topic lives on (see adminreq.Do), or, for topic "", to any.
func (c *Client) adminDo(ctx context.Context, topic string, op protocol.Op, build func(dst []byte, corrID uint32) []byte) ([]byte, error) {
	if c.cl == nil {
		return c.do(ctx, op, 0, true, build)
	}
	var p []byte
	run := func(s *Client) (err error) { p, err = s.adminDo(ctx, "", op, build); return err }
	if topic != "" {
		return p, c.cl.onTopic(ctx, topic, true, run)
	}
	return p, c.cl.anyServer(ctx, run)
}
