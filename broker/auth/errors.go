package auth

import "errors"

var (
	// ErrParse: the auth file breaks the format; the error names the line.
	ErrParse = errors.New("auth: bad auth file")
	// ErrUnauthenticated: no token, or a token the rules do not hold.
	ErrUnauthenticated = errors.New("auth: unauthenticated")
	// ErrForbidden: the token does not allow the request.
	ErrForbidden = errors.New("auth: forbidden")
	// ErrTooManyFailures: the remote address failed to authenticate too
	// often; it is refused for a while without its token being checked.
	ErrTooManyFailures = errors.New("auth: too many failed authentications")
)
