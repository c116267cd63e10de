package admin

import "errors"

// ErrBadStatus: the server's cluster status does not decode.
var ErrBadStatus = errors.New("admin: the server's cluster status does not decode")
