package server

import (
	"errors"
	"fmt"
	"syscall"
)

// portError is a port that could not be listened on because another
// process holds it: its message names the flag (and make run's variable)
// that chooses another, and it unwraps to the listen error.
type portError struct {
	msg string
	err error
}

func (e *portError) Error() string { return e.msg }
func (e *portError) Unwrap() error { return e.err }

// portInUse returns err, or when it says that addr is in use, an error
// that names flag and makeVar (make run's variable, "" when make run has
// none) to choose another.
func portInUse(err error, flag, makeVar, addr string) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return err
	}
	msg := fmt.Sprintf("%s port %s is in use (another server, or make run, listens on it): choose another with %s", flag, addr, flag)
	if makeVar != "" {
		msg += fmt.Sprintf(" (make run %s=...)", makeVar)
	}
	return &portError{msg: msg, err: err}
}
