package auth

import "errors"

var (
	// ErrParse: the auth file breaks the format; the error names the line.
	ErrParse = errors.New("auth: bad auth file")
	// ErrUnauthenticated: no token, or a token the rules do not hold.
	ErrUnauthenticated = errors.New("auth: unauthenticated")
	// ErrForbidden: the token does not allow the request.
	ErrForbidden = errors.New("auth: forbidden")
	// ErrTooManyFailures: a token the rules do not hold, which failed too
	// often from the remote address, or one of too many distinct failing
	// tokens from it (see Limiter). A valid token never gets it.
	ErrTooManyFailures = errors.New("auth: too many failed authentications")
)
